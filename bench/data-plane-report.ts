/**
 * The data plane group's tables (bench/data-plane.ts), for the terminal and for docs/performance.md:
 * each figure per sandbox mode (bare: SLIPWAY_SANDBOX=none; isolated: the default, full isolation), and
 * their ratio isolated / bare, which is what a run on a noisy machine can be trusted for.
 */
import {
  MODE_KEYS,
  PHASES,
  PROXY_FORMS,
  type AppDeployResult,
  type CommandWay,
  type DataPlaneResults,
  type DeployRun,
  type DirectRun,
  type ModeKey,
  type ProxyCpu,
  type ProxyForm,
  type ProxyRun,
} from './data-plane.ts';

/** Runs disturbed by more than this share of other CPU use are marked (as in bench/report.ts). */
const DISTURBED = 0.1;
/** Below this many ms (the bare median), a ratio says nothing: only the difference is shown. */
const RATIO_FLOOR_MS = 10;

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
const signedInt = (n: number) => (Number.isFinite(n) && n >= 0 ? `+${int(n)}` : int(n));
const pct = (n: number) => (Number.isFinite(n) ? `${Math.round(n * 100)}%` : 'n/a');
/** A ratio as a factor: 1.23x. */
const times = (n: number) => (Number.isFinite(n) ? `${n.toFixed(2)}x` : 'n/a');
const cpuMs = (n: number | null | undefined) => (n === null || n === undefined ? 'n/a' : n.toFixed(3));
const code = (s: string, markdown: boolean) => (markdown ? `\`${s}\`` : s);
const bold = (s: string, markdown: boolean) => (markdown ? `**${s}**` : s);

const MODE_TITLES: Record<ModeKey, string> = { bare: 'bare', isolated: 'isolated' };
const WAY_TITLES: Record<CommandWay, string> = { direct: 'by hand', bare: 'bare', isolated: 'isolated' };

/** Median, and min to max, of a series in whole milliseconds. */
function spread(values: number[]): [string, string] {
  if (values.length === 0) return ['', ''];
  return [int(median(values)), `${int(Math.min(...values))} to ${int(Math.max(...values))}`];
}

/** isolated / bare and isolated - bare of two medians; the ratio only when the bare one is large enough. */
function compare(bare: number, isolated: number): [string, string] {
  if (!Number.isFinite(bare) || !Number.isFinite(isolated)) return ['', ''];
  return [bare >= RATIO_FLOOR_MS ? times(isolated / bare) : '', signedInt(isolated - bare)];
}

function directSeries(app: AppDeployResult, pick: (d: DirectRun) => number | null): number[] | null {
  const values = app.direct.map(pick).filter((v): v is number => v !== null);
  return values.length === 0 ? null : values;
}

/** The app's own work as measured directly: install (and build) plus start to the first 2xx. */
function appOwnMedian(app: AppDeployResult): number {
  return median(app.direct.map((d) => (d.install ?? 0) + d.start));
}

// ----- create to DEPLOYED --------------------------------------------------------------------------

const DEPLOY_HEADER = [
  'phase (ms)',
  'counted as',
  'bare median',
  'bare min to max',
  'isolated median',
  'isolated min to max',
  'isolated / bare',
  'isolated - bare',
];

