/**
 * `npm test`: prepares one migrated template database, then runs every test file with Node's test
 * runner; each file clones the template (CREATE DATABASE ... TEMPLATE), which is far cheaper than
 * migrating per file. The server is the one named by DATABASE_URL, or else an embedded PostgreSQL
 * started in a temporary directory for this run. With no arguments it runs the tiers of
 * scripts/test-tiers.ts one after another (a file is in exactly one) and ends with each tier's outcome and
 * time.
 *
 * Usage: npm test [-- [--times FILE] [--tier NAME] [--concurrency N] [--record-sql FILE | --cover-sql FILE]
 *                   [--except LIST] [--no-bundle] test/some.test.ts ...]
 *   --times FILE       also write how long each file took, a JSON line per file (scripts/test-file-times.mjs)
 *   --tier NAME        every file of one tier (with any files named)
 *   --concurrency N    how many files run at once, instead of their tier's (CONCURRENCY)
 *   --record-sql FILE  also write which SQL statements each file's database ran (scripts/sql-record.ts; the
 *                      embedded server only)
 *   --cover-sql FILE   of the tier's files, run only the fewest that run every statement a record says they
 *                      ran (files named as well always run)
 *   --except LIST      leave out the test files LIST names (a path a line; `#` starts a comment): for a CI
 *                      that runs them in another step (.ci/ordinary-user-only); a path that names no test
 *                      file is an error, so the list cannot outlive a renamed file unnoticed
 *   --no-bundle        run the TypeScript through tsx as it is, instead of bundles (scripts/test-bundles.ts)
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { withClient } from '../src/db/admin-client.ts';
import { createMigratedDatabase, startScratchServer } from './scratch-server.ts';
import { bundleDir, bundleTests, BUNDLES_ENV, ENTRIES, sourceOfBundle } from './test-bundles.ts';
import {
  coverOfTier,
  DATABASES_ENV,
  preparedStatements,
  readRecord,
  RECORD_SETTINGS,
  type SqlRecord,
} from './sql-record.ts';
import { MAX_TEST_SECONDS } from '../test/support/wait.ts';
import { listedPaths, TIERS, tierOf, type Tier } from './test-tiers.ts';

/**
 * Per test file (Node 20's runner times each file's process as a whole): the last guard, for a hang
 * outside any test (a hook, a process that does not exit). A hung test is named sooner, by its own limit
 * (test/support/limited-test.ts: `TEST_SECONDS`, at most `MAX_TEST_SECONDS` when a test names its own),
 * which stays below this one; and no file may take as long as CI's whole budget (15 minutes).
 */
const TEST_TIMEOUT_MS = (MAX_TEST_SECONDS + 5 * 60) * 1000;

/**
 * How many files of a tier run at once (the runner's --test-concurrency); CI's machine has 2 cores. A
 * group of files of several tiers runs at the lowest of theirs.
 *
 * Why (measured by the CPU time files used, which a loaded machine inflates less than their wall time): a
 * database-tier file used about 13 CPU-seconds, so at 2 at once that tier keeps both cores busy already.
 * An apps-tier file waits for much of its time (builds from the registry, health checks, drains, leases
 * running out, a cron's tick): at 2 at once the tier took 1,455 s on CI's machine with cores idle; at 3,
 * 1,052 s in one CI run and two failures in the next; at 4, 915 to 938 s here with both cores busy. The
 * failures at 3 were an instance whose published port an outgoing connection had taken (app ports now
 * come from below the ephemeral range: src/dataplane/app-ports.ts) and a test that ran into its hang
 * guard. On 2026-12-07, alone on a machine of two cores: at 2, 772 s with a fifth of the CPU idle
 * (process accounting: 1,143 CPU-seconds busy, 315 idle); at 3, 618 s, the same work (1,132) and 96
 * idle, every test passing; but in a whole CI run on the same machine right after, 745 s against 772,
 * green too. A run at 3 beside other work had shown one more failure, bubblewrap's setup racing another
 * test's unmount, which a start now survives (src/dataplane/process-runner.ts). The gain is between 3%
 * and 20%, and each file is slower at 3 (persistent-state 210 s against 139). Later the same day, with
 * CI's steps side by side (.ci/run), the apps tier ran alone at the end of CI at 2 at once with a third
 * of the CPU idle (sampled from /proc/stat every 30 s: 65% busy on average, 31 to 46% in its last two
 * minutes), and 3 at once is what it runs at now.
 */
