/** The bench's table, for the terminal and for docs/performance.md, and the check of its targets. */
import fs from 'node:fs/promises';
import type { RunCpu } from './cpu-usage.ts';
import type { LoadResult } from './load-protocol.ts';

export interface PlanSummary {
  /** Indented plan nodes of each statement: node, relation or index, actual rows. */
  text: string;
  /** Shared buffers (8 kB pages) hit or read by the statements of one request. */
  pages: number;
  /** Sequential scans of the big tables: a page must never need one. */
  seqScans: string[];
}

export interface ScenarioResult {
  key: string;
  title: string;
  kind: 'read' | 'write';
  size: number;
  /** Statements one request sends (steady state: the API key lookup is cached). */
  statements: number;
  api: LoadResult;
  sql: LoadResult;
  bare: LoadResult;
  plan: PlanSummary | null;
  /** Where the CPU time of each run went (Linux only). */
  cpu: { api: RunCpu | null; sql: RunCpu | null; bare: RunCpu | null };
}

/** Largest share of the CPUs that other processes used during any of a scenario's three runs. */
export function otherShare(r: ScenarioResult): number {
  return Math.max(r.cpu.api?.otherShare ?? 0, r.cpu.sql?.otherShare ?? 0, r.cpu.bare?.otherShare ?? 0);
}

/** Runs disturbed by more than this share of other CPU use are marked in the table. */
export const DISTURBED = 0.1;

export interface RunInfo {
  date: string;
  machine: string;
  node: string;
  database: string;
  sizes: number[];
  connections: number;
  warmupSeconds: number;
  durationSeconds: number;
  logLevel: string;
  preparedStatements: boolean;
  seeded: string;
  elapsedSeconds: number;
}

const int = (n: number) => (Number.isFinite(n) ? Math.round(n).toLocaleString('en-US') : 'n/a');
const ms = (n: number) => (!Number.isFinite(n) ? 'n/a' : n < 10 ? n.toFixed(2) : n.toFixed(1));
const pct = (n: number) => (Number.isFinite(n) ? `${Math.round(n * 100)}%` : 'n/a');
const times = (n: number) => (Number.isFinite(n) ? `${n.toFixed(2)}x` : 'n/a');
const flag = (r: LoadResult) => (r.failures > 0 ? ` (${r.failures} failed!)` : '');

/** small.rps / large.rps for the large row of each scenario: how many times slower it got. */
function slowdown(results: ScenarioResult[], row: ScenarioResult): number | null {
  const sizes = [...new Set(results.map((r) => r.size))].sort((a, b) => a - b);
  if (row.size !== sizes[sizes.length - 1] || sizes.length < 2) return null;
  const small = results.find((r) => r.key === row.key && r.size === sizes[0]);
  return small ? small.api.rps / row.api.rps : null;
}

const HEADER = [
  'scenario',
  'deployments',
  'req/s',
  'p50 ms',
  'p99 ms',
  'SQL/req',
  'of bare',
  'of raw SQL',
  'small/large req/s',
];

function rowCells(results: ScenarioResult[], r: ScenarioResult): string[] {
  const s = slowdown(results, r);
  return [
    r.title,
    int(r.size),
    int(r.api.rps) + flag(r.api),
    ms(r.api.p50),
    ms(r.api.p99),
    String(r.statements),
    pct(r.api.rps / r.bare.rps),
    pct(r.api.rps / r.sql.rps) + flag(r.sql),
    s === null ? '' : times(s),
  ];
}

const BASELINE_HEADER = [
  'scenario',
  'deployments',
  'bare req/s',
  'bare p50',
  'bare p99',
  'raw SQL req/s',
  'SQL p50',
  'SQL p99',
  'pages/req',
];

function baselineCells(r: ScenarioResult): string[] {
  return [
    r.title,
    int(r.size),
    int(r.bare.rps) + flag(r.bare),
    ms(r.bare.p50),
    ms(r.bare.p99),
    int(r.sql.rps),
    ms(r.sql.p50),
    ms(r.sql.p99),
    r.plan ? String(r.plan.pages) : '',
  ];
}

const CPU_HEADER = [
  'scenario',
  'deployments',
  'API: service',
  'API: PostgreSQL',
  'API: load gen',
  'bare: Fastify',
  'bare: load gen',
  'SQL: PostgreSQL',
  'SQL: pg client',
  'other CPU use',
];

const cpuMs = (n: number | null | undefined) => (n === null || n === undefined ? 'n/a' : n.toFixed(3));

