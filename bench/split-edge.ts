/**
 * The traffic split group of `npm run bench` (`--only split`; docs/performance.md, "Traffic split at the
 * edge"): the app edge's requests per second to an endpoint with a 10% split against the same endpoint
 * without one, in the same run. The goal is a ratio of at least 0.9.
 *
 * One instance of the data plane group's tiny app (bench/data-plane.ts) is started directly, with no
 * sandbox, and each edge (HAProxy where it is installed, with its request log as the service runs it,
 * and the built-in edge) routes an endpoint's host name to it. The split's second revision is routed to
 * the same instance: the app does the same work in both conditions, so the difference is the edge's (its
 * split map, the random draw, the cookie it sets on each answer). The load is autocannon's (the bench's
 * load generator child process), whose clients keep no cookie, so every request is placed anew and
 * answered with the split's cookie: the split's most expensive case. After an unmeasured run on each edge,
 * in R rounds (each --duration / R seconds) the two conditions run back to back on each edge, their order
 * alternating from round to round.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { freePort } from '../src/db/embedded-postgres.ts';
import { startAppEdge, type AppEdge } from '../src/dataplane/app-edge.ts';
import { findExecutable } from '../src/dataplane/executables.ts';
import type { BenchOptions } from './bench-options.ts';
import { TINY_APP, type LoadRunner } from './data-plane.ts';
import type { HttpJob, LoadResult } from './load-protocol.ts';
import { localEdgeConfig } from '../test/support/edge-config.ts';
import { median } from './median.ts';

/** The split's weight: the share of clients sent to the second revision. */
export const SPLIT_WEIGHT = 10;
/** The ratio split / no split the edge is to reach. */
export const SPLIT_GOAL = 0.9;
/** An endpoint's host label: `<slug>--<endpoint>`, the slug ending in 8 hex digits as every slug does. */
const LABEL = 'bench-0123abcd--production';
const BASE_REVISION = '00000000-0000-4000-8000-00000000000a';
const SPLIT_REVISION = '00000000-0000-4000-8000-00000000000b';
/** How long the tiny app has to answer its health path. */
const START_TIMEOUT_MS = 15_000;

export const isSplitKey = (key: string) => key === 'split';

export type SplitEdgeKind = 'haproxy' | 'builtin';

export interface SplitEdgeRun {
  edge: SplitEdgeKind;
  split: boolean;
  round: number;
  result: LoadResult;
}

export interface SplitEdgeResults {
  edges: SplitEdgeKind[];
  runs: SplitEdgeRun[];
  rounds: number;
  connections: number;
  warmupSeconds: number;
  /** Measured seconds of each run. */
  durationSeconds: number;
}

