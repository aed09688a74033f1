/** The tables of the listener long-poll bench (bench/listener-polls.ts): terminal and docs/performance.md. */
import type { MemorySample } from './listener-polls-service.ts';
import type { HoldCpu, ListenerPollResults, PhaseResult } from './listener-polls.ts';

export interface RunInfo {
  date: string;
  machine: string;
  node: string;
  database: string;
}

const ms = (value: number) => (value >= 100 ? value.toFixed(0) : value.toFixed(1));
const mib = (bytes: number) => (bytes / 2 ** 20).toFixed(1);
const kib = (bytes: number) => (bytes / 2 ** 10).toFixed(1);
const ratio = (a: number, b: number) => `${(a / b).toFixed(2)}x`;
const count = (n: number) => n.toLocaleString('en-US');
const cpu = (c: HoldCpu) =>
  `service ${c.serviceMs.toFixed(1)} ms/s (${(c.serviceMs / 10).toFixed(1)}% of a core), PostgreSQL ${c.postgresMs === null ? '?' : `${c.postgresMs.toFixed(1)} ms/s`}, other processes ${c.otherCpuShare === null ? '?' : `${Math.round(c.otherCpuShare * 100)}%`} of the machine`;

function latencyRows(r: ListenerPollResults): string[][] {
  const row = (what: string, pick: (p: PhaseResult) => number, withRatio = true) => [
    what,
    ms(pick(r.single)),
    ms(pick(r.many)),
    withRatio ? ratio(pick(r.many), pick(r.single)) : '',
  ];
  const share = (p: PhaseResult) => (p.otherCpuShare === null ? '?' : `${Math.round(p.otherCpuShare * 100)}%`);
  return [
    row("PATCH sent to the listener's answer, p50", (p) => p.answer.p50),
    row("PATCH sent to the listener's answer, p99", (p) => p.answer.p99),
    row("PATCH sent to the listener's answer, max", (p) => p.answer.max),
    row('the PATCH request itself, p50', (p) => p.patch.p50),
    row('the PATCH request itself, p99', (p) => p.patch.p99),
    // Near zero, and negative when the answer came before the PATCH's own response: no ratio.
    row("the answer after the PATCH's response, p50", (p) => p.afterPatch.p50, false),
    row("the answer after the PATCH's response, p99", (p) => p.afterPatch.p99, false),
    ["other processes' share of the CPU meanwhile", share(r.single), share(r.many), ''],
  ];
}

function memoryRows(r: ListenerPollResults): string[][] {
  const row = (what: string, pick: (m: MemorySample) => number) => {
    const { idle, holding, released } = r.memory;
    return [
      what,
      mib(pick(idle)),
      mib(pick(holding)),
      `${pick(holding) >= pick(idle) ? '+' : ''}${mib(pick(holding) - pick(idle))}`,
      kib((pick(holding) - pick(idle)) / r.listeners),
      mib(pick(released)),
    ];
  };
  return [
    row('RSS', (m) => m.rss),
    row('V8 heap used', (m) => m.heapUsed),
    row('V8 heap total', (m) => m.heapTotal),
    row('external (buffers, sockets)', (m) => m.external),
  ];
}

function table(header: string[], rows: string[][], align: ('l' | 'r')[]): string {
  return [
    `| ${header.join(' | ')} |`,
    `| ${align.map((a) => (a === 'r' ? '---:' : '---')).join(' | ')} |`,
    ...rows.map((r) => `| ${r.join(' | ')} |`),
  ].join('\n');
}

function plain(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) =>
    cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ');
  return [line(header), ...rows.map(line)].join('\n');
}

const latencyHeader = (r: ListenerPollResults) => [
  'ms',
  '1 listener polling',
  `${count(r.listeners)} listeners polling`,
  'ratio',
];
const memoryHeader = (r: ListenerPollResults) => [
  'service memory (MiB, after a full GC)',
  'idle',
  `holding ${count(r.listeners)} polls`,
  'difference',
  'KiB per poll',
  'after they ended',
];

function findings(r: ListenerPollResults): string[] {
  return [
    `patch to answer with ${count(r.listeners)} listeners polling: p50 ${ms(r.many.answer.p50)} ms, p99 ${ms(r.many.answer.p99)} ms, ${ratio(r.many.answer.p50, r.single.answer.p50)} and ${ratio(r.many.answer.p99, r.single.answer.p99)} of one listener polling alone (${r.patches} patches each)`,
    `holding ${count(r.listeners)} polls: RSS ${mib(r.memory.holding.rss)} MiB against ${mib(r.memory.idle.rss)} idle; V8 heap used ${mib(r.memory.holding.heapUsed - r.memory.idle.heapUsed)} MiB more (${kib((r.memory.holding.heapUsed - r.memory.idle.heapUsed) / r.listeners)} KiB per poll); with nothing changing, ${cpu(r.holdCpu)} (with no poll open: ${cpu(r.idleCpu)})`,
    `other listeners answered during the ${r.patches} patches: ${r.many.otherAnswers}${r.many.otherAnswers === 0 ? ' (a patch wakes only its own listener)' : ' (EXPECTED NONE: a patch woke listeners it does not concern)'}`,
    ...([r.single.otherCpuShare, r.many.otherCpuShare].some((s) => s !== null && s > 0.1)
      ? [
          'CAUTION: other processes used more than 10% of the CPUs during the measured patches: the times (and their ratios) say more about them than about the service; the memory figures and the CPU time per second do not depend on them',
        ]
      : []),
  ];
}

export function listenerPollTerminalReport(r: ListenerPollResults): string {
  return [
    `Listener long-polls: ${count(r.listeners)} listeners, ${r.patches} patches per phase (setup ${r.setupSeconds.toFixed(0)} s, all ${r.elapsedSeconds.toFixed(0)} s)`,
    '',
    plain(latencyHeader(r), latencyRows(r)),
    '',
    plain(memoryHeader(r), memoryRows(r)),
    '',
    ...findings(r).map((f) => `- ${f}`),
  ].join('\n');
}

export function listenerPollMarkdownReport(r: ListenerPollResults, run: RunInfo): string {
  return [
    `Run of ${run.date}: ${run.machine}; Node ${run.node}; ${run.database}. ${count(r.listeners)} listeners with one deployment each, ${r.patches} measured patches per phase; this part took ${r.elapsedSeconds.toFixed(0)} s (setup ${r.setupSeconds.toFixed(0)} s).`,
    '',
    table(latencyHeader(r), latencyRows(r), ['l', 'r', 'r', 'r']),
    '',
    table(memoryHeader(r), memoryRows(r), ['l', 'r', 'r', 'r', 'r', 'r']),
    '',
    `CPU over ${r.holdSeconds} s with nothing changing, while holding the ${count(r.listeners)} polls: ${cpu(r.holdCpu)}; with no poll open: ${cpu(r.idleCpu)}.`,
    '',
    'In this run:',
    '',
    ...findings(r).map((f) => `- ${f}`),
  ].join('\n');
}