/** One app's deployments, the two modes side by side. */
function deployRows(app: AppDeployResult, markdown: boolean): string[][] {
  const rows: string[][] = [];
  /** A row of a series per mode: median and range of each, then their ratio and difference. */
  const series = (title: string, owner: string, pick: (r: DeployRun) => number) => {
    const bare = app.runs.bare.map(pick);
    const isolated = app.runs.isolated.map(pick);
    rows.push([title, owner, ...spread(bare), ...spread(isolated), ...compare(median(bare), median(isolated))]);
  };
  /** A row of one derived number per mode. */
  const single = (
    title: string,
    owner: string,
    of: (runs: DeployRun[]) => number,
    { format = int, ratio = true }: { format?: (n: number) => string; ratio?: boolean } = {},
  ) => {
    const [bare, isolated] = MODE_KEYS.map((m) => of(app.runs[m])) as [number, number];
    const [factor, difference] = format === int ? compare(bare, isolated) : ['', ''];
    rows.push([title, owner, format(bare), '', format(isolated), '', ratio ? factor : '', difference]);
  };
  for (const phase of PHASES) series(phase.title, phase.owner, (r) => r.phases[phase.key]);
  series(bold('POST to DEPLOYED', markdown), 'total', (r) => r.total);
  series('POST to first 2xx at the stable URL', 'as a client sees it', (r) => r.firstServed);
  const own = appOwnMedian(app);
  single(
    bold('platform overhead: POST to DEPLOYED - (direct install + direct start)', markdown),
    'platform',
    (runs) => median(runs.map((r) => r.total)) - own,
  );
  single(
    'platform overhead, share of POST to DEPLOYED',
    'platform',
    (runs) => 1 - own / median(runs.map((r) => r.total)),
    { format: pct },
  );
  const directInstall = directSeries(app, (d) => d.install);
  if (directInstall !== null)
    single(
      'sandboxed install and build - direct install and build',
      'sandbox',
      (runs) => median(runs.map((r) => r.phases.install)) - median(directInstall),
      { ratio: false },
    );
  single(
    'sandboxed start until healthy - direct start',
    'sandbox + 50 ms poll',
    (runs) => median(runs.map((r) => r.phases.start)) - median(app.direct.map((d) => d.start)),
    { ratio: false },
  );
  const others = (runs: DeployRun[]): [string, string] => {
    const known = runs.map((r) => r.otherShare).filter((v): v is number => v !== null);
    return known.length === 0
      ? ['n/a', '']
      : [pct(median(known)), `${pct(Math.min(...known))} to ${pct(Math.max(...known))}`];
  };
  rows.push([
    'other CPU use during the deployments',
    'noise',
    ...others(app.runs.bare),
    ...others(app.runs.isolated),
    '',
    '',
  ]);
  return rows;
}

function baselineHeader(apps: AppDeployResult[]): string[] {
  return ['by hand, no sandbox (ms)', ...apps.flatMap((a) => [`${a.title} median`, `${a.title} min to max`])];
}

function baselineRows(apps: AppDeployResult[], markdown: boolean): string[][] {
  const row = (title: string, pick: (d: DirectRun) => number | null) => [
    title,
    ...apps.flatMap((a) => {
      const values = directSeries(a, pick);
      return values === null ? ['none', ''] : spread(values);
    }),
  ];
  return [
    row('install and build command, run to its end', (d) => d.install),
    row("create the app database (the platform's statements)", (d) => d.database),
    row('start command to first 2xx on the health path', (d) => d.start),
    row(`${code('node server.js', markdown)} to first 2xx`, (d) => d.node),
    ["install + start (the app's own work)", ...apps.flatMap((a) => [int(appOwnMedian(a)), ''])],
  ];
}

function appLines(results: DataPlaneResults, markdown: boolean): string[] {
  return results.apps.map(
    (a) =>
      `${a.title}: install ${a.installCommand === null ? 'none' : code(a.installCommand, markdown)}, start ${code(a.startCommand, markdown)}, ${a.database ? 'its own database' : 'no database'}`,
  );
}

// ----- commands under each sandbox -----------------------------------------------------------------

const COMMAND_HEADER = [
  'command (ms)',
  ...(['direct', ...MODE_KEYS] as CommandWay[]).flatMap((w) => [
    `${WAY_TITLES[w]} median`,
    `${WAY_TITLES[w]} min to max`,
  ]),
  'isolated / bare',
  'isolated - bare',
];

function commandRows(results: DataPlaneResults, markdown: boolean): string[][] {
  const s = results.sandboxStarts;
  if (s === null) return [];
  const row = (title: string, series: Record<CommandWay, number[]>) => [
    title,
    ...spread(series.direct),
    ...spread(series.bare),
    ...spread(series.isolated),
    ...compare(median(series.bare), median(series.isolated)),
  ];
  return [
    row(`${code(s.installCommand, markdown)} to its end (a build step)`, s.install),
    row(`${code(s.startCommand, markdown)} to first 2xx, probed every 10 ms (an app start)`, s.start),
  ];
}

