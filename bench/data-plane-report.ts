/**
 * The data plane group's tables (bench/data-plane.ts), for the terminal and for docs/performance.md:
 * each figure per sandbox mode (bare: SLIPWAY_SANDBOX=none; isolated: the default, full isolation), and
 * their ratio isolated / bare, which is what a run on a noisy machine can be trusted for.
 */
import {
  MODE_KEYS,
  PHASES,
  PROXY_FORMS,
  type ApiLoad,
  type ApiRun,
  type AppDeployResult,
  type CommandWay,
  type DataPlaneResults,
  type DeployRun,
  type DirectRun,
  type ModeKey,
  type ProxyCpu,
  type ProxyForm,
  type ProxyRun,
  LIGHT_RESERVE_FACTOR,
} from './data-plane.ts';
import type { LoadResult } from './load-protocol.ts';
import { median } from './median.ts';

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
                  proxyMs: perRequest((c) => c.proxyMs)!,
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

function formTitle(form: ProxyForm, mode: ModeKey, edge: string): string {
  switch (form) {
    case 'direct':
      return mode === 'bare' ? "direct: the app's own port" : "direct: slirp4netns's forward";
    case 'stable':
      return `stable URL: the service's edge (${edge})`;
    case 'nginx':
      return 'plain nginx, keep-alive upstream';
    case 'haproxy':
      return 'plain HAProxy, instance in its configuration';
    case 'builtin':
      return 'built-in edge (Node)';
  }
}

const find = (cells: ProxyCell[], app: string, mode: ModeKey, form: ProxyForm) =>
  cells.find((c) => c.app === app && c.mode === mode && c.form === form);

const edgeOf = (results: DataPlaneResults, mode: ModeKey) => results.modes.find((m) => m.key === mode)?.edge ?? '?';

const PROXY_HEADER = [
  'app',
  'sandbox',
  'addressed by',
  'req/s',
  'p50 ms',
  'p99 ms',
  'of direct req/s',
  'of plain nginx req/s',
  'p99 - plain nginx ms',
  'CPU ms/req: service',
  'nginx, HAProxy',
  'app',
  'slirp4netns',
  'load gen',
  'other CPU use',
];

function proxyRows(results: DataPlaneResults, cells: ProxyCell[]): string[][] {
  return cells.map((c) => {
    const direct = find(cells, c.app, c.mode, 'direct');
    const nginx = find(cells, c.app, c.mode, 'nginx');
    const failed = c.failures > 0 ? ` (${c.failures} failed!)` : '';
    const other = c.cpu === null ? 'n/a' : `${pct(c.cpu.otherShare)}${c.cpu.otherShare > DISTURBED ? ' *' : ''}`;
    const ofNginx = nginx !== undefined && c.form !== 'nginx' && c.form !== 'direct';
    return [
      c.appTitle,
      MODE_TITLES[c.mode],
      formTitle(c.form, c.mode, edgeOf(results, c.mode)),
      int(c.rps) + failed,
      ms(c.p50),
      ms(c.p99),
      c.form !== 'direct' && direct !== undefined ? pct(c.rps / direct.rps) : '',
      ofNginx ? times(c.rps / nginx.rps) : '',
      ofNginx ? signedMs(c.p99 - nginx.p99) : '',
      cpuMs(c.cpu?.serviceMs),
      cpuMs(c.cpu?.proxyMs),
      cpuMs(c.cpu?.appMs),
      c.mode === 'bare' ? '' : cpuMs(c.cpu?.slirpMs),
      cpuMs(c.cpu?.loadgenMs),
      other,
    ];
  });
}

/** The issue's goal for the stable URL against plain nginx in front of the same instance. */
const GOAL_RPS_RATIO = 0.8;
const GOAL_P99_MS = 2;
/** The goal for the API's p99 under app load (through the stable URL) against alone. */
const GOAL_API_P99_RATIO = 1.2;
/** Create to DEPLOYED with every CPU kept busy by ordinary processes outside Slipway, over the same on the machine as it is. */
const GOAL_BUSY_RATIO = 2;

