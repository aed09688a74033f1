/**
 * `npm run bench`: Slipway's API under load against its two ceilings (method: docs/performance.md).
 *
 * 1. A real PostgreSQL (embedded in a temporary directory, or a fresh database on DATABASE_URL),
 *    migrated and seeded (bench/seed.ts) with a small and a large measured workspace and other tenants.
 * 2. The service, built by `buildApp` as in production, and a bare Fastify app, both listening on
 *    loopback in this process; the load comes from a child process (bench/load-worker.ts).
 * 3. Per scenario and size: one request is sent and its SQL statements and response recorded; then
 *    three measured runs with the same concurrency: the API, the recorded statements replayed straight
 *    through `pg` (fresh ids for what the request created), and the bare app answering the recorded
 *    response bytes.
 * 4. The table is printed (and with --write-docs put into docs/performance.md).
 *
 * Before all that, the data plane group (bench/data-plane.ts; `--only dataplane` runs it alone): two
 * services with their workers, each on a database of its own, one with SLIPWAY_SANDBOX=none (apps run
 * bare) and one with the default full isolation, measured interleaved: create to DEPLOYED against the
 * app started directly, the app's commands under each sandbox, and the app proxy against the same app
 * instance called on the port the edge sends to, through the service's edge (nginx when installed), a
 * plain nginx and the built-in edge, and the API's latency alone and under app load; each figure per
 * mode and isolated / bare. Then the listener group (bench/listener-polls.ts; `--only listeners`):
 * patch to a listener's long-poll answer with one and with 1,000 listeners polling, and the service's
 * memory while it holds their polls. Then the LangGraph state group (bench/langgraph-state.ts; `--only
 * langgraph`): runs per second and first stream event of a trivial graph with its state in PostgreSQL
 * against LangChain's in-memory server, and the CPU an instance's start costs without and with the
 * build's graph schemas file. And the traffic split group (bench/split-edge.ts; `--only split`):
 * the app edge's req/s to an endpoint with a 10% split against the same endpoint without one. And
 * the app start group (bench/app-start.ts; `--only appstart`): the CPU of building the API with its
 * schemas compiled when first used against all of them at start. And the test start group
 * (bench/test-start.ts; `--only teststart`): the CPU a test file's process spends loading the harness,
 * as `npm test`'s bundle against a bundle that leaves the packages to Node and against tsx.
 *
 * Every run is bounded by its duration, a request cap and a timeout; the whole bench stops by itself.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import pino from 'pino';
import { loadDatabaseUrl } from '../src/config.ts';
import { openBenchDatabase } from './bench-database.ts';
import { cpuBetween, sampleCpu, type RunCpu } from './cpu-usage.ts';
import { dataPlaneParts, isDataPlaneKey, runDataPlaneBench } from './data-plane.ts';
import { dataPlaneMarkdownReport, dataPlaneTerminalReport } from './data-plane-report.ts';
import {
  isLangGraphKey,
  langGraphMarkdownReport,
  langGraphTerminalReport,
  runLangGraphBench,
} from './langgraph-state.ts';
import { isListenersKey, runListenerPollBench } from './listener-polls.ts';
import { isSplitKey, runSplitEdgeBench, splitEdgeMarkdownReport, splitEdgeTerminalReport } from './split-edge.ts';
import { appStartMarkdownReport, appStartTerminalReport, isAppStartKey, runAppStartBench } from './app-start.ts';
import { isTestStartKey, runTestStartBench, testStartMarkdownReport, testStartTerminalReport } from './test-start.ts';
import { listenerPollMarkdownReport, listenerPollTerminalReport } from './listener-polls-report.ts';
import { parseBenchOptions, USAGE, type BenchOptions } from './bench-options.ts';
import { startBareServer, startService, type BareServer, type ServiceUnderTest } from './bench-servers.ts';
import type { HttpJob, LoadJob, LoadResult, SqlJob, WorkerReply } from './load-protocol.ts';
import { explainStatements } from './query-plans.ts';
import {
  markdownReport,
  otherShare,
  terminalReport,
  writeResultsSection,
  type PlanSummary,
  type ScenarioResult,
} from './report.ts';
import { scenariosFor, type Scenario } from './scenarios.ts';
import { seed, type MeasuredWorkspace } from './seed.ts';

const BENCH_DIR = path.dirname(fileURLToPath(import.meta.url));
const DOCS_FILE = path.resolve(BENCH_DIR, '../docs/performance.md');
/** Rounds of the app start group: a fresh process per sample, each about a second. */
const APP_START_ROUNDS = 6;
/** Rounds of the test start group: each starts three processes, a fresh one per mode. */
const TEST_START_ROUNDS = 6;