const CONCURRENCY: Record<Tier, number> = { 'no-database': 2, database: 2, apps: 3 };

/** How many of the files run at once: `--concurrency N`, else the lowest of their tiers' CONCURRENCY. */
async function concurrencyOf(files: string[], override: string | undefined): Promise<number> {
  if (override !== undefined) {
    const n = Number(override);
    if (!Number.isInteger(n) || n < 1) throw new Error(`--concurrency ${override}: a whole number, 1 or more`);
    return n;
  }
  const tiers = await Promise.all(files.map((f) => tierOf(f).catch(() => 'database' as const)));
  return tiers.length === 0 ? 1 : Math.min(...tiers.map((t) => CONCURRENCY[t]));
}

async function testFiles(dir: string): Promise<string[]> {
  const entries = await fs.readdir(dir, { withFileTypes: true, recursive: true });
  return entries
    .filter((e) => e.isFile() && e.name.endsWith('.test.ts'))
    .map((e) => path.relative(process.cwd(), path.join(e.parentPath, e.name)))
    .sort();
}

/**
 * The embedded test server keeps nothing past the run: it need not wait for the disk (a crash of the
 * machine is the only thing these guard against, and a run that crashes is run again), which spares
 * each file's clone of the template and every commit a flush.
 */
const TEST_SERVER_SETTINGS: Readonly<Record<string, string>> = {
  fsync: 'off',
  synchronous_commit: 'off',
  full_page_writes: 'off',
};

/** Takes `name VALUE` out of the arguments. */
function option(args: string[], name: string): string | undefined {
  const at = args.indexOf(name);
  if (at < 0) return undefined;
  const [, value] = args.splice(at, 2);
  if (value === undefined || value.startsWith('--')) throw new Error(`${name} needs a value`);
  return value;
}

/** The test files a list names (`--except`, listedPaths): each must be one. */
async function listedFiles(list: string): Promise<Set<string>> {
  const files = listedPaths(await fs.readFile(list, 'utf8'));
  const all = new Set(await testFiles('test'));
  const unknown = files.filter((file) => !all.has(file));
  if (unknown.length > 0) throw new Error(`--except ${list} names no test file at ${unknown.join(', ')}`);
  return new Set(files);
}

/** Takes the flag `name` out of the arguments: whether it was there. */
function flag(args: string[], name: string): boolean {
  const at = args.indexOf(name);
  if (at >= 0) args.splice(at, 1);
  return at >= 0;
}

/** The files a run's arguments name: `--tier NAME`'s and those named (a directory: every test file in it). */
async function filesOf(args: string[], tier: string | undefined): Promise<string[]> {
  if (tier !== undefined && !(TIERS as readonly string[]).includes(tier))
    throw new Error(`--tier ${tier}: the tiers are ${TIERS.join(', ')}`);
  // A directory argument means every test file under it (node --test alone finds none in one on Node 20).
  const named = (
    await Promise.all(args.map(async (a) => ((await fs.stat(a).catch(() => null))?.isDirectory() ? testFiles(a) : [a])))
  ).flat();
  const all = await testFiles('test');
  const ofTier =
    tier === undefined ? [] : (await Promise.all(all.map(async (f) => ((await tierOf(f)) === tier ? [f] : [])))).flat();
  if (tier !== undefined) process.stdout.write(`tier ${tier}: ${ofTier.length} files\n`);
  return named.length > 0 || tier !== undefined ? [...new Set([...ofTier, ...named])] : all;
}

/**
 * The files as bundles, to run without a loader (scripts/test-bundles.ts), with the entries tests start.
 * When esbuild refuses one (a syntax error, an `import.meta` it cannot keep), the files run through tsx
 * instead, so that every other file still runs and the refused one fails or passes on its own, and the
 * run fails all the same: the refusal is printed, and is to be mended.
 */
async function bundleFiles(files: string[]): Promise<{ bundles?: string; run: string[]; refused: boolean }> {
  const bundles = await bundleDir();
  try {
    return {
      bundles,
      run: (await bundleTests([...files, ...ENTRIES], bundles)).slice(0, files.length),
      refused: false,
    };
  } catch (error) {
    await fs.rm(bundles, { recursive: true, force: true });
    process.stderr.write(
      `== the files could not be bundled; they run through tsx, and the run fails:\n${error instanceof Error ? error.message : String(error)}\n`,
    );
    return { run: files, refused: true };
  }
}