// ----- proxy ---------------------------------------------------------------------------------------

/** The runs of one app, mode and form over the rounds, taken together. */
interface ProxyCell {
  app: string;
  appTitle: string;
  mode: ModeKey;
  form: ProxyForm;
  rounds: ProxyRun[];
  /** All measured requests over all measured seconds. */
  rps: number;
  /** Medians over the rounds. */
  p50: number;
  p99: number;
  failures: number;
  firstFailure: string | null;
  /** Per request over all rounds (weighted by their requests); other share: the mean. */
  cpu: ProxyCpu | null;
}

function proxyCells(runs: ProxyRun[]): ProxyCell[] {
  const apps = [...new Set(runs.map((r) => r.app))];
  const cells: ProxyCell[] = [];
  for (const app of apps) {
    for (const mode of MODE_KEYS) {
      for (const form of PROXY_FORMS) {
        const rounds = runs.filter((r) => r.app === app && r.mode === mode && r.form === form);
        if (rounds.length === 0) continue;
        const results = rounds.map((r) => r.result);
        const withCpu = rounds.filter((r) => r.cpu !== null);
        const weight = withCpu.reduce((n, r) => n + r.result.allRequests, 0);
        const perRequest = (pick: (c: ProxyCpu) => number | null): number | null => {
          if (withCpu.some((r) => pick(r.cpu!) === null)) return null;
          return withCpu.reduce((n, r) => n + pick(r.cpu!)! * r.result.allRequests, 0) / weight;
        };
        cells.push({
          app,
          appTitle: rounds[0]!.appTitle,
          mode,
          form,
          rounds,
          rps: results.reduce((n, x) => n + x.requests, 0) / results.reduce((n, x) => n + x.seconds, 0),
          p50: median(results.map((x) => x.p50)),
          p99: median(results.map((x) => x.p99)),
          failures: results.reduce((n, x) => n + x.failures, 0),
          firstFailure: results.find((x) => x.firstFailure !== null)?.firstFailure ?? null,
          cpu:
            withCpu.length === rounds.length && weight > 0
              ? {
                  otherShare: withCpu.reduce((n, r) => n + r.cpu!.otherShare, 0) / withCpu.length,
                  serviceMs: perRequest((c) => c.serviceMs)!,
                  appMs: perRequest((c) => c.appMs)!,
                  slirpMs: perRequest((c) => c.slirpMs)!,
                  postgresMs: perRequest((c) => c.postgresMs),
                  loadgenMs: perRequest((c) => c.loadgenMs),
                }
              : null,
        });
      }
    }
  }
  return cells;
}

function formTitle(form: ProxyForm, mode: ModeKey, markdown: boolean): string {
  switch (form) {
    case 'direct':
      return mode === 'bare' ? "direct: the app's own port" : "direct: slirp4netns's forward";
    case 'bare':
      return 'bare node:http proxy';
    case 'host':
      return 'stable URL, Host header';
    case 'path':
      return `stable URL, ${code('/apps/<slug>/', markdown)}`;
  }
}

const find = (cells: ProxyCell[], app: string, mode: ModeKey, form: ProxyForm) =>
  cells.find((c) => c.app === app && c.mode === mode && c.form === form);

const PROXY_HEADER = [
  'app',
  'sandbox',
  'addressed by',
  'req/s',
  'p50 ms',
  'p99 ms',
  'of direct req/s',
  'added p99 ms',
  'CPU ms/req: service',
  'app',
  'slirp4netns',
  'load gen',
  'other CPU use',
];

