/**
 * The app start group of `npm run bench` (`--only appstart`; docs/performance.md, "Building the app"):
 * the CPU time a process spends building the API (`buildApp` as main.ts calls it, then `ready()`) with
 * the routes' schemas compiled when first used, as the service does (src/http/schema-cache.ts), against
 * the same build with every schema compiled at once (`schemaCompiles.all()` right after `ready()`, as
 * every start did before), in the same run. And what the deferral moves to the first requests: the CPU
 * time of the first request after the build (`GET /v2/deployments?limit=nope`, answered 422: its
 * query validator and the 422 envelope's serializer are compiled on the way), in each condition.
 *
 * Each sample is a fresh process (`node --import tsx bench/app-start.ts sample <mode> <database URL>`):
 * a start is a cold process, and a second build in one process would find its modules compiled. The
 * conditions alternate, the first one alternating from round to round; the table gives each condition's
 * median and the median of the rounds' ratios.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { Kysely, PostgresDialect } from 'kysely';
import pino from 'pino';
import { buildApp } from '../src/app.ts';
import { bootstrap } from '../src/bootstrap.ts';
import { loadConfig } from '../src/config.ts';
import { createSecretBox } from '../src/crypto/secret-box.ts';
import { connect } from '../src/db/database.ts';
import type { Database } from '../src/store/schema.ts';
import { median } from './median.ts';

export const isAppStartKey = (key: string) => key === 'appstart';

/** The bench database's admin key (bootstrap makes it when the database has none). */
const BENCH_KEY = 'slw_bench_app_start_key_0123456789abcdef';

type Mode = 'deferred' | 'all-at-start';
const MODES: readonly Mode[] = ['deferred', 'all-at-start'];

interface Sample {
  /** CPU seconds of buildApp and ready() (and all(), at start). */
  build: number;
  /** CPU seconds of the first GET /v2/deployments. */
  firstRequest: number;
  /** How many compilations ran at start (all-at-start), or were still left after the first request (deferred). */
  compilations: number;
}

export interface AppStartResults {
  rounds: number;
  samples: Record<Mode, Sample[]>;
  /** Each round's build CPU, deferred / all at start. */
  ratios: number[];
}

const cpuSeconds = (since: NodeJS.CpuUsage) => {
  const used = process.cpuUsage(since);
  return (used.user + used.system) / 1e6;
};

/** One sample, in this process: what the group's child runs. */
async function sample(mode: Mode, databaseUrl: string): Promise<Sample> {
  const { pool } = connect(databaseUrl);
  const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-bench-start-'));
  try {
    const config = loadConfig({ SLIPWAY_DATA_DIR: dataDir, LOG_LEVEL: 'silent', HOST: '127.0.0.1', PORT: '0' });
    const logger = pino({ level: 'silent' });
    const secretBox = createSecretBox(randomBytes(32));
    // A key that passes authentication, so the first request reaches its validators (not timed).
    await bootstrap(db, BENCH_KEY);
    const started = process.cpuUsage();
    const app = await buildApp({ config, db, secretBox, logger });
    await app.ready();
    const compilations = mode === 'all-at-start' ? app.schemaCompiles.all() : 0;
    const build = cpuSeconds(started);
    const asked = process.cpuUsage();
    const response = await app.inject({ url: '/v2/deployments?limit=nope', headers: { 'x-api-key': BENCH_KEY } });
    const firstRequest = cpuSeconds(asked);
    if (response.statusCode !== 422) throw new Error(`GET /v2/deployments?limit=nope answered ${response.statusCode}`);
    const pending = mode === 'deferred' ? app.schemaCompiles.all() : compilations;
    await app.close();
    return { build, firstRequest, compilations: pending };
  } finally {
    await db.destroy();
    await fs.rm(dataDir, { recursive: true, force: true });
  }
}

export async function runAppStartBench(options: {
  databaseUrl: string;
  rounds: number;
  say: (line: string) => void;
}): Promise<AppStartResults> {
  const run = promisify(execFile);
  const self = fileURLToPath(import.meta.url);
  const samples: Record<Mode, Sample[]> = { deferred: [], 'all-at-start': [] };
  const ratios: number[] = [];
  for (let round = 0; round < options.rounds; round += 1) {
    const order = round % 2 === 0 ? MODES : [...MODES].reverse();
    const got: Partial<Record<Mode, Sample>> = {};
    for (const mode of order) {
      const { stdout } = await run(process.execPath, ['--import', 'tsx', self, 'sample', mode, options.databaseUrl]);
      got[mode] = JSON.parse(stdout.trim().split('\n').at(-1)!) as Sample;
      samples[mode].push(got[mode]);
    }
    ratios.push(got.deferred!.build / got['all-at-start']!.build);
    options.say(
      `appstart: round ${round + 1}: build ${got.deferred!.build.toFixed(2)} s deferred, ${got['all-at-start']!.build.toFixed(2)} s all at start`,
    );
  }
  return { rounds: options.rounds, samples, ratios };
}

function rows(results: AppStartResults) {
  return MODES.map((mode) => ({
    mode,
    build: median(results.samples[mode].map((s) => s.build)),
    firstRequest: median(results.samples[mode].map((s) => s.firstRequest)),
    compilations: median(results.samples[mode].map((s) => s.compilations)),
  }));
}

export function appStartTerminalReport(results: AppStartResults): string {
  return [
    'app start: CPU seconds, median of the rounds',
    ...rows(results).map(
      (r) =>
        `  ${r.mode.padEnd(13)} build ${r.build.toFixed(3)}  first request ${r.firstRequest.toFixed(3)}  compilations ${r.compilations}`,
    ),
    `  ratio deferred / all at start (build): ${median(results.ratios).toFixed(2)}`,
  ].join('\n');
}

export function appStartMarkdownReport(results: AppStartResults, run: { date: string; machine: string }): string {
  return [
    `Run ${run.date} on ${run.machine}: ${results.rounds} rounds, a fresh process per sample.`,
    '',
    "| schemas compiled | build CPU s | first request CPU s | routes' validators and serializers |",
    '|---|---|---|---|',
    ...rows(results).map(
      (r) =>
        `| ${r.mode === 'deferred' ? 'when first used (the service)' : 'all at start'} | ${r.build.toFixed(3)} | ${r.firstRequest.toFixed(3)} | ${r.compilations}${r.mode === 'deferred' ? ' not yet compiled after the first request' : ' compiled at start'} |`,
    ),
    '',
    `Ratio of the build, deferred / all at start: **${median(results.ratios).toFixed(2)}** (median of the rounds).`,
  ].join('\n');
}

if (process.argv[2] === 'sample') {
  const mode = process.argv[3] as Mode;
  if (!MODES.includes(mode) || !process.argv[4]) throw new Error('usage: app-start.ts sample <mode> <database URL>');
  process.stdout.write(`${JSON.stringify(await sample(mode, process.argv[4]))}\n`);
}