/** Runs the files with Node's test runner; `env` gives them the template database when they need one. */
async function runFiles(
  files: string[],
  concurrency: number,
  times: string | undefined,
  env: NodeJS.ProcessEnv,
  bundled: boolean,
  appendTimes = false,
): Promise<number> {
  const { bundles, run, refused } = bundled
    ? await bundleFiles(files)
    : { bundles: undefined, run: files, refused: false };
  // A test that hangs fails by name after the timeout instead of holding the run until CI gives up on
  // it without saying which.
  const child = spawn(
    process.execPath,
    [
      ...(bundles ? ['--enable-source-maps'] : ['--import', 'tsx']),
      '--test',
      `--test-concurrency=${concurrency}`,
      `--test-timeout=${TEST_TIMEOUT_MS}`,
      // A file whose tests (and hooks) are done ends, whatever it left open: a before() that failed
      // half-way (Fastify's plugin timeout on a busy machine) left servers listening, and the file then
      // held its slot until the limit per file (20 minutes, then). What a file leaves running is
      // .ci/run's to find (check_left_running).
      '--test-force-exit',
      ...(times
        ? [
            `--test-reporter=${process.stdout.isTTY ? 'spec' : 'tap'}`,
            '--test-reporter-destination=stdout',
            `--test-reporter=${path.resolve('scripts/test-file-times.mjs')}`,
            `--test-reporter-destination=${appendTimes ? `${times}.part` : times}`,
          ]
        : []),
      ...run,
    ],
    { stdio: 'inherit', env: { ...process.env, ...env, ...(bundles ? { [BUNDLES_ENV]: bundles } : {}) } },
  );
  const forward = (signal: NodeJS.Signals) => child.kill(signal);
  process.on('SIGINT', forward);
  process.on('SIGTERM', forward);
  const exit = await new Promise<number>((resolve) => child.on('exit', (code) => resolve(code ?? 1)));
  if (bundles) await fs.rm(bundles, { recursive: true, force: true });
  const code = exit === 0 && refused ? 1 : exit;
  if (times && appendTimes) {
    // A run of the tiers: each tier's files are added to the one file.
    await fs.appendFile(times, await fs.readFile(`${times}.part`, 'utf8').catch(() => ''));
    await fs.rm(`${times}.part`, { force: true });
  }
  if (times) await sortTimes(times);
  return code;
}

/**
 * The times file (a JSON line per file, as each ended), slowest first, each line with the file's tier,
 * then the lines of the tests that failed, as they came (scripts/slowest-files.mjs prints them so).
 */
async function sortTimes(file: string): Promise<void> {
  type FileLine = { file: string; seconds: number; tier?: string };
  type FailedLine = { failed: string; at?: string; reason: string };
  const lines = (await fs.readFile(file, 'utf8').catch(() => '')).split('\n').filter((line) => line !== '');
  const parsed = lines.map((line) => JSON.parse(line) as FileLine | FailedLine);
  const failed = parsed.filter((entry): entry is FailedLine => 'failed' in entry);
  for (const entry of failed) if (entry.at !== undefined) entry.at = sourceOfBundle(entry.at);
  const files = await Promise.all(
    parsed
      .filter((entry): entry is FileLine => !('failed' in entry))
      .map(async (entry) => {
        entry.file = sourceOfBundle(entry.file);
        entry.tier ??= await tierOf(entry.file).catch(() => undefined);
        return entry;
      }),
  );
  files.sort((a, b) => b.seconds - a.seconds);
  await fs.writeFile(file, [...files, ...failed].map((entry) => `${JSON.stringify(entry)}\n`).join(''));
}