function proxyRows(cells: ProxyCell[], markdown: boolean): string[][] {
  return cells.map((c) => {
    const direct = find(cells, c.app, c.mode, 'direct');
    const failed = c.failures > 0 ? ` (${c.failures} failed!)` : '';
    const other = c.cpu === null ? 'n/a' : `${pct(c.cpu.otherShare)}${c.cpu.otherShare > DISTURBED ? ' *' : ''}`;
    const relative = c.form !== 'direct' && direct !== undefined;
    return [
      c.appTitle,
      MODE_TITLES[c.mode],
      formTitle(c.form, c.mode, markdown),
      int(c.rps) + failed,
      ms(c.p50),
      ms(c.p99),
      relative ? pct(c.rps / direct.rps) : '',
      relative ? signedMs(c.p99 - direct.p99) : '',
      cpuMs(c.cpu?.serviceMs),
      cpuMs(c.cpu?.appMs),
      c.mode === 'bare' ? '' : cpuMs(c.cpu?.slirpMs),
      cpuMs(c.cpu?.loadgenMs),
      other,
    ];
  });
}

const ISOLATION_HEADER = [
  'app',
  'addressed by',
  'req/s bare',
  'req/s isolated',
  'isolated / bare req/s',
  'by round',
  'p99 ms bare',
  'p99 ms isolated',
  'isolated / bare p99',
  'of bare direct req/s, isolated',
];

function isolationRows(cells: ProxyCell[], markdown: boolean): string[][] {
  const rows: string[][] = [];
  for (const app of [...new Set(cells.map((c) => c.app))]) {
    const bareDirect = find(cells, app, 'bare', 'direct');
    for (const form of PROXY_FORMS) {
      const bare = find(cells, app, 'bare', form);
      const isolated = find(cells, app, 'isolated', form);
      if (!bare || !isolated) continue;
      const byRound = bare.rounds
        .map((b) => {
          const i = isolated.rounds.find((x) => x.round === b.round);
          return i ? (i.result.rps / b.result.rps).toFixed(2) : null;
        })
        .filter((x) => x !== null)
        .join(', ');
      rows.push([
        bare.appTitle,
        form === 'direct'
          ? "direct (bare: the app's own port; isolated: slirp4netns's forward)"
          : formTitle(form, 'bare', markdown),
        int(bare.rps),
        int(isolated.rps),
        times(isolated.rps / bare.rps),
        byRound,
        ms(bare.p99),
        ms(isolated.p99),
        times(isolated.p99 / bare.p99),
        bareDirect ? pct(isolated.rps / bareDirect.rps) : '',
      ]);
    }
  }
  return rows;
}

// ----- summary -------------------------------------------------------------------------------------