/** The busy-host deployments of an app against its isolated ones: medians and their ratio; null without both. */
function busyHost(a: AppDeployResult): { busy: number; idle: number; ratio: number } | null {
  if (!a.busy?.length || a.runs.isolated.length === 0) return null;
  const busy = median(a.busy.map((r) => r.total));
  const idle = median(a.runs.isolated.map((r) => r.total));
  return { busy, idle, ratio: busy / idle };
}

function busyHostLine(a: AppDeployResult): string | null {
  const b = busyHost(a);
  if (b === null) return null;
  return `${a.title} on a busy host (${a.busyProcesses} ordinary processes spinning, one per CPU, outside Slipway): POST to DEPLOYED isolated ${int(b.busy)} ms against ${int(b.idle)} ms without them (medians of ${a.busy.length}): ${times(b.ratio)}, goal (at most ${GOAL_BUSY_RATIO}x) ${b.ratio <= GOAL_BUSY_RATIO ? 'met' : 'NOT met'}`;
}

/** One edge against plain nginx on the same instance: over all rounds, and round by round. */
interface EdgeComparison {
  rpsRatio: number;
  p99Added: number;
  rpsByRound: number[];
  p99ByRound: number[];
  met: boolean;
}

function compareWithNginx(edge: ProxyCell | undefined, nginx: ProxyCell | undefined): EdgeComparison | null {
  if (edge === undefined || nginx === undefined) return null;
  const pairs = edge.rounds
    .map((e) => [e, nginx.rounds.find((n) => n.round === e.round)] as const)
    .filter((pair): pair is readonly [ProxyRun, ProxyRun] => pair[1] !== undefined);
  const rpsRatio = edge.rps / nginx.rps;
  const p99Added = edge.p99 - nginx.p99;
  return {
    rpsRatio,
    p99Added,
    rpsByRound: pairs.map(([e, n]) => e.result.rps / n.result.rps),
    p99ByRound: pairs.map(([e, n]) => e.result.p99 - n.result.p99),
    met: rpsRatio >= GOAL_RPS_RATIO && p99Added <= GOAL_P99_MS,
  };
}

const EDGE_HEADER = [
  'app',
  'sandbox',
  'addressed by',
  'req/s / plain nginx',
  'by round',
  'p99 - plain nginx p99 ms',
  'by round',
  'goal met',
];