export interface SplitEdgeBenchContext {
  options: BenchOptions;
  load: LoadRunner;
  say: (line: string) => void;
  /** Registers a cleanup step for Ctrl-C (the group also cleans up itself when it ends). */
  defer(step: () => Promise<void>): void;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The tiny app, started directly on a free port; resolves once its health path answers. */
async function startTinyApp(dir: string): Promise<{ port: number; stop(): Promise<void> }> {
  for (const [file, content] of Object.entries(TINY_APP)) await fs.writeFile(path.join(dir, file), content);
  const port = await freePort();
  const child = spawn(process.execPath, ['server.js'], {
    cwd: dir,
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', PORT: String(port), HOST: '127.0.0.1' },
    stdio: 'ignore',
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    await exited;
  };
  const deadline = Date.now() + START_TIMEOUT_MS;
  while (Date.now() < deadline) {
    const ok = await fetch(`http://127.0.0.1:${port}/healthz`).then(
      (r) => r.ok,
      () => false,
    );
    if (ok) return { port, stop };
    await sleep(20);
  }
  await stop();
  throw new Error(`the tiny app did not answer on port ${port} within ${START_TIMEOUT_MS / 1000} s`);
}

function job(options: BenchOptions, edge: AppEdge, durationSeconds: number): HttpJob {
  return {
    kind: 'http',
    origin: `http://127.0.0.1:${edge.port}`,
    method: 'GET',
    path: '/',
    slots: [],
    body: null,
    uniquePrefix: '',
    headers: { host: `${LABEL}.localhost:${edge.port}` },
    expectStatus: 200,
    connections: options.connections,
    warmupSeconds: options.warmupSeconds,
    durationSeconds,
    maxRequests: options.maxRequests,
  };
}

export async function runSplitEdgeBench(ctx: SplitEdgeBenchContext): Promise<SplitEdgeResults> {
  const { options, say } = ctx;
  const rounds = options.proxyRounds;
  const durationSeconds = options.durationSeconds / rounds;
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-bench-split-'));
  ctx.defer(() => fs.rm(dir, { recursive: true, force: true }));
  const closers: (() => Promise<void>)[] = [];
  const closeAll = async () => {
    for (const close of closers.splice(0).reverse()) await close();
  };
  ctx.defer(closeAll);
  const edges: SplitEdgeKind[] = (await findExecutable('haproxy')) === null ? ['builtin'] : ['haproxy', 'builtin'];
  if (edges.length === 1) say('  CAUTION: HAProxy is not installed: the built-in edge only (apt-get install haproxy)');
  const runs: SplitEdgeRun[] = [];
  try {
    const appDir = path.join(dir, 'app');
    await fs.mkdir(appDir);
    const app = await startTinyApp(appDir);
    closers.push(() => app.stop());
    const started = new Map<SplitEdgeKind, AppEdge>();
    for (const kind of edges) {
      const dataDir = path.join(dir, kind);
      await fs.mkdir(dataDir);
      const edge = await startAppEdge({
        config: localEdgeConfig(dataDir, kind),
        logger: pino({ level: 'warn' }, pino.destination(2)),
      });
      closers.push(() => edge.close());
      await edge.setTargets(LABEL, [{ instanceId: 'base-0', port: app.port, revisionId: BASE_REVISION }]);
      started.set(kind, edge);
      // Unmeasured: the edge's and the app's code paths and connections, and the load generator's, warmed.
      await ctx.load.run({ ...job(options, edge, Math.max(1, durationSeconds)), warmupSeconds: 0 });
    }
    say(
      `split: ${edges.join(' and ')} edge, a ${SPLIT_WEIGHT}% split against none, ${2 * edges.length * rounds} runs of ${options.warmupSeconds} s warm-up + ${durationSeconds} s (${rounds} rounds), ${options.connections} connections`,
    );
    for (let round = 0; round < rounds; round++) {
      for (const kind of edges) {
        const edge = started.get(kind)!;
        // The two conditions back to back, the first of them alternating from round to round.
        for (const split of round % 2 === 0 ? [false, true] : [true, false]) {
          await edge.setSplit(
            LABEL,
            split
              ? {
                  baseRevisionId: BASE_REVISION,
                  revisionId: SPLIT_REVISION,
                  weight: SPLIT_WEIGHT,
                  targets: [{ instanceId: 'split-0', port: app.port, revisionId: SPLIT_REVISION }],
                }
              : null,
          );
          const result = await ctx.load.run(job(options, edge, durationSeconds));
          runs.push({ edge: kind, split, round, result });
          say(
            `  split ${kind} ${split ? `${SPLIT_WEIGHT}% split` : 'no split'} (round ${round + 1}/${rounds}): ${Math.round(result.rps)}/s p50 ${result.p50.toFixed(2)} p99 ${result.p99.toFixed(2)}` +
              (result.failures ? ` FAILED ${result.failures}: ${result.firstFailure}` : ''),
          );
        }
      }
    }
  } finally {
    await closeAll();
    await fs.rm(dir, { recursive: true, force: true });
  }
  return {
    edges,
    runs,
    rounds,
    connections: options.connections,
    warmupSeconds: options.warmupSeconds,
    durationSeconds,
  };
}

/**
 * Each edge's median req/s and p99 with and without the split, and the ratio split / no split: the
 * median of each round's ratio (the two runs of a round ran back to back, so a burst of other work on the
 * machine moves both of them more often than one, and one round's outlier does not move the median).
 */
export function splitEdgeSummary(results: SplitEdgeResults) {
  return results.edges.map((edge) => {
    const of = (split: boolean) => results.runs.filter((r) => r.edge === edge && r.split === split);
    const without = of(false);
    const withSplit = of(true);
    const ratios = without.flatMap((w) => {
      const s = withSplit.find((r) => r.round === w.round);
      return s === undefined || w.result.rps === 0 ? [] : [s.result.rps / w.result.rps];
    });
    return {
      edge,
      rps: { without: median(without.map((r) => r.result.rps)), with: median(withSplit.map((r) => r.result.rps)) },
      p99: { without: median(without.map((r) => r.result.p99)), with: median(withSplit.map((r) => r.result.p99)) },
      ratio: median(ratios),
      failures: [...without, ...withSplit].reduce((n, r) => n + r.result.failures, 0),
    };
  });
}

export function splitEdgeTerminalReport(results: SplitEdgeResults): string {
  const lines = [
    `Traffic split at the edge: req/s with a ${SPLIT_WEIGHT}% split / without (goal >= ${SPLIT_GOAL}), ${results.rounds} rounds of ${results.durationSeconds} s, ${results.connections} connections`,
  ];
  for (const s of splitEdgeSummary(results))
    lines.push(
      `  ${s.edge.padEnd(8)} no split ${Math.round(s.rps.without)}/s p99 ${s.p99.without.toFixed(2)} ms | split ${Math.round(s.rps.with)}/s p99 ${s.p99.with.toFixed(2)} ms | ratio ${s.ratio.toFixed(2)} ${s.ratio >= SPLIT_GOAL ? 'goal met' : 'GOAL MISSED'}${s.failures ? ` | ${s.failures} FAILED` : ''}`,
    );
  return lines.join('\n');
}

export function splitEdgeMarkdownReport(results: SplitEdgeResults, run: { date: string; machine: string }): string {
  const rows = splitEdgeSummary(results).map(
    (s) =>
      `| ${s.edge} | ${Math.round(s.rps.without)} | ${s.p99.without.toFixed(2)} | ${Math.round(s.rps.with)} | ${s.p99.with.toFixed(2)} | ${s.ratio.toFixed(2)} | ${s.ratio >= SPLIT_GOAL ? 'yes' : 'no'} |`,
  );
  return [
    `Run ${run.date} on ${run.machine}: ${results.rounds} rounds of ${results.warmupSeconds} s warm-up + ${results.durationSeconds} s per condition, ${results.connections} connections.`,
    '',
    `| edge | no split req/s | p99 ms | ${SPLIT_WEIGHT}% split req/s | p99 ms | ratio | >= ${SPLIT_GOAL} |`,
    '|---|---|---|---|---|---|---|',
    ...rows,
  ].join('\n');
}