/** One line per finding: the cost of isolation, the platform's share, the proxy's cost, and warnings. */
export function dataPlaneSummary(results: DataPlaneResults): string[] {
  const lines: string[] = [];
  for (const a of results.apps) {
    const [bare, isolated] = MODE_KEYS.map((m) => median(a.runs[m].map((r) => r.total))) as [number, number];
    const own = appOwnMedian(a);
    const phase = (key: 'install' | 'start') =>
      signedInt(median(a.runs.isolated.map((r) => r.phases[key])) - median(a.runs.bare.map((r) => r.phases[key])));
    // The two deployments of a round ran back to back, under about the same load from elsewhere.
    const paired = a.runs.bare
      .map((b, i) => (a.runs.isolated[i] ? a.runs.isolated[i].total / b.total : Number.NaN))
      .filter(Number.isFinite);
    const byRound =
      paired.length > 1
        ? `, by round ${times(median(paired))} (${times(Math.min(...paired))} to ${times(Math.max(...paired))})`
        : '';
    lines.push(
      `${a.title}: POST to DEPLOYED bare ${int(bare)} ms, isolated ${int(isolated)} ms (medians of ${a.runs.bare.length}): isolated / bare ${times(isolated / bare)} (${signedInt(isolated - bare)} ms: install ${phase('install')}, start ${phase('start')})${byRound}; the app's own install and start, by hand, ${int(own)} ms; platform overhead bare ${int(bare - own)} ms (${pct(1 - own / bare)}), isolated ${int(isolated - own)} ms (${pct(1 - own / isolated)})`,
    );
  }
  const s = results.sandboxStarts;
  if (s !== null) {
    const part = (series: Record<CommandWay, number[]>) => {
      const [direct, bare, isolated] = (['direct', ...MODE_KEYS] as CommandWay[]).map((w) => median(series[w]));
      return `by hand ${int(direct!)} ms, bare ${int(bare!)} ms, isolated ${int(isolated!)} ms (isolated - bare ${signedInt(isolated! - bare!)} ms, ${times(isolated! / bare!)})`;
    };
    lines.push(
      `tiny app's commands without the platform: \`${s.installCommand}\` to its end ${part(s.install)}; \`${s.startCommand}\` to first 2xx ${part(s.start)}`,
    );
  }
  const cells = proxyCells(results.proxy);
  for (const app of [...new Set(cells.map((c) => c.app))]) {
    const of = (mode: ModeKey, form: ProxyForm) => find(cells, app, mode, form);
    const bareDirect = of('bare', 'direct');
    const isoDirect = of('isolated', 'direct');
    const parts: string[] = [];
    for (const form of ['host', 'path'] as const) {
      const bare = of('bare', form);
      const isolated = of('isolated', form);
      if (!bare || !isolated) continue;
      parts.push(
        `stable URL ${form === 'host' ? 'by Host' : 'by path'} isolated / bare req/s ${times(isolated.rps / bare.rps)}, p99 ${signedMs(isolated.p99 - bare.p99)} ms` +
          (bareDirect && isoDirect
            ? ` (of direct req/s: bare ${pct(bare.rps / bareDirect.rps)}, isolated ${pct(isolated.rps / isoDirect.rps)} of slirp4netns's forward, ${pct(isolated.rps / bareDirect.rps)} of the app's own port)`
            : ''),
      );
    }
    if (bareDirect && isoDirect)
      parts.push(
        `direct, slirp4netns's forward against the app's own port: req/s ${times(isoDirect.rps / bareDirect.rps)}, p99 ${signedMs(isoDirect.p99 - bareDirect.p99)} ms` +
          (isoDirect.cpu ? `, slirp4netns ${isoDirect.cpu.slirpMs.toFixed(3)} ms of CPU per request` : ''),
      );
    const title = cells.find((c) => c.app === app)!.appTitle;
    lines.push(`proxy, ${title}: ${parts.join('; ')}`);
  }
  for (const mode of results.modes)
    if (mode.key === 'isolated' && !mode.contained)
      lines.push(
        `CAUTION: SLIPWAY_SANDBOX=${mode.sandbox} does not contain apps fully on this machine (${mode.isolation}): the isolated figures understate the cost of full isolation`,
      );
  const timed = results.apps.flatMap((a) => MODE_KEYS.flatMap((m) => a.runs[m].map((r) => r.otherShare)));
  const busyTimed = timed.filter((v) => (v ?? 0) > DISTURBED).length;
  if (busyTimed > 0)
    lines.push(
      `CAUTION: other processes used more than ${pct(DISTURBED)} of the CPUs during ${busyTimed} of ${timed.length} deployments: their times are longer and noisier than this machine can do; compare the ratios, not the times`,
    );
  const disturbed = results.proxy.filter((r) => (r.cpu?.otherShare ?? 0) > DISTURBED);
  if (disturbed.length > 0)
    lines.push(
      `CAUTION: other processes used more than ${pct(DISTURBED)} of the CPUs during ${disturbed.length} of ${results.proxy.length} proxy runs (marked *)`,
    );
  if (results.failures.length > 0)
    lines.push(
      `FAILED and tried again: ${results.failures.map((f) => `${f.app} ${f.mode} ${f.what}: ${f.message.split('\n').slice(0, 4).join(' / ')}`).join('; ')}`,
    );
  const failed = results.proxy.filter((r) => r.result.failures > 0);
  if (failed.length > 0)
    lines.push(
      `FAILED requests in: ${failed.map((r) => `${r.appTitle} ${r.mode} ${r.form}: ${r.result.firstFailure}`).join('; ')}`,
    );
  return lines;
}

// ----- output --------------------------------------------------------------------------------------