function edgeRows(results: DataPlaneResults, cells: ProxyCell[]): string[][] {
  const rows: string[][] = [];
  const list = (values: number[], format: (n: number) => string) => values.map(format).join(', ');
  for (const app of [...new Set(cells.map((c) => c.app))]) {
    for (const mode of MODE_KEYS) {
      const nginx = find(cells, app, mode, 'nginx');
      for (const form of ['stable', 'haproxy', 'builtin'] as const) {
        const v = compareWithNginx(find(cells, app, mode, form), nginx);
        if (v === null) continue;
        rows.push([
          nginx!.appTitle,
          MODE_TITLES[mode],
          formTitle(form, mode, edgeOf(results, mode)),
          times(v.rpsRatio),
          list(v.rpsByRound, (n) => n.toFixed(2)),
          signedMs(v.p99Added),
          list(v.p99ByRound, signedMs),
          form === 'stable' ? (v.met ? 'yes' : 'NO') : '',
        ]);
      }
    }
  }
  return rows;
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

function isolationRows(results: DataPlaneResults, cells: ProxyCell[]): string[][] {
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
          : formTitle(form, 'bare', edgeOf(results, 'bare')),
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

// ----- the API under app load ----------------------------------------------------------------------

const API_LOAD_TITLES: Record<ApiLoad, string> = {
  none: 'no app load',
  stable: "app loaded through the stable URL (the service's edge)",
  builtin: 'app loaded through the built-in edge',
  'stable-no-reserve': 'app loaded through the stable URL, the service out of its CPU reserve',
  'stable-reserve-light': 'app loaded through the stable URL, the reserve weighing only as much as the apps',
  'stable-probe-ordinary': 'app loaded through the stable URL, the probe at ordinary priority (a client on this host)',
};

interface ApiCell {
  load: ApiLoad;
  runs: ApiRun[];
  rps: number;
  /** Medians over the rounds. */
  p50: number;
  p99: number;
  appRps: number | null;
  failures: number;
  otherShare: number | null;
}

function apiCells(runs: ApiRun[]): ApiCell[] {
  const cells: ApiCell[] = [];
  for (const load of [
    'none',
    'stable',
    'builtin',
    'stable-no-reserve',
    'stable-reserve-light',
    'stable-probe-ordinary',
  ] as const) {
    const mine = runs.filter((r) => r.load === load);
    if (mine.length === 0) continue;
    const apps = mine.map((r) => r.app).filter((a): a is LoadResult => a !== null);
    const shares = mine.map((r) => r.otherShare).filter((v): v is number => v !== null);
    cells.push({
      load,
      runs: mine,
      rps: mine.reduce((n, r) => n + r.result.requests, 0) / mine.reduce((n, r) => n + r.result.seconds, 0),
      p50: median(mine.map((r) => r.result.p50)),
      p99: median(mine.map((r) => r.result.p99)),
      appRps:
        apps.length === 0 ? null : apps.reduce((n, a) => n + a.requests, 0) / apps.reduce((n, a) => n + a.seconds, 0),
      failures: mine.reduce((n, r) => n + r.result.failures + (r.app?.failures ?? 0), 0),
      otherShare: shares.length === 0 ? null : shares.reduce((n, v) => n + v, 0) / shares.length,
    });
  }
  return cells;
}

const API_HEADER = [
  'while',
  'API req/s',
  'API p50 ms',
  'API p99 ms',
  'p99 / alone',
  'by round',
  'app req/s meanwhile',
  'other CPU use',
];

function apiRows(results: DataPlaneResults, markdown: boolean): string[][] {
  const cells = apiCells(results.api);
  const alone = cells.find((c) => c.load === 'none');
  return cells.map((c) => {
    const byRound = c.runs
      .map((r) => {
        const a = alone?.runs.find((x) => x.round === r.round);
        return a ? (r.result.p99 / a.result.p99).toFixed(2) : null;
      })
      .filter((x) => x !== null)
      .join(', ');
    const title =
      c.load === 'stable'
        ? `app loaded through the stable URL (${edgeOf(results, results.apiProbe?.mode ?? 'isolated')})`
        : API_LOAD_TITLES[c.load];
    return [
      bold(title, markdown && c.load === 'stable'),
      int(c.rps) + (c.failures > 0 ? ` (${c.failures} failed!)` : ''),
      ms(c.p50),
      ms(c.p99),
      c.load === 'none' || alone === undefined ? '' : times(c.p99 / alone.p99),
      c.load === 'none' ? '' : byRound,
      c.appRps === null ? '' : int(c.appRps),
      c.otherShare === null ? 'n/a' : `${pct(c.otherShare)}${c.otherShare > DISTURBED ? ' *' : ''}`,
    ];
  });
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
    const busy = busyHostLine(a);
    if (busy !== null) lines.push(busy);
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
    const title = cells.find((c) => c.app === app)!.appTitle;
    const parts: string[] = [];
    for (const mode of MODE_KEYS) {
      const direct = of(mode, 'direct');
      const stable = of(mode, 'stable');
      const stableVsNginx = compareWithNginx(stable, of(mode, 'nginx'));
      const builtinVsNginx = compareWithNginx(of(mode, 'builtin'), of(mode, 'nginx'));
      const haproxyVsNginx = compareWithNginx(of(mode, 'haproxy'), of(mode, 'nginx'));
      if (stable === undefined) continue;
      const edge = edgeOf(results, mode);
      parts.push(
        `${MODE_TITLES[mode]}: stable URL (${edge}) ${direct ? `${pct(stable.rps / direct.rps)} of direct req/s` : ''}` +
          (stableVsNginx
            ? `, ${times(stableVsNginx.rpsRatio)} plain nginx's req/s, p99 ${signedMs(stableVsNginx.p99Added)} ms: goal ${stableVsNginx.met ? 'met' : 'NOT met'}`
            : '') +
          (haproxyVsNginx
            ? `; plain HAProxy ${times(haproxyVsNginx.rpsRatio)} plain nginx's req/s, p99 ${signedMs(haproxyVsNginx.p99Added)} ms`
            : '') +
          (builtinVsNginx
            ? `; built-in edge ${times(builtinVsNginx.rpsRatio)} plain nginx's req/s, p99 ${signedMs(builtinVsNginx.p99Added)} ms`
            : ''),
      );
    }
    const bareDirect = of('bare', 'direct');
    const isoDirect = of('isolated', 'direct');
    if (bareDirect && isoDirect)
      parts.push(
        `direct, slirp4netns's forward against the app's own port: req/s ${times(isoDirect.rps / bareDirect.rps)}, p99 ${signedMs(isoDirect.p99 - bareDirect.p99)} ms` +
          (isoDirect.cpu ? `, slirp4netns ${isoDirect.cpu.slirpMs.toFixed(3)} ms of CPU per request` : ''),
      );
    lines.push(`proxy, ${title}: ${parts.join('; ')}`);
  }
  const goals = cells
    .filter((c) => c.form === 'stable')
    .map((c) => ({ c, v: compareWithNginx(c, find(cells, c.app, c.mode, 'nginx')) }));
  if (goals.length > 0 && goals.every((g) => g.v !== null)) {
    const missed = goals.filter((g) => !g.v!.met);
    lines.push(
      `${missed.length === 0 ? 'met' : 'NOT met'}: the stable URL at least ${GOAL_RPS_RATIO} of plain nginx's req/s with a p99 within ${GOAL_P99_MS} ms of it` +
        (missed.length === 0
          ? ` (every app and mode)`
          : `: ${missed.map((g) => `${g.c.appTitle} ${MODE_TITLES[g.c.mode]} (${times(g.v!.rpsRatio)}, ${signedMs(g.v!.p99Added)} ms)`).join(', ')}`),
    );
  } else if (results.proxy.length > 0 && results.plainProxies.nginx === null)
    lines.push('not measured: the stable URL against plain nginx (nginx is not installed)');
  const api = apiCells(results.api);
  const alone = api.find((c) => c.load === 'none');
  if (alone !== undefined && results.apiProbe !== null) {
    const probe = results.apiProbe;
    const under = (load: ApiLoad) => {
      const c = api.find((x) => x.load === load);
      return c === undefined ? null : { c, ratio: c.p99 / alone.p99 };
    };
    const stable = under('stable');
    const builtin = under('builtin');
    lines.push(
      `API p99 (${probe.request} at ${probe.rate}/s, ${MODE_TITLES[probe.mode]} service): alone ${ms(alone.p99)} ms` +
        (stable
          ? `; with the ${probe.appTitle} loaded through the stable URL (${edgeOf(results, probe.mode)}) ${ms(stable.c.p99)} ms, ${times(stable.ratio)}: goal (within ${pct(GOAL_API_P99_RATIO - 1)}) ${stable.ratio <= GOAL_API_P99_RATIO ? 'met' : 'NOT met'}`
          : '') +
        (builtin ? `; through the built-in edge ${ms(builtin.c.p99)} ms, ${times(builtin.ratio)}` : ''),
    );
    const unreserved = under('stable-no-reserve');
    lines.push(
      unreserved && stable
        ? `the service's CPU reserve: API p99 under app load through the stable URL ${ms(stable.c.p99)} ms in it against ${ms(unreserved.c.p99)} ms out of it (${times(stable.c.p99 / unreserved.c.p99)})`
        : `the service's CPU reserve was not measured: ${probe.reserve ?? 'no app load through the stable URL'}`,
    );
    const light = under('stable-reserve-light');
    if (light && stable)
      lines.push(
        `the reserve's weight: API p99 under app load through the stable URL ${ms(stable.c.p99)} ms at ${String(Math.round(1 / LIGHT_RESERVE_FACTOR))} times the apps' weight against ${ms(light.c.p99)} ms at only the apps' weight (${times(stable.c.p99 / light.c.p99)}; ${times(light.ratio)} of alone)`,
      );
    const ordinaryProbe = under('stable-probe-ordinary');
    lines.push(
      ordinaryProbe && stable
        ? `the probe's own priority: API p99 under app load through the stable URL ${ms(stable.c.p99)} ms with the probe at nice ${String(probe.probePriority)} against ${ms(ordinaryProbe.c.p99)} ms with it at ordinary priority, as a client on this host (${times(ordinaryProbe.ratio)} of alone)`
        : `the probe ran at ordinary priority throughout: ${typeof probe.probePriority === 'string' ? probe.probePriority : 'no app load through the stable URL'}`,
    );
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
  const disturbedApi = results.api.filter((r) => (r.otherShare ?? 0) > DISTURBED);
  if (disturbed.length + disturbedApi.length > 0)
    lines.push(
      `CAUTION: other processes used more than ${pct(DISTURBED)} of the CPUs during ${disturbed.length} of ${results.proxy.length} proxy runs and ${disturbedApi.length} of ${results.api.length} API runs (marked *)`,
    );
  if (results.failures.length > 0)
    lines.push(
      `FAILED and tried again: ${results.failures.map((f) => `${f.app} ${f.mode} ${f.what}: ${f.message.split('\n').slice(0, 4).join(' / ')}`).join('; ')}`,
    );
  const failed = [
    ...results.proxy
      .filter((r) => r.result.failures > 0)
      .map((r) => `${r.appTitle} ${r.mode} ${r.form}: ${r.result.firstFailure}`),
    ...results.api.flatMap((r) => [
      ...(r.result.failures > 0 ? [`API probe (${r.load}): ${r.result.firstFailure}`] : []),
      ...(r.app !== null && r.app.failures > 0 ? [`app load (${r.load}): ${r.app.firstFailure}`] : []),
    ]),
  ];
  if (failed.length > 0) lines.push(`FAILED requests in: ${failed.join('; ')}`);
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
    const busy = results.apps.map(busyHostLine).filter((l): l is string => l !== null);
    if (busy.length > 0) out.push(...busy.map(item), '');
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
    const edges = results.modes.map((m) => `${MODE_TITLES[m.key]} ${m.edge}`).join(', ');
    out.push(
      `Proxy overhead: ${code('GET /', markdown)} of one instance per mode, ${results.connections} connections; ${results.rounds} rounds of ${results.warmupSeconds} s warm-up and ${results.durationSeconds} s measured per run; in each round the two modes in turn, and for each the ways to its instance back to back, their order reversed every other round (req/s: all rounds' requests over their seconds; p50, p99: the median of the rounds'; CPU from /proc; * marks other CPU use above ${pct(DISTURBED)}). The services' edges: ${edges}. "Direct" is the port the edge sends to: bare, the app's own socket; isolated, slirp4netns's forward on the host's 127.0.0.1 (the app's own socket is inside its network namespace, unreachable from the host)${results.plainProxies.nginx === null ? '. nginx is not installed: no plain nginx runs' : ''}:`,
      '',
      table(PROXY_HEADER, proxyRows(results, cells), 3),
      '',
      `Each proxy against plain nginx in front of the same instance (the stable URL's goal: at least ${GOAL_RPS_RATIO} of its req/s, p99 within ${GOAL_P99_MS} ms; by round: each round's own ratio or difference):`,
      '',
      table(EDGE_HEADER, edgeRows(results, cells), 3),
      '',
      'The cost of isolation per request, the same runs side by side (by round: isolated / bare req/s of each round):',
      '',
      table(ISOLATION_HEADER, isolationRows(results, cells), 2),
      '',
    );
  }
  if (results.api.length > 0 && results.apiProbe !== null) {
    const probe = results.apiProbe;
    out.push(
      `The API under app load: ${code(probe.request, markdown)} with the service's key at a fixed ${probe.rate} requests a second over ${probe.connections} connections (a second load generator, ${typeof probe.probePriority === 'number' ? `raised to nice ${probe.probePriority} as a client on another machine would not wait for this host's CPUs, but in the row that says otherwise` : 'at ordinary priority'}) to the ${MODE_TITLES[probe.mode]} service, ${results.rounds} rounds of ${results.warmupSeconds} s warm-up and ${results.durationSeconds} s measured, alone and while the ${probe.appTitle} is loaded at ${results.connections} connections through each edge (its load generator an ordinary process at ordinary priority, as any client or neighbour on the host; the app load starts ${probe.leadSeconds} s before the probe's warm-up and ends after its measurement), the conditions in turn (p50, p99: the median of the rounds'; by round: each round's p99 over the same round's alone; goal: p99 under load through the stable URL within ${pct(GOAL_API_P99_RATIO - 1)} of alone):`,
      '',
      table(API_HEADER, apiRows(results, markdown), 1),
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