function cpuCells(r: ScenarioResult): string[] {
  const { api, sql, bare } = r.cpu;
  const others = api === null ? 'n/a' : `${pct(otherShare(r))}${otherShare(r) > DISTURBED ? ' *' : ''}`;
  return [
    r.title,
    int(r.size),
    cpuMs(api?.nodeMs),
    cpuMs(api?.postgresMs),
    cpuMs(api?.loadgenMs),
    cpuMs(bare?.nodeMs),
    cpuMs(bare?.loadgenMs),
    cpuMs(sql?.postgresMs),
    cpuMs(sql?.loadgenMs),
    others,
  ];
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

/** The performance targets (docs/performance.md), each line saying whether this run met it. */
export function targetChecks(results: ScenarioResult[]): string[] {
  const sizes = [...new Set(results.map((r) => r.size))].sort((a, b) => a - b);
  const small = sizes[0];
  const lines: string[] = [];
  const reads = results.filter((r) => r.kind === 'read');
  const slowBare = reads.filter((r) => r.size === small && r.api.rps / r.bare.rps < 0.4);
  if (reads.length > 0) {
    lines.push(
      slowBare.length === 0
        ? `met: every read scenario at ${int(small ?? 0)} deployments reaches at least 40% of bare Fastify`
        : `NOT met: below 40% of bare Fastify at ${int(small ?? 0)}: ${slowBare.map((r) => `${r.title} (${pct(r.api.rps / r.bare.rps)})`).join(', ')}`,
    );
    const grew = reads.filter((r) => r.key !== 'list-late' && (slowdown(results, r) ?? 0) > 1.5);
    lines.push(
      grew.length === 0
        ? 'met: no read scenario is more than 1.5x slower at the large size (the late offset page excepted)'
        : `NOT met: more than 1.5x slower at the large size: ${grew.map((r) => `${r.title} (${times(slowdown(results, r)!)})`).join(', ')}`,
    );
  }
  const writes = results.filter((r) => r.kind === 'write');
  const slowWrites = writes.filter((r) => !(r.api.p99 < 50));
  if (writes.length > 0) {
    lines.push(
      slowWrites.length === 0
        ? 'met: every write scenario has p99 under 50 ms'
        : `NOT met: write p99 of 50 ms or more: ${slowWrites.map((r) => `${r.title} at ${int(r.size)} (${ms(r.api.p99)} ms)`).join(', ')}`,
    );
  }
  const scans = results.filter((r) => (r.plan?.seqScans.length ?? 0) > 0);
  lines.push(
    scans.length === 0
      ? 'met: no read scenario scans a whole table'
      : `NOT met: sequential scans in ${scans.map((r) => `${r.title} (${r.plan!.seqScans.join(', ')})`).join('; ')}`,
  );
  const disturbed = results.filter((r) => otherShare(r) > DISTURBED);
  if (disturbed.length > 0) {
    lines.push(
      `CAUTION: other processes used more than ${pct(DISTURBED)} of the CPUs during ${disturbed.length} of ${results.length} scenarios (marked *): their numbers are lower and noisier than this machine can do`,
    );
  }
  const failed = results.filter((r) => r.api.failures + r.sql.failures + r.bare.failures > 0);
  if (failed.length > 0)
    lines.push(
      `FAILED requests in: ${failed.map((r) => `${r.title} at ${int(r.size)}: ${r.api.firstFailure ?? r.sql.firstFailure ?? r.bare.firstFailure}`).join('; ')}`,
    );
  return lines;
}

export function terminalReport(results: ScenarioResult[]): string {
  return [
    textTable(
      HEADER,
      results.map((r) => rowCells(results, r)),
    ),
    '',
    'Baselines, same run, same load generator and concurrency:',
    textTable(BASELINE_HEADER, results.map(baselineCells)),
    '',
    'CPU milliseconds per request (API run: service, PostgreSQL, load generator; bare run; raw SQL run):',
    textTable(CPU_HEADER, results.map(cpuCells)),
    '',
    ...targetChecks(results).map((l) => `- ${l}`),
  ].join('\n');
}

export function markdownReport(results: ScenarioResult[], info: RunInfo): string {
  const large = Math.max(...results.map((r) => r.size));
  const plans = results.filter((r) => r.plan && r.size === large);
  return [
    `Run of ${info.date}: ${info.machine}; Node ${info.node}; ${info.database}.`,
    `Sizes ${info.sizes.map(int).join(' and ')} deployments in the measured workspace; ${info.seeded}.`,
    `${info.connections} connections; ${info.warmupSeconds} s warm-up and ${info.durationSeconds} s measured per run; service log level \`${info.logLevel}\`${info.preparedStatements ? '; **experiment: named prepared statements**' : ''}. The whole run took ${Math.round(info.elapsedSeconds)} s.`,
    '',
    markdownTable(
      HEADER,
      results.map((r) => rowCells(results, r)),
    ),
    '',
    'Baselines (same run, same load generator, same concurrency):',
    '',
    markdownTable(BASELINE_HEADER, results.map(baselineCells)),
    '',
    'CPU milliseconds per request, by process, in each run (from /proc; "other CPU use" is the share of the machine other processes took meanwhile, * above 10%):',
    '',
    markdownTable(CPU_HEADER, results.map(cpuCells)),
    '',
    'Performance targets in this run:',
    '',
    ...targetChecks(results).map((l) => `- ${l}`),
    '',
    `<details><summary>Query plans at ${int(large)} deployments (EXPLAIN ANALYZE of each statement of one request)</summary>`,
    '',
    ...plans.flatMap((r) => [`**${r.title}** (${r.plan!.pages} pages)`, '', '```', r.plan!.text, '```', '']),
    '</details>',
  ].join('\n');
}

/** Replaces the text between `<!-- NAME:start -->` and `<!-- NAME:end -->` in `file` with `section`. */
export async function writeResultsSection(file: string, name: string, section: string): Promise<void> {
  const [startMark, endMark] = [`<!-- ${name}:start -->`, `<!-- ${name}:end -->`];
  const text = await fs.readFile(file, 'utf8');
  const start = text.indexOf(startMark);
  const end = text.indexOf(endMark);
  if (start < 0 || end < start) throw new Error(`${file} has no ${startMark} ... ${endMark} section to replace`);
  await fs.writeFile(file, `${text.slice(0, start + startMark.length)}\n${section}\n${text.slice(end)}`);
}