function textTable(header: string[], rows: string[][], leftColumns: number): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) =>
    cells.map((c, i) => (i < leftColumns ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ');
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
}

function markdownTable(header: string[], rows: string[][], leftColumns: number): string {
  const align = header.map((_, i) => (i < leftColumns ? '---' : '---:'));
  return [header, align, ...rows].map((cells) => `| ${cells.join(' | ')} |`).join('\n');
}

function modeLines(results: DataPlaneResults, markdown: boolean): string[] {
  return results.modes.map(
    (m) =>
      `${bold(MODE_TITLES[m.key], markdown)} (${code(`SLIPWAY_SANDBOX=${m.sandbox}`, markdown)}${m.sandbox === 'auto' ? ', the default' : ''}): ${m.isolation}`,
  );
}

function sections(results: DataPlaneResults, markdown: boolean): string[] {
  const table = markdown ? markdownTable : textTable;
  const out: string[] = [];
  const item = (l: string) => (markdown ? `- ${l}` : `  ${l}`);
  if (results.apps.length > 0) {
    out.push(
      `Create to DEPLOYED: ${results.deployments} deployments per app and mode after one warm-up each, one at a time, the modes alternating; after each pair, the same app installed and started by hand (the baseline both modes share).`,
      '',
    );
    out.push(...appLines(results, markdown).map(item), '');
    for (const app of results.apps) {
      out.push(`${app.title}:`, '', table(DEPLOY_HEADER, deployRows(app, markdown), 2), '');
    }
    out.push(
      'The baseline, by hand:',
      '',
      table(baselineHeader(results.apps), baselineRows(results.apps, markdown), 1),
      '',
    );
  }
  if (results.sandboxStarts !== null) {
    out.push(
      `The tiny app's commands without the platform, ${results.sandboxStarts.install.bare.length} times each way after one warm-up, the ways in rotating order: by hand (${code('sh -c', markdown)}, no cgroup), and under each mode's sandbox (src/dataplane's sandbox and process runner: the command's cgroup, user ${code('nobody', markdown)}; isolated also bubblewrap, its network through slirp4netns, its published port and, for the start, socat for its forward to the API):`,
      '',
      table(COMMAND_HEADER, commandRows(results, markdown), 1),
      '',
    );
  }
  if (results.proxy.length > 0) {
    const cells = proxyCells(results.proxy);
    out.push(
      `Proxy overhead: ${code('GET /', markdown)} of one instance per mode, ${results.connections} connections; ${results.rounds} rounds of ${results.warmupSeconds} s warm-up and ${results.durationSeconds} s measured per run, in each round the two modes back to back for each form (req/s: all rounds' requests over their seconds; p50, p99: the median of the rounds'; CPU from /proc; * marks other CPU use above ${pct(DISTURBED)}). "Direct" is the port the router sends to: bare, the app's own socket; isolated, slirp4netns's forward on the host's 127.0.0.1 (the app's own socket is inside its network namespace, unreachable from the host):`,
      '',
      table(PROXY_HEADER, proxyRows(cells, markdown), 3),
      '',
      'The cost of isolation per request, the same runs side by side (by round: isolated / bare req/s of each round):',
      '',
      table(ISOLATION_HEADER, isolationRows(cells, markdown), 2),
      '',
    );
  }
  return out;
}

export function dataPlaneTerminalReport(results: DataPlaneResults): string {
  return [
    'Sandbox modes side by side:',
    ...modeLines(results, false).map((l) => `  ${l}`),
    '',
    ...sections(results, false),
    ...dataPlaneSummary(results).map((l) => `- ${l}`),
  ].join('\n');
}

export function dataPlaneMarkdownReport(results: DataPlaneResults, info: DataPlaneRunInfo): string {
  return [
    `Run of ${info.date}: ${info.machine}; Node ${info.node}; ${info.database}. This part took ${Math.round(results.elapsedSeconds)} s. The two sandbox modes, each with its own service:`,
    '',
    ...modeLines(results, true).map((l) => `- ${l}`),
    '',
    ...sections(results, true),
    'In this run:',
    '',
    ...dataPlaneSummary(results).map((l) => `- ${l}`),
  ].join('\n');
}
