/** The data plane group's tables (bench/data-plane.ts), for the terminal and for docs/performance.md. */
import type { LoadResult } from './load-protocol.ts';
import { PHASES, type AppDeployResult, type DataPlaneResults, type DirectRun, type ProxyRun } from './data-plane.ts';

/** Runs disturbed by more than this share of other CPU use are marked (as in bench/report.ts). */
const DISTURBED = 0.1;

export interface DataPlaneRunInfo {
  date: string;
  machine: string;
  node: string;
  database: string;
}

function median(values: number[]): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

const int = (n: number) => (Number.isFinite(n) ? Math.round(n).toLocaleString('en-US') : 'n/a');
const ms = (n: number) => (!Number.isFinite(n) ? 'n/a' : Math.abs(n) < 10 ? n.toFixed(2) : n.toFixed(1));
/** A difference with its sign: +3.20, -12.5. */
const signedMs = (n: number) => (Number.isFinite(n) && n >= 0 ? `+${ms(n)}` : ms(n));
const pct = (n: number) => (Number.isFinite(n) ? `${Math.round(n * 100)}%` : 'n/a');
const cpuMs = (n: number | null | undefined) => (n === null || n === undefined ? 'n/a' : n.toFixed(3));

/** Median, and min to max, of a series in whole milliseconds. */
function spread(values: number[]): [string, string] {
  if (values.length === 0) return ['', ''];
  return [int(median(values)), `${int(Math.min(...values))} to ${int(Math.max(...values))}`];
}

function directSeries(app: AppDeployResult, pick: (d: DirectRun) => number | null): number[] | null {
  const values = app.direct.map(pick).filter((v): v is number => v !== null);
  return values.length === 0 ? null : values;
}

/** The app's own work as measured directly: install (and build) plus start to the first 2xx. */
function appOwnMedian(app: AppDeployResult): number {
  return median(app.direct.map((d) => (d.install ?? 0) + d.start));
}

const code = (s: string, markdown: boolean) => (markdown ? `\`${s}\`` : s);

function deployRows(apps: AppDeployResult[], markdown: boolean): string[][] {
  const rows: string[][] = [];
  const row = (title: string, owner: string, cells: (app: AppDeployResult) => [string, string]) =>
    rows.push([title, owner, ...apps.flatMap(cells)]);
  for (const phase of PHASES) row(phase.title, phase.owner, (a) => spread(a.runs.map((r) => r.phases[phase.key])));
  const bold = (s: string) => (markdown ? `**${s}**` : s);
  row(bold('POST to DEPLOYED'), 'total', (a) => spread(a.runs.map((r) => r.total)));
  row('POST to first 2xx at the stable URL', 'as a client sees it', (a) => spread(a.runs.map((r) => r.firstServed)));
  const direct = (title: string, pick: (d: DirectRun) => number | null) =>
    row(title, 'baseline, same run', (a) => {
      const values = directSeries(a, pick);
      return values === null ? ['none', ''] : spread(values);
    });
  direct('direct: install and build command, run to its end', (d) => d.install);
  direct("direct: create the app database (the platform's statements)", (d) => d.database);
  direct('direct: start command to first 2xx on the health path', (d) => d.start);
  direct(`direct: ${code('node server.js', markdown)} to first 2xx`, (d) => d.node);
  row(bold('platform overhead: POST to DEPLOYED - (direct install + direct start)'), 'platform', (a) => [
    int(median(a.runs.map((r) => r.total)) - appOwnMedian(a)),
    '',
  ]);
  row('platform overhead, share of POST to DEPLOYED', 'platform', (a) => [
    pct(1 - appOwnMedian(a) / median(a.runs.map((r) => r.total))),
    '',
  ]);
  row('sandboxed install and build - direct install and build', 'sandbox', (a) => {
    const direct = directSeries(a, (d) => d.install);
    return [direct === null ? 'none' : int(median(a.runs.map((r) => r.phases.install)) - median(direct)), ''];
  });
  row('sandboxed start until healthy - direct start', 'sandbox + 250 ms poll', (a) => [
    int(median(a.runs.map((r) => r.phases.start)) - median(a.direct.map((d) => d.start))),
    '',
  ]);
  const others = (values: (number | null)[]): [string, string] => {
    const known = values.filter((v): v is number => v !== null);
    return known.length === 0
      ? ['n/a', '']
      : [pct(median(known)), `${pct(Math.min(...known))} to ${pct(Math.max(...known))}`];
  };
  row('other CPU use during the deployments', 'noise', (a) => others(a.runs.map((r) => r.otherShare)));
  return rows;
}