async function main(): Promise<number> {
  // The compiled service the ops tests share (test/support/compiled-build.ts): one build per run, or
  // per CI run when .ci/run names the directory for all its steps.
  if (process.env.SLIPWAY_TEST_BUILD_DIR === undefined) {
    const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-test-build-'));
    process.env.SLIPWAY_TEST_BUILD_DIR = dir;
    process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
  }
  const args = process.argv.slice(2);
  const times = option(args, '--times');
  const tier = option(args, '--tier');
  const concurrency = option(args, '--concurrency');
  const recordSql = option(args, '--record-sql');
  const coverSql = option(args, '--cover-sql');
  const exceptList = option(args, '--except');
  const except = exceptList === undefined ? new Set<string>() : await listedFiles(exceptList);
  const bundled = !flag(args, '--no-bundle');
  if (recordSql !== undefined && process.env.DATABASE_URL)
    throw new Error('--record-sql reads the embedded server (pg_stat_statements): run it without DATABASE_URL');
  // `npm test` alone (the README's command) runs the tiers one after another, each timed; named files
  // or a tier run as one group.
  // (With --cover-sql, the files the tier and arguments name until the server has judged the record.)
  const groups: { name: string | null; files: string[] }[] =
    args.length === 0 && tier === undefined
      ? await Promise.all(TIERS.map(async (name) => ({ name, files: await filesOf([], name) })))
      : [{ name: null, files: await filesOf(args, tier) }];
  const leaveOut = () => {
    if (except.size === 0) return;
    for (const group of groups) group.files = group.files.filter((file) => !except.has(path.normalize(file)));
    process.stdout.write(`== ${except.size} files left out (--except ${exceptList}): they run in another step\n`);
  };
  if (coverSql === undefined) leaveOut();
  // Files that need no database (the no-database tier) run without a server: none is started for them.
  const needsDatabase = async (files: string[]) =>
    (await Promise.all(files.map((f) => tierOf(f).catch(() => 'database' as const)))).some((t) => t !== 'no-database');
  const anyDatabase = (await Promise.all(groups.map((g) => needsDatabase(g.files)))).some(Boolean);
  if (!anyDatabase && coverSql !== undefined) {
    groups[0]!.files = await coveringFiles(args, tier, coverSql, undefined);
    leaveOut();
  }
  if (!anyDatabase) {
    process.stdout.write('test database: none (no file needs one)\n');
    return runGroups(groups, times, concurrency, {}, bundled);
  }
  const server = await startScratchServer(process.env.DATABASE_URL, pino({ level: 'warn' }), 'slipway-test', {
    ...TEST_SERVER_SETTINGS,
    ...(recordSql === undefined ? {} : RECORD_SETTINGS),
  });
  const adminUrl = server.adminUrl;
  process.stdout.write(
    server.embedded
      ? 'test database: embedded PostgreSQL\n'
      : `test database: ${new URL(adminUrl).host} (DATABASE_URL)\n`,
  );
  const template = `slipway_test_${process.pid}_${randomBytes(3).toString('hex')}`;
  try {
    const templateUrl = await createMigratedDatabase(adminUrl, template);
    if (coverSql !== undefined) {
      // Judged in the template before any file clones it (a clone needs its template without sessions).
      groups[0]!.files = await coveringFiles(args, tier, coverSql, templateUrl);
      leaveOut();
    }
    const databases = recordSql === undefined ? undefined : `${recordSql}.databases`;
    if (databases) await fs.writeFile(databases, '');
    const code = await runGroups(
      groups,
      times,
      concurrency,
      {
        SLIPWAY_TEST_ADMIN_URL: adminUrl,
        SLIPWAY_TEST_TEMPLATE: template,
        ...(databases ? { [DATABASES_ENV]: databases } : {}),
      },
      bundled,
    );
    if (recordSql && databases) await writeRecord(adminUrl, databases, recordSql, times);
    return code;
  } finally {
    await withClient(adminUrl, async (c) => {
      const left = await c.query<{ datname: string }>('select datname from pg_database where datname like $1', [
        `${template}%`,
      ]);
      for (const { datname } of left.rows)
        await c.query(`drop database if exists ${c.escapeIdentifier(datname)} with (force)`);
    }).catch((error: unknown) => process.stderr.write(`could not drop test databases: ${String(error)}\n`));
    await server.stop();
  }
}

/** Writes the record of the SQL each file ran (scripts/sql-record.ts), with each file's time when known. */
async function writeRecord(adminUrl: string, databases: string, file: string, times: string | undefined) {
  const seconds = new Map<string, number>();
  for (const line of (times ? await fs.readFile(times, 'utf8').catch(() => '') : '').split('\n')) {
    if (line === '') continue;
    const entry = JSON.parse(line) as { file: string; seconds: number };
    seconds.set(entry.file, entry.seconds);
  }
  const { record, dropped } = await readRecord(adminUrl, databases, seconds);
  await fs.writeFile(file, `${JSON.stringify(record)}\n`);
  await fs.rm(databases, { force: true });
  const statements = new Set(Object.values(record.files).flatMap((f) => f.statements)).size;
  process.stdout.write(
    `== SQL record: ${statements} statements of ${Object.keys(record.files).length} files, in ${file}\n`,
  );
  // pg_stat_statements dropped some for want of room: the record says so, and a cover of it runs every file.
  if (dropped > 0)
    process.stderr.write(
      `== SQL record: the server dropped statements ${dropped} times (pg_stat_statements.max): ` +
        'a cover of this record runs every file\n',
    );
}