const say = (line: string) => process.stdout.write(`${line}\n`);

/** The child process that generates load, one job at a time. */
class LoadGenerator {
  private constructor(private readonly child: ChildProcess) {}

  static start(): LoadGenerator {
    const child = fork(path.join(BENCH_DIR, 'load-worker.ts'), [], {
      execArgv: ['--import', 'tsx'],
      serialization: 'advanced',
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    return new LoadGenerator(child);
  }

  run(job: LoadJob): Promise<LoadResult> {
    const limitMs = (job.warmupSeconds + job.durationSeconds + 60) * 1000;
    return new Promise((resolve, reject) => {
      const cleanup = () => {
        clearTimeout(timer);
        this.child.off('message', onMessage);
        this.child.off('exit', onExit);
      };
      const onMessage = (reply: WorkerReply) => {
        cleanup();
        if (reply.ok) resolve(reply.result);
        else reject(new Error(`load generator: ${reply.error}`));
      };
      const onExit = (code: number | null) => {
        cleanup();
        reject(new Error(`load generator exited (code ${code})`));
      };
      const timer = setTimeout(() => {
        cleanup();
        reject(new Error(`load generator did not answer within ${limitMs / 1000} s`));
      }, limitMs);
      this.child.on('message', onMessage);
      this.child.once('exit', onExit);
      this.child.send(job);
    });
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  stop(): void {
    if (this.child.exitCode === null) this.child.disconnect();
  }
}

interface Context {
  options: BenchOptions;
  service: ServiceUnderTest;
  bare: BareServer;
  load: LoadGenerator;
  databaseUrl: string;
}

interface Answer {
  status: number;
  bytes: Buffer;
  json: Record<string, unknown>;
}

async function call(
  ctx: Context,
  ws: MeasuredWorkspace,
  s: Scenario,
  slot: string | undefined,
  unique: string,
): Promise<Answer> {
  const body = s.body?.replace('{unique}', unique);
  const response = await fetch(`${ctx.service.origin}${s.path.replace('{slot}', slot ?? '')}`, {
    method: s.method,
    headers: { 'x-api-key': ws.apiKey, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
    ...(body !== undefined ? { body } : {}),
  });
  const bytes = Buffer.from(await response.arrayBuffer());
  if (response.status !== s.expectStatus)
    throw new Error(`${s.key}: ${s.method} ${s.path} answered ${response.status}: ${bytes.toString().slice(0, 500)}`);
  return { status: response.status, bytes, json: JSON.parse(bytes.toString()) as Record<string, unknown> };
}

async function latestRevisions(pool: pg.Pool, deploymentIds: string[]): Promise<string[]> {
  const rows = await pool.query<{ id: string; latest_revision_id: string }>(
    'select id, latest_revision_id from deployments where id = any($1::uuid[])',
    [deploymentIds],
  );
  const latest = new Map(rows.rows.map((r) => [r.id, r.latest_revision_id]));
  return deploymentIds.map((id) => latest.get(id)!);
}

const hex = () => randomBytes(4).toString('hex');

/** Runs a load job and notes where the CPU time went meanwhile. */
async function timed(ctx: Context, job: LoadJob): Promise<{ result: LoadResult; cpu: RunCpu | null }> {
  const before = await sampleCpu(ctx.load.pid);
  const result = await ctx.load.run(job);
  return { result, cpu: cpuBetween(before, await sampleCpu(ctx.load.pid), result.allRequests) };
}

interface Timing {
  warmupSeconds: number;
  durationSeconds: number;
}

/** A scenario ready to run: its recorded request, and the three load jobs built from it. */
interface PreparedScenario {
  statements: number;
  plan: PlanSummary | null;
  api: HttpJob;
  bare: HttpJob;
  /** Built after the API run: a patch's replay starts from the latest revisions the API run left. */
  sql(): Promise<SqlJob>;
}

async function prepare(ctx: Context, ws: MeasuredWorkspace, s: Scenario, timing: Timing): Promise<PreparedScenario> {
  const { options } = ctx;
  const slot = s.slots[0];
  // A first request warms the key cache and the plan; the second is the one recorded.
  await call(ctx, ws, s, slot, `w${hex()}${hex()}`);
  const carried = s.carriesLatestRevision ? (await latestRevisions(ctx.service.pool, [slot!]))[0]! : null;
  const unique = `c${hex()}${hex()}`;
  const stop = ctx.service.capture();
  const answer = await call(ctx, ws, s, slot, unique);
  const statements = stop();
  const bareKey = `${s.key}-${ws.size}`;
  ctx.bare.responses.set(bareKey, { status: answer.status, body: answer.bytes });

  const common = { connections: options.connections, maxRequests: options.maxRequests, ...timing };
  const http = (origin: string, pathTemplate: string, slots: string[]): HttpJob => ({
    kind: 'http',
    origin,
    method: s.method,
    path: pathTemplate,
    slots,
    body: s.body,
    uniquePrefix: `a${hex()}-`,
    headers: { 'x-api-key': ws.apiKey, ...(s.body !== null ? { 'content-type': 'application/json' } : {}) },
    expectStatus: s.expectStatus,
    ...common,
  });
  const createdIds = s.createdIds(answer.json);
  return {
    statements: statements.length,
    plan: s.kind === 'read' ? await explainStatements(ctx.service.pool, statements) : null,
    api: http(ctx.service.origin, s.path, s.slots),
    bare: http(ctx.bare.origin, `/bare/${bareKey}`, []),
    sql: async () => ({
      kind: 'sql',
      databaseUrl: ctx.databaseUrl,
      // The service's own pool size, and the same number of concurrent clients as HTTP connections.
      poolSize: ctx.service.pool.options.max ?? 10,
      concurrency: options.connections,
      prepared: options.preparedStatements,
      statements,
      rotate: slot !== undefined ? [{ placeholder: slot, values: s.slots }] : [],
      fresh: [
        ...createdIds.map((id) => ({ placeholder: id, prefix: null })),
        ...(s.body?.includes('{unique}') ? [{ placeholder: unique, prefix: `s${hex()}-` }] : []),
      ],
      carry:
        carried !== null
          ? { placeholder: carried, values: await latestRevisions(ctx.service.pool, s.slots), becomes: createdIds[0]! }
          : null,
      ...common,
    }),
  };
}

async function measure(ctx: Context, ws: MeasuredWorkspace, s: Scenario): Promise<ScenarioResult> {
  const prepared = await prepare(ctx, ws, s, ctx.options);
  const api = await timed(ctx, prepared.api);
  const sql = await timed(ctx, await prepared.sql());
  const bare = await timed(ctx, prepared.bare);
  return {
    key: s.key,
    title: s.title,
    kind: s.kind,
    size: ws.size,
    statements: prepared.statements,
    api: api.result,
    sql: sql.result,
    bare: bare.result,
    plan: prepared.plan,
    cpu: { api: api.cpu, sql: sql.cpu, bare: bare.cpu },
  };
}

/**
 * Before the first measured run: a few seconds of the first read scenario through all three paths,
 * so that no measured run pays for compiling code (the service's, autocannon's, pg's) or for cold caches.
 */
async function warmUp(ctx: Context, ws: MeasuredWorkspace, s: Scenario): Promise<void> {
  const prepared = await prepare(ctx, ws, s, {
    warmupSeconds: 0,
    durationSeconds: Math.max(2, ctx.options.warmupSeconds * 3),
  });
  await ctx.load.run(prepared.api);
  await ctx.load.run(await prepared.sql());
  await ctx.load.run(prepared.bare);
}

function progressLine(r: ScenarioResult): string {
  const part = (name: string, x: LoadResult) =>
    `${name} ${Math.round(x.rps)}/s p50 ${x.p50.toFixed(2)} p99 ${x.p99.toFixed(2)}${x.failures ? ` FAILED ${x.failures}: ${x.firstFailure}` : ''}`;
  const c = r.cpu.api;
  const others =
    c === null
      ? ''
      : `, CPU ms/req node ${c.nodeMs.toFixed(3)} pg ${c.postgresMs?.toFixed(3) ?? '?'} loadgen ${c.loadgenMs?.toFixed(3) ?? '?'}, others ${Math.round(otherShare(r) * 100)}%`;
  return `  ${r.key} @${r.size}: ${part('api', r.api)} | ${part('sql', r.sql)} | ${part('bare', r.bare)} | ${r.statements} statements${r.plan ? `, ${r.plan.pages} pages` : ''}${others}`;
}

async function main(): Promise<number> {
  const parsed = parseBenchOptions(process.argv.slice(2));
  if (parsed === 'help') {
    say(USAGE);
    return 0;
  }
  const options = parsed;
  const started = Date.now();
  const logger = pino({ level: 'warn' }, pino.destination(2));
  const cleanups: (() => Promise<void> | void)[] = [];
  let cleaning: Promise<void> | null = null;
  const cleanup = () =>
    (cleaning ??= (async () => {
      for (const step of cleanups.reverse()) {
        await Promise.resolve()
          .then(step)
          .catch((error: unknown) => logger.warn({ err: error }, 'cleanup step failed'));
      }
    })());
  const onSignal = (signal: NodeJS.Signals) => {
    process.stderr.write(`\n${signal}: stopping the bench\n`);
    void cleanup().then(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);

  try {
    const database = await openBenchDatabase(loadDatabaseUrl() ?? undefined, logger);
    cleanups.push(() => database.close());
    say(`database: ${database.description}`);
    const load = LoadGenerator.start();
    cleanups.push(() => load.stop());
    const cpus = os.cpus();
    const runInfo = {
      date: new Date().toISOString().slice(0, 16).replace('T', ' ') + ' UTC',
      machine: `${cpus.length} x ${cpus[0]?.model.trim() ?? 'unknown CPU'}, ${Math.round(os.totalmem() / 2 ** 30)} GiB RAM, ${os.type()} ${os.release()}`,
      node: process.version,
      database: database.description,
    };
    /** A group's table on the terminal, and with --write-docs in its section of docs/performance.md. */
    const reportGroup = async (terminal: string, section: string, markdown: () => string, what: string) => {
      say('');
      say(terminal);
      if (options.writeDocs) {
        await writeResultsSection(DOCS_FILE, section, markdown());
        say(`\nwrote the ${what} results into ${path.relative(process.cwd(), DOCS_FILE)}`);
      }
      say('');
    };

    // The data plane group (bench/data-plane.ts) first, on a database of its own: named in --only, or
    // by default (not in the prepared statements experiment, which is about the API's SQL).
    const parts =
      options.only.length === 0 && options.preparedStatements
        ? { deploy: false, proxy: false, api: false }
        : dataPlaneParts(options.only);
    if (parts.deploy || parts.proxy || parts.api) {
      const proxyRuns = 2 * 5 * 2 * options.proxyRounds;
      // Alone, through the stable URL, the built-in edge, out of the reserve, a heavier reserve, the probe at ordinary priority.
      const apiRuns = 6 * options.proxyRounds;
      const roundOf = `each of ${options.warmupSeconds} s warm-up + ${options.durationSeconds / options.proxyRounds} s (${options.proxyRounds} rounds)`;
      say(
        `data plane: SLIPWAY_SANDBOX=none and the default (full isolation) side by side, each with its own service: ${[parts.deploy ? `${options.deployments} deployments of each of two apps per mode, and the tiny app's commands under each sandbox` : '', parts.proxy ? `${proxyRuns} proxy runs and ${apiRuns} runs of the API under app load, ${roundOf}` : parts.api ? `${apiRuns} runs of the API alone and under the tiny app's load, ${roundOf}` : ''].filter(Boolean).join('; ')}`,
      );
      // The API probe runs beside the app load, so it needs a load generator of its own.
      const probe = parts.api ? LoadGenerator.start() : null;
      if (probe !== null) cleanups.push(() => probe.stop());
      const dataPlane = await runDataPlaneBench({
        options,
        parts,
        serverUrl: database.url,
        load,
        probe,
        say,
        defer: (step) => void cleanups.push(step),
      });
      await reportGroup(
        dataPlaneTerminalReport(dataPlane),
        'bench-results-dataplane',
        () => dataPlaneMarkdownReport(dataPlane, runInfo),
        'data plane',
      );
    }

    // The listener group (bench/listener-polls.ts), on a database and in a service process of its own:
    // named in --only, or by default (not in the prepared statements experiment).
    if (options.only.length === 0 ? !options.preparedStatements : options.only.some(isListenersKey)) {
      const polls = await runListenerPollBench({
        listeners: options.listeners,
        patches: options.patches,
        logLevel: options.logLevel,
        serverUrl: database.url,
        say,
        defer: (step) => void cleanups.push(step),
      });
      await reportGroup(
        listenerPollTerminalReport(polls),
        'bench-results-listeners',
        () => listenerPollMarkdownReport(polls, runInfo),
        'listener',
      );
    }

    // The traffic split group (bench/split-edge.ts): named in --only, or by default (not in the prepared
    // statements experiment).
    if (options.only.length === 0 ? !options.preparedStatements : options.only.some(isSplitKey)) {
      const split = await runSplitEdgeBench({ options, load, say, defer: (step) => void cleanups.push(step) });
      await reportGroup(
        splitEdgeTerminalReport(split),
        'bench-results-split',
        () => splitEdgeMarkdownReport(split, runInfo),
        'traffic split',
      );
    }

    // The app start group (bench/app-start.ts): named in --only, or by default (not in the prepared
    // statements experiment).
    if (options.only.length === 0 ? !options.preparedStatements : options.only.some(isAppStartKey)) {
      const appStart = await runAppStartBench({ databaseUrl: database.url, rounds: APP_START_ROUNDS, say });
      await reportGroup(
        appStartTerminalReport(appStart),
        'bench-results-appstart',
        () => appStartMarkdownReport(appStart, runInfo),
        'app start',
      );
    }

    // The test start group (bench/test-start.ts): named in --only, or by default (not in the prepared
    // statements experiment).
    if (options.only.length === 0 ? !options.preparedStatements : options.only.some(isTestStartKey)) {
      const testStart = await runTestStartBench({ rounds: TEST_START_ROUNDS, say });
      await reportGroup(
        testStartTerminalReport(testStart),
        'bench-results-teststart',
        () => testStartMarkdownReport(testStart, runInfo),
        'test start',
      );
    }

    // The LangGraph state group (bench/langgraph-state.ts): named in --only, or by default (not in the
    // prepared statements experiment). It installs from the npm registry; without one it is skipped.
    if (options.only.length === 0 ? !options.preparedStatements : options.only.some(isLangGraphKey)) {
      const langgraph = await runLangGraphBench({
        serverUrl: database.url,
        durationSeconds: options.durationSeconds,
        say,
        defer: (step) => void cleanups.push(step),
      }).catch((error: unknown) => {
        say(`langgraph: skipped (${error instanceof Error ? error.message.split('\n')[0] : String(error)})`);
        return null;
      });
      if (langgraph !== null) {
        await reportGroup(
          langGraphTerminalReport(langgraph),
          'bench-results-langgraph',
          () => langGraphMarkdownReport(langgraph, runInfo),
          'LangGraph',
        );
      }
    }

    // The API scenarios: all of them by default, or those named in --only.
    if (
      options.only.length === 0 ||
      options.only.some(
        (o) =>
          !isDataPlaneKey(o) &&
          !isListenersKey(o) &&
          !isLangGraphKey(o) &&
          !isSplitKey(o) &&
          !isAppStartKey(o) &&
          !isTestStartKey(o),
      )
    ) {
      if (options.preparedStatements)
        say('EXPERIMENT: the service and the SQL baseline send named prepared statements (not production behaviour)');
      const service = await startService(database.url, options.logLevel, options.preparedStatements);
      cleanups.push(() => service.close());
      const fixture = await seed(service.db, service.pool, service.secretBox, options.sizes, (line) =>
        say(`  ${line}`),
      );
      const seeded = `${fixture.totals.workspaces} workspaces holding ${fixture.totals.deployments.toLocaleString('en-US')} deployments, ${fixture.totals.revisions.toLocaleString('en-US')} revisions and ${fixture.totals.events.toLocaleString('en-US')} events`;
      say(`seeded: ${seeded} (${((Date.now() - started) / 1000).toFixed(0)} s so far)`);
      const bare = await startBareServer();
      cleanups.push(() => bare.close());
      const ctx: Context = { options, service, bare, load, databaseUrl: database.url };

      const chosen = (s: Scenario) =>
        options.only.length === 0 || options.only.some((o) => s.key === o || s.key.startsWith(`${o}-`));
      const plan = fixture.measured.map((ws) => ({ ws, scenarios: scenariosFor(ws).filter(chosen) }));
      const runs = plan.reduce((n, p) => n + p.scenarios.length * 3, 0);
      say(
        `measuring: ${runs} runs of ${options.warmupSeconds} s warm-up + ${options.durationSeconds} s, ${options.connections} connections (about ${Math.ceil((runs * (options.warmupSeconds + options.durationSeconds + 0.5)) / 60)} min)`,
      );
      const first = plan[0];
      if (first !== undefined && first.scenarios[0] !== undefined) await warmUp(ctx, first.ws, first.scenarios[0]);
      const results: ScenarioResult[] = [];
      for (const { ws, scenarios } of plan) {
        for (const s of scenarios) {
          const result = await measure(ctx, ws, s);
          results.push(result);
          say(progressLine(result));
        }
      }
      // Rows grouped by scenario, small size first, for reading the growth with size.
      const order = plan[0]?.scenarios.map((s) => s.key) ?? [];
      results.sort((a, b) => order.indexOf(a.key) - order.indexOf(b.key) || a.size - b.size);
      say('');
      say(terminalReport(results));
      if (options.writeDocs) {
        const section = markdownReport(results, {
          ...runInfo,
          sizes: options.sizes,
          connections: options.connections,
          warmupSeconds: options.warmupSeconds,
          durationSeconds: options.durationSeconds,
          logLevel: options.logLevel,
          preparedStatements: options.preparedStatements,
          seeded,
          elapsedSeconds: (Date.now() - started) / 1000,
        });
        await writeResultsSection(
          DOCS_FILE,
          options.preparedStatements ? 'bench-results-prepared' : 'bench-results',
          section,
        );
        say(`\nwrote the results into ${path.relative(process.cwd(), DOCS_FILE)}`);
      }
    }
    say(`\ndone in ${((Date.now() - started) / 1000).toFixed(0)} s`);
    return 0;
  } finally {
    await cleanup();
  }
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`bench failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exit(1);
  },
);