function deployHeader(apps: AppDeployResult[]): string[] {
  return ['phase (ms)', 'counted as', ...apps.flatMap((a) => [`${a.title} median`, `${a.title} min to max`])];
}

function appLines(results: DataPlaneResults, markdown: boolean): string[] {
  return results.apps.map(
    (a) =>
      `${a.title}: install ${a.installCommand === null ? 'none' : code(a.installCommand, markdown)}, start ${code(a.startCommand, markdown)}, ${a.database ? 'its own database' : 'no database'}`,
  );
}

const FORM_TITLES = {
  direct: 'direct, its own port',
  bare: 'bare node:http proxy',
  host: 'stable URL, Host header',
  path: 'stable URL, /apps/<slug>/',
} as const;

function proxyRows(runs: ProxyRun[], markdown: boolean): string[][] {
  return runs.map((r) => {
    const direct = runs.find((d) => d.app === r.app && d.form === 'direct');
    const failed = (x: LoadResult) => (x.failures > 0 ? ` (${x.failures} failed!)` : '');
    const other = r.cpu === null ? 'n/a' : `${pct(r.cpu.otherShare)}${r.cpu.otherShare > DISTURBED ? ' *' : ''}`;
    const form = markdown ? FORM_TITLES[r.form].replace('/apps/<slug>/', '`/apps/<slug>/`') : FORM_TITLES[r.form];
    return [
      r.appTitle,
      form,
      int(r.result.rps) + failed(r.result),
      ms(r.result.p50),
      ms(r.result.p99),
      r.form === 'direct' || !direct ? '' : pct(r.result.rps / direct.result.rps),
      r.form === 'direct' || !direct ? '' : signedMs(r.result.p99 - direct.result.p99),
      cpuMs(r.cpu?.serviceMs),
      cpuMs(r.cpu?.appMs),
      cpuMs(r.cpu?.loadgenMs),
      other,
    ];
  });
}

const PROXY_HEADER = [
  'app',
  'addressed by',
  'req/s',
  'p50 ms',
  'p99 ms',
  'of direct req/s',
  'added p99 ms',
  'CPU ms/req: service',
  'app',
  'load gen',
  'other CPU use',
];