/**
 * `--cover-sql RECORD`: of the tier's files, the fewest that together run every statement the record says
 * any of them ran and the server at `prepareOn` (the run's migrated template) does not prepare
 * (scripts/sql-record.ts); the files named besides run in any case. Without a readable record every file
 * runs, and the run says so.
 */
async function coveringFiles(
  args: string[],
  tier: string | undefined,
  recordFile: string,
  prepareOn: string | undefined,
): Promise<string[]> {
  const forced = args.length > 0 ? await filesOf(args, undefined) : [];
  const candidates = tier === undefined ? [] : await filesOf([], tier);
  let record: SqlRecord;
  try {
    record = JSON.parse(await fs.readFile(recordFile, 'utf8')) as SqlRecord;
  } catch (error) {
    process.stdout.write(`== SQL cover: no record in ${recordFile} (${String(error)}): every file runs\n`);
    return [...new Set([...candidates, ...forced])];
  }
  const prepared = prepareOn === undefined ? undefined : await preparedStatements(prepareOn, record);
  const cover = await coverOfTier(record, candidates, forced, prepared?.accepted);
  if (cover.incomplete) {
    process.stdout.write(
      `== SQL cover: the record in ${recordFile} lacks statements the server dropped (${record.dropped} times, ` +
        `pg_stat_statements.max): every file runs\n`,
    );
    return cover.files;
  }
  if (prepared !== undefined) {
    process.stdout.write(
      `== SQL prepared: the server prepares ${prepared.accepted.size} of the record's ` +
        `${prepared.accepted.size + prepared.refused.size} statements; the files run the others\n`,
    );
    // Why each of the others was not accepted, one line each, the commonest reasons first.
    const reasons = new Map<string, number>();
    for (const why of prepared.refused.values()) {
      const reason = why.replace(/"[^"]*"/g, '"…"').replace(/\$\d+/g, '$n');
      reasons.set(reason, (reasons.get(reason) ?? 0) + 1);
    }
    for (const [reason, count] of [...reasons].sort((a, b) => b[1] - a[1]))
      process.stdout.write(`   ${String(count).padStart(4)}  ${reason}\n`);
  }
  process.stdout.write(
    `== SQL cover: ${cover.files.length} of ${new Set([...candidates, ...forced]).size} files run all ` +
      `${cover.statements - cover.settled} statements the record has of them and the server did not prepare ` +
      `(${Math.round(cover.seconds.chosen)} of ${Math.round(cover.seconds.all)} recorded seconds)` +
      (cover.unrecorded.length > 0 ? `; ${cover.unrecorded.length} the record has nothing of run too` : '') +
      (cover.ownDatabases.length > 0
        ? `; ${cover.ownDatabases.length} that make databases the record does not see (their own, apps') run too`
        : '') +
      '\n',
  );
  return cover.files;
}

/**
 * Runs each group in turn, every group even after one failed; a run of the tiers says each one's
 * outcome and time at its end. The exit code is the first failure's.
 */
async function runGroups(
  groups: { name: string | null; files: string[] }[],
  times: string | undefined,
  concurrencyOption: string | undefined,
  env: NodeJS.ProcessEnv,
  bundled: boolean,
): Promise<number> {
  let code = 0;
  const summary: string[] = [];
  if (times && groups.length > 1) await fs.writeFile(times, '');
  for (const group of groups) {
    const started = Date.now();
    const concurrency = await concurrencyOf(group.files, concurrencyOption);
    const what =
      group.name === null ? `${group.files.length} files` : `the ${group.name} tier: ${group.files.length} files`;
    process.stdout.write(`== ${what}, ${concurrency} at once\n`);
    const exit =
      group.files.length === 0 ? 0 : await runFiles(group.files, concurrency, times, env, bundled, group.name !== null);
    if (code === 0) code = exit;
    const seconds = Math.round((Date.now() - started) / 1000);
    if (group.name !== null) {
      const line = `the ${group.name} tier: ${exit === 0 ? 'passed' : 'FAILED'} after ${seconds} s`;
      process.stdout.write(`== ${line}\n`);
      summary.push(line);
    }
  }
  if (summary.length > 0) process.stdout.write(`== tiers:\n${summary.map((l) => `   ${l}`).join('\n')}\n`);
  return code;
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`${error instanceof Error ? error.stack : String(error)}\n`);
    process.exit(1);
  },
);