/** One line per finding: the platform's share, the proxy's cost, and warnings. */
export function dataPlaneSummary(results: DataPlaneResults): string[] {
  const lines: string[] = [];
  for (const a of results.apps) {
    const total = median(a.runs.map((r) => r.total));
    const own = appOwnMedian(a);
    lines.push(
      `${a.title}: POST to DEPLOYED ${int(total)} ms (median of ${a.runs.length}); the app's own install and start, run directly, ${int(own)} ms; platform overhead ${int(total - own)} ms (${pct(1 - own / total)})`,
    );
  }
  const apps = [...new Set(results.proxy.map((r) => r.app))];
  for (const app of apps) {
    const of = (form: string) => results.proxy.find((r) => r.app === app && r.form === form);
    const direct = of('direct');
    if (!direct) continue;
    const bare = of('bare');
    const parts = (['host', 'path'] as const).flatMap((form) => {
      const r = of(form);
      if (!r) return [];
      const cpu =
        r.cpu && direct.cpu
          ? `, ${(r.cpu.serviceMs - direct.cpu.serviceMs).toFixed(3)} ms of service CPU per request`
          : '';
      const ofBare = bare ? ` (${pct(r.result.rps / bare.result.rps)} of the bare proxy's)` : '';
      return [
        `${form === 'host' ? 'by Host' : 'by path'} ${pct(r.result.rps / direct.result.rps)} of direct req/s${ofBare}, p99 ${signedMs(r.result.p99 - direct.result.p99)} ms${cpu}`,
      ];
    });
    const floor = bare
      ? `; a bare node:http proxy ${pct(bare.result.rps / direct.result.rps)}, p99 ${signedMs(bare.result.p99 - direct.result.p99)} ms`
      : '';
    lines.push(`proxy, ${direct.appTitle}: ${parts.join('; ')}${floor}`);
  }
  const timed = results.apps.flatMap((a) => a.runs.map((r) => r.otherShare));
  const busyTimed = timed.filter((v) => (v ?? 0) > DISTURBED).length;
  if (busyTimed > 0)
    lines.push(
      `CAUTION: other processes used more than ${pct(DISTURBED)} of the CPUs during ${busyTimed} of ${timed.length} deployments: their times are longer and noisier than this machine can do`,
    );
  const disturbed = results.proxy.filter((r) => (r.cpu?.otherShare ?? 0) > DISTURBED);
  if (disturbed.length > 0)
    lines.push(
      `CAUTION: other processes used more than ${pct(DISTURBED)} of the CPUs during ${disturbed.length} of ${results.proxy.length} proxy runs (marked *)`,
    );
  const failed = results.proxy.filter((r) => r.result.failures > 0);
  if (failed.length > 0)
    lines.push(
      `FAILED requests in: ${failed.map((r) => `${r.appTitle} ${r.form}: ${r.result.firstFailure}`).join('; ')}`,
    );
  return lines;
}

function textTable(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) =>
    cells.map((c, i) => (i < 2 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ');
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
}

function markdownTable(header: string[], rows: string[][]): string {
  const align = header.map((_, i) => (i < 2 ? '---' : '---:'));
  return [header, align, ...rows].map((cells) => `| ${cells.join(' | ')} |`).join('\n');
}

export function dataPlaneTerminalReport(results: DataPlaneResults): string {
  const out: string[] = [];
  if (results.apps.length > 0) {
    out.push(`Create to DEPLOYED, ${results.deployments} deployments per app, one at a time (${results.isolation}):`);
    out.push(...appLines(results, false).map((l) => `  ${l}`), '');
    out.push(textTable(deployHeader(results.apps), deployRows(results.apps, false)), '');
  }
  if (results.proxy.length > 0) {
    out.push(
      `Proxy overhead: the same app instance directly and through the stable URL, ${results.connections} connections, ${results.warmupSeconds} s warm-up and ${results.durationSeconds} s measured per run:`,
    );
    out.push(textTable(PROXY_HEADER, proxyRows(results.proxy, false)), '');
  }
  out.push(...dataPlaneSummary(results).map((l) => `- ${l}`));
  return out.join('\n');
}

export function dataPlaneMarkdownReport(results: DataPlaneResults, info: DataPlaneRunInfo): string {
  const out: string[] = [
    `Run of ${info.date}: ${info.machine}; Node ${info.node}; ${info.database}. Sandbox: ${results.isolation}. This part took ${Math.round(results.elapsedSeconds)} s.`,
    '',
  ];
  if (results.apps.length > 0) {
    out.push(
      `Create to DEPLOYED: ${results.deployments} deployments per app after one warm-up, one at a time; each followed by the same app installed and started directly.`,
      '',
    );
    out.push(...appLines(results, true).map((l) => `- ${l}`), '');
    out.push(markdownTable(deployHeader(results.apps), deployRows(results.apps, true)), '');
  }
  if (results.proxy.length > 0) {
    out.push(
      `Proxy overhead: \`GET /\` of the same app instance, ${results.connections} connections, ${results.warmupSeconds} s warm-up and ${results.durationSeconds} s measured per run (CPU from /proc; * marks other CPU use above ${pct(DISTURBED)}):`,
      '',
    );
    out.push(markdownTable(PROXY_HEADER, proxyRows(results.proxy, true)), '');
  }
  out.push('In this run:', '', ...dataPlaneSummary(results).map((l) => `- ${l}`));
  return out.join('\n');
}
