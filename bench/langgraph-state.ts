/**
 * The LangGraph state part of `npm run bench` (`--only langgraph`; method and results:
 * docs/performance.md, "LangGraph state in PostgreSQL"). What keeping a LangGraph deployment's state in
 * its PostgreSQL database costs, against LangChain's in-memory server in the same run:
 *
 * 1. Setup: a trivial graph (one node that echoes its input) in a project installed from the npm
 *    registry with the packages a deployment gets (runtime/langgraph-server.mjs's pinned server and
 *    PostgreSQL checkpointer), and a fresh database on the bench's server.
 * 2. Two servers started by the launcher as the data plane starts it (outside the sandbox: this
 *    measures the state layer, not isolation): one without DATABASE_URL (in memory), one with it.
 * 3. Per round, each mode in turn: runs per second, `CONCURRENCY` clients each waiting for runs on a
 *    thread of its own (`POST /threads/{id}/runs/wait`: a queued run, checkpoints, the result); then the
 *    first stream event, `STREAMS` streamed runs one after another (`POST /threads/{id}/runs/stream`):
 *    time to the first event (`metadata`) and to the graph's first `values`.
 * 4. An MCP tool call's overhead (runtime/langgraph/mcp.mjs): on the PostgreSQL server, `CALLS` calls one
 *    after another of the graph's tool through `@modelcontextprotocol/sdk`'s Client (Streamable HTTP, one
 *    session), against as many stateless runs of the same graph through `POST /runs/wait` (each on a new
 *    thread, as a tool call is), in turn.
 * 5. What an instance's start costs (`startCost`): with both servers stopped, `START_ROUNDS` rounds of
 *    two starts of the PostgreSQL server, the cases in turn (the order alternating), and a last round in
 *    which an MCP client lists the tools as soon as /ok answers: (a) without
 *    `.slipway/langgraph-schemas.json`, so that the instance reads its graphs' schemas itself (the
 *    TypeScript reader, which the PostgreSQL layer warms when the MCP and A2A packages are installed, as
 *    they are here), as every instance did before the build's schemas step; (b) with the file that step
 *    writes (run once, as the build runs it). Per start: the CPU time of the launcher's whole process
 *    tree from the spawn until /ok answers and until the end of an idle window after it (`IDLE_SECONDS`,
 *    longer while the tree is still busy), the time to /ok; in the last round, to the first `tools/list`
 *    answer. That round is apart because the request changes what it measures: LangChain's schema cache
 *    (`getCachedStaticGraphSchema`) keeps results, not reads under way, so a request for a schema while
 *    the warm reads it starts a second read beside it.
 *
 * Clients are `@langchain/langgraph-sdk`, as users' are. Everything is bounded: the install, the start
 * (120 s), each run's duration; the servers and the database are removed at the end.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { execFile } from 'node:child_process';
import { Client } from '@langchain/langgraph-sdk';
import { Client as McpClient } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { databaseUrl, withClient } from '../src/db/admin-client.ts';
import { freePort } from '../src/db/embedded-postgres.ts';
import {
  A2A_SDK_PACKAGE,
  A2A_SDK_VERSION,
  LANGGRAPH_JS_SERVER_VERSION,
  LANGGRAPH_POSTGRES_VERSION,
  MCP_SDK_PACKAGE,
  MCP_SDK_VERSION,
} from '../src/domain/langgraph-config.ts';

const run = promisify(execFile);
const BENCH_DIR = path.dirname(fileURLToPath(import.meta.url));
const EXAMPLE = path.resolve(BENCH_DIR, '../examples/langgraph-js');
const LAUNCHER = path.resolve(BENCH_DIR, '../runtime/langgraph-server.mjs');
/** Clients waiting for runs at once in the throughput phase. */
const CONCURRENCY = 8;
/** Streamed runs per mode and round in the latency phase. */
const STREAMS = 30;
const ROUNDS = 2;
/** Sequential calls per protocol and round in the MCP phase. */
const CALLS = 40;
/** Rounds of the instance start phase: each one start without the build's schemas file and one with it. */
const START_ROUNDS = 2;
/**
 * How long an instance is left after it answers /ok before its CPU time is read: longer than the former
 * warm took (about ten CPU-seconds, so more than ten seconds of a core), so that it falls inside.
 */
const IDLE_SECONDS = 15;
/** The window goes on (up to `BUSY_LIMIT_SECONDS` more) while the tree used more than this share of a core in the last second. */
const BUSY_SHARE = 0.2;
const BUSY_LIMIT_SECONDS = 60;

export const isLangGraphKey = (key: string) => key === 'langgraph';

const GRAPH = `import { Annotation, StateGraph, START, END } from '@langchain/langgraph';
const State = Annotation.Root({ text: Annotation<string>(), reply: Annotation<string>() });
export const graph = new StateGraph(State)
  .addNode('echo', (state: typeof State.State) => ({ reply: state.text }))
  .addEdge(START, 'echo')
  .addEdge('echo', END)
  .compile();
`;

export interface Summary {
  count: number;
  p50: number;
  p99: number;
}

export interface ModeResult {
  mode: 'memory' | 'postgres';
  runsPerSecond: number;
  waitLatency: Summary;
  firstEvent: Summary;
  firstValues: Summary;
}

/** An MCP tool call against a stateless run through /runs/wait, of the same graph on the same server. */
export interface McpResult {
  calls: number;
  runsWait: Summary;
  toolCall: Summary;
}

/** One instance start (`startCost`). */
export interface StartSample {
  /** CPU-seconds of the process tree from the spawn until /ok answered. */
  cpuToOk: number;
  /** CPU-seconds of the process tree from the spawn until the end of the idle window. */
  cpu: number;
  /** Seconds from the spawn until /ok answered. */
  okSeconds: number;
  /** Seconds from the spawn until the first MCP `tools/list` answer; null when none was asked for or it failed. */
  toolsListSeconds: number | null;
  /** Whether that answer had the graph's own input schema (rather than "any object": not known yet). */
  toolSchemaKnown: boolean;
  /** Seconds of the window after /ok (`IDLE_SECONDS`, or more while the tree was busy). */
  windowSeconds: number;
}

/** The instance start phase: per case, its starts; the ratio is of the mean CPU per start, with / without. */
export interface StartResult {
  rounds: number;
  idleSeconds: number;
  /** Without .slipway/langgraph-schemas.json: the instance reads its graphs' schemas itself. */
  without: StartSample[];
  /** With the file the build's schemas step wrote. */
  withFile: StartSample[];
  /** The last round's starts, with an MCP client listing the tools as soon as /ok answers. */
  listed: { without: StartSample; withFile: StartSample };
  /** CPU-seconds of the build's schemas step (`schemas <config>`, run once), and its output line. */
  schemasStepCpu: number;
  schemasStepOutput: string;
}

export interface LangGraphBenchResult {
  /** The MCP phase, or why it did not run. */
  mcp: McpResult | string;
  /** The instance start phase, or why it did not run. */
  start: StartResult | string;
  concurrency: number;
  secondsPerMode: number;
  streams: number;
  rounds: number;
  modes: ModeResult[];
}

function summary(samples: number[]): Summary {
  const sorted = [...samples].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? 0;
  return { count: sorted.length, p50: at(0.5), p99: at(0.99) };
}

interface Server {
  mode: 'memory' | 'postgres';
  base: string;
  client: Client;
  child: ChildProcess;
}

async function startServer(dir: string, mode: Server['mode'], url: string | null): Promise<Server> {
  const port = await freePort();
  const child = spawn(process.execPath, ['.slipway/langgraph-server.mjs', 'js', 'langgraph.json'], {
    cwd: dir,
    stdio: ['ignore', 'ignore', 'pipe'],
    env: {
      PATH: process.env.PATH ?? '',
      HOME: dir,
      PORT: String(port),
      HOST: '127.0.0.1',
      ...(url ? { DATABASE_URL: url } : {}),
    },
  });
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => (stderr = (stderr + chunk.toString()).slice(-2_000)));
  const base = `http://127.0.0.1:${port}`;
  const until = Date.now() + 120_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`the ${mode} server exited with ${child.exitCode}: ${stderr.trim()}`);
    const ok = await fetch(`${base}/ok`)
      .then((r) => r.ok)
      .catch(() => false);
    if (ok) break;
    if (Date.now() > until) throw new Error(`the ${mode} server did not answer /ok within 120 s`);
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  return { mode, base, child, client: new Client({ apiUrl: base, callerOptions: { maxRetries: 0 } }) };
}

async function throughput(server: Server, seconds: number): Promise<{ runs: number; latencies: number[] }> {
  const until = Date.now() + seconds * 1000;
  const latencies: number[] = [];
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      const thread = await server.client.threads.create();
      while (Date.now() < until) {
        const started = performance.now();
        await server.client.runs.wait(thread.thread_id, 'echo', { input: { text: 'hello' } });
        latencies.push(performance.now() - started);
      }
    }),
  );
  return { runs: latencies.length, latencies };
}

async function streamLatency(server: Server): Promise<{ first: number[]; values: number[] }> {
  const thread = await server.client.threads.create();
  const first: number[] = [];
  const values: number[] = [];
  for (let i = 0; i < STREAMS; i += 1) {
    const started = performance.now();
    let sawFirst = false;
    let sawValues = false;
    for await (const chunk of server.client.runs.stream(thread.thread_id, 'echo', {
      input: { text: `hello ${i}` },
      streamMode: ['values'],
    })) {
      if (!sawFirst) {
        first.push(performance.now() - started);
        sawFirst = true;
      }
      if (!sawValues && chunk.event === 'values') {
        values.push(performance.now() - started);
        sawValues = true;
      }
    }
  }
  return { first, values };
}

/** `CALLS` tool calls and as many stateless runs, one after another each; their latencies. */
async function mcpRound(server: Server, mcp: McpClient): Promise<{ waits: number[]; calls: number[] }> {
  const waits: number[] = [];
  const calls: number[] = [];
  for (let i = 0; i < CALLS; i += 1) {
    let started = performance.now();
    await server.client.runs.wait(null, 'echo', { input: { text: `hello ${i}` } });
    waits.push(performance.now() - started);
    started = performance.now();
    const result = await mcp.callTool({ name: 'echo', arguments: { text: `hello ${i}` } });
    if (result.isError) throw new Error(`the MCP tool call failed: ${JSON.stringify(result.content)}`);
    calls.push(performance.now() - started);
  }
  return { waits, calls };
}

/** The MCP phase on the PostgreSQL server (the one that serves /mcp): see the module comment. */
async function mcpOverhead(server: Server): Promise<McpResult | string> {
  const mcp = new McpClient({ name: 'slipway-bench', version: '1' });
  try {
    await mcp.connect(new StreamableHTTPClientTransport(new URL(`${server.base}/mcp`)));
  } catch (error) {
    return `the server offers no MCP (${error instanceof Error ? error.message : String(error)})`;
  }
  try {
    const tools = await mcp.listTools();
    if (!tools.tools.some((tool) => tool.name === 'echo')) return 'the server lists no tool named echo';
    await mcpRound(server, mcp); // unmeasured: the first calls compile the code paths
    const waits: number[] = [];
    const calls: number[] = [];
    for (let round = 0; round < ROUNDS; round += 1) {
      const measured = await mcpRound(server, mcp);
      waits.push(...measured.waits);
      calls.push(...measured.calls);
    }
    return { calls: calls.length, runsWait: summary(waits), toolCall: summary(calls) };
  } finally {
    await mcp.close().catch(() => undefined);
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Clock ticks of a process (/proc/<pid>/stat): its parent, and utime + stime + cutime + cstime. */
async function processTicks(pid: string): Promise<{ ppid: string; ticks: number } | null> {
  const stat = await fs.readFile(`/proc/${pid}/stat`, 'utf8').catch(() => null);
  if (stat === null) return null;
  // After the command name, which is in parentheses and may hold spaces: state, ppid, ... utime (14th
  // field of the line), stime, cutime, cstime.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticks = [11, 12, 13, 14].reduce((sum, i) => sum + Number(fields[i] ?? 0), 0);
  return { ppid: fields[1] ?? '', ticks };
}

/**
 * The CPU time of a process tree in clock ticks: the launcher (`root`) and its descendants, found by
 * their parent ids in /proc. For each process still alive, its own user and system time (utime and stime
 * count all its threads, so the worker thread the schema reader runs in too) and that of its children
 * that have ended and been waited for (cutime and cstime, which include their own waited-for children in
 * turn). So each process is counted once: a live child's time is never in its parent's cutime, and an
 * ended one's only in its parent's. What it misses is a descendant that ended without being waited for,
 * or was orphaned out of the tree; Node waits for the children it spawns (the launcher, tsx's CLI), and
 * the tree is read before the instance is stopped, so only the shutdown is left out, in both cases alike.
 * (The launcher's own reaped time, in the bench's cutime once it ends, would include the shutdown and
 * needs every level to have exited cleanly: reading the live tree does not.)
 */
async function treeTicks(root: number): Promise<number> {
  const pids = (await fs.readdir('/proc')).filter((name) => /^\d+$/.test(name));
  const stats = new Map<string, { ppid: string; ticks: number }>();
  await Promise.all(
    pids.map(async (pid) => {
      const stat = await processTicks(pid);
      if (stat) stats.set(pid, stat);
    }),
  );
  const children = new Map<string, string[]>();
  for (const [pid, { ppid }] of stats) children.set(ppid, [...(children.get(ppid) ?? []), pid]);
  let total = 0;
  const queue = [String(root)];
  for (let pid = queue.shift(); pid !== undefined; pid = queue.shift()) {
    total += stats.get(pid)?.ticks ?? 0;
    queue.push(...(children.get(pid) ?? []));
  }
  return total;
}

/** The CPU time of the bench's own ended children (cutime + cstime), in clock ticks. */
async function reapedTicks(): Promise<number> {
  const stat = await fs.readFile('/proc/self/stat', 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return Number(fields[13]) + Number(fields[14]);
}

/** Signals the group of a process the bench started detached, and waits (10 s, then SIGKILL) for it to end. */
async function stopGroup(child: ChildProcess): Promise<void> {
  const ended = new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve(undefined);
    else child.once('exit', resolve);
  });
  const signal = (name: NodeJS.Signals) => {
    try {
      process.kill(-child.pid!, name);
    } catch {
      // Already gone.
    }
  };
  signal('SIGTERM');
  if ((await Promise.race([ended.then(() => true), sleep(10_000).then(() => false)])) === false) signal('SIGKILL');
  await ended;
}

/** Stops one of the phases' servers (SIGTERM, which the launcher passes on; SIGKILL after 10 s) and waits for it. */
async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const ended = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  if ((await Promise.race([ended.then(() => true), sleep(10_000).then(() => false)])) === false) child.kill('SIGKILL');
  await ended;
}

/**
 * One start of the PostgreSQL server, detached (a process group of its own, which the data plane also
 * signals as a whole): see the module comment, step 5. `live` holds it while it runs, for the bench's
 * cleanup.
 */
async function startOnce(
  dir: string,
  url: string,
  hz: number,
  live: Set<ChildProcess>,
  listTools: boolean,
): Promise<StartSample> {
  const port = await freePort();
  const spawned = performance.now();
  const seconds = () => (performance.now() - spawned) / 1000;
  const child = spawn(process.execPath, ['.slipway/langgraph-server.mjs', 'js', 'langgraph.json'], {
    cwd: dir,
    stdio: ['ignore', 'ignore', 'pipe'],
    detached: true,
    env: { PATH: process.env.PATH ?? '', HOME: dir, PORT: String(port), HOST: '127.0.0.1', DATABASE_URL: url },
  });
  live.add(child);
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => (stderr = (stderr + chunk.toString()).slice(-2_000)));
  const base = `http://127.0.0.1:${port}`;
  try {
    const until = Date.now() + 120_000;
    for (;;) {
      if (child.exitCode !== null) throw new Error(`the server exited with ${child.exitCode}: ${stderr.trim()}`);
      const ok = await fetch(`${base}/ok`)
        .then((r) => r.ok)
        .catch(() => false);
      if (ok) break;
      if (Date.now() > until) throw new Error('the server did not answer /ok within 120 s');
      await sleep(100);
    }
    const okSeconds = seconds();
    const cpuToOk = (await treeTicks(child.pid!)) / hz;
    // A client that lists the tools as soon as the server is up, beside the window: before the build's
    // file, its answer waited for the schema (at most 10 s, runtime/langgraph/protocols.mjs, then "any object").
    const listed = (async () => {
      if (!listTools) return null;
      const mcp = new McpClient({ name: 'slipway-bench', version: '1' });
      try {
        await mcp.connect(new StreamableHTTPClientTransport(new URL(`${base}/mcp`)));
        const tools = await mcp.listTools();
        const properties = tools.tools.find((tool) => tool.name === 'echo')?.inputSchema.properties;
        return { at: seconds(), known: Boolean(properties && Object.hasOwn(properties, 'text')) };
      } catch {
        return null;
      } finally {
        await mcp.close().catch(() => undefined);
      }
    })();
    // The window: IDLE_SECONDS after /ok, and on by the second while the tree is still busy.
    await sleep((IDLE_SECONDS - 1) * 1000);
    let ticks = await treeTicks(child.pid!);
    const busyUntil = Date.now() + BUSY_LIMIT_SECONDS * 1000;
    for (;;) {
      await sleep(1000);
      const now = await treeTicks(child.pid!);
      const busy = (now - ticks) / hz > BUSY_SHARE;
      ticks = now;
      if (!busy || Date.now() > busyUntil) break;
    }
    const toolsList = await listed;
    const cpu = (await treeTicks(child.pid!)) / hz;
    return {
      cpuToOk,
      cpu,
      okSeconds,
      toolsListSeconds: toolsList?.at ?? null,
      toolSchemaKnown: toolsList?.known ?? false,
      windowSeconds: seconds() - okSeconds,
    };
  } finally {
    await stopGroup(child);
    live.delete(child);
  }
}

/** The instance start phase (module comment, step 5), on the PostgreSQL database of the other phases. */
async function startCost(
  dir: string,
  url: string,
  say: (line: string) => void,
  defer: (step: () => Promise<void>) => void,
): Promise<StartResult | string> {
  const hz = Number((await run('getconf', ['CLK_TCK'])).stdout.trim()) || 100;
  const live = new Set<ChildProcess>();
  defer(async () => {
    for (const child of live) await stopGroup(child);
  });
  // The build's step, once, as the build runs it after the install; its CPU is that of the bench's
  // children reaped meanwhile (nothing else of the bench ends during it).
  const file = path.join(dir, '.slipway', 'langgraph-schemas.json');
  const before = await reapedTicks();
  const step = await run(process.execPath, ['.slipway/langgraph-server.mjs', 'schemas', 'langgraph.json'], {
    cwd: dir,
    timeout: 300_000,
  });
  const schemasStepCpu = ((await reapedTicks()) - before) / hz;
  const schemasStepOutput = step.stdout.trim().split('\n').at(-1) ?? '';
  const built = await fs.readFile(file, 'utf8').catch(() => null);
  if (built === null || !(JSON.parse(built) as { graphs?: Record<string, unknown> }).graphs?.echo)
    return `the schemas step did not read the graph's schema (${schemasStepOutput})`;
  say(`  the build's schemas step: ${schemasStepCpu.toFixed(2)} CPU-s (${schemasStepOutput})`);
  const without: StartSample[] = [];
  const withFile: StartSample[] = [];
  const listed: Partial<StartResult['listed']> = {};
  for (let round = 0; round <= START_ROUNDS; round += 1) {
    // Alternating order, as in the other phases; the last round with a client listing the tools.
    const listTools = round === START_ROUNDS;
    const cases = round % 2 === 0 ? (['without', 'with'] as const) : (['with', 'without'] as const);
    for (const name of cases) {
      if (name === 'with') await fs.writeFile(file, built);
      else await fs.rm(file, { force: true });
      const sample = await startOnce(dir, url, hz, live, listTools);
      if (listTools) listed[name === 'with' ? 'withFile' : 'without'] = sample;
      else (name === 'with' ? withFile : without).push(sample);
      say(
        `  ${listTools ? 'listing tools' : `round ${round + 1}`} ${name === 'with' ? "with the build's schemas" : 'without them'}: ${startLine(sample)}`,
      );
    }
  }
  await fs.rm(file, { force: true });
  return {
    rounds: START_ROUNDS,
    idleSeconds: IDLE_SECONDS,
    without,
    withFile,
    listed: listed as StartResult['listed'],
    schemasStepCpu,
    schemasStepOutput,
  };
}

export async function runLangGraphBench(options: {
  serverUrl: string;
  durationSeconds: number;
  say: (line: string) => void;
  defer: (step: () => Promise<void>) => void;
}): Promise<LangGraphBenchResult> {
  const { say, defer } = options;
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-bench-langgraph-'));
  defer(() => fs.rm(dir, { recursive: true, force: true }));
  for (const file of ['package.json', 'package-lock.json'])
    await fs.copyFile(path.join(EXAMPLE, file), path.join(dir, file));
  await fs.writeFile(path.join(dir, 'echo.ts'), GRAPH);
  await fs.writeFile(
    path.join(dir, 'langgraph.json'),
    JSON.stringify({ node_version: '20', graphs: { echo: './echo.ts:graph' } }),
  );
  // The launcher and the modules it imports, as the data plane writes them (src/dataplane/app-config-file.ts).
  await fs.mkdir(path.join(dir, '.slipway'));
  await fs.copyFile(LAUNCHER, path.join(dir, '.slipway', 'langgraph-server.mjs'));
  await fs.cp(path.join(path.dirname(LAUNCHER), 'langgraph'), path.join(dir, '.slipway', 'langgraph'), {
    recursive: true,
  });
  say('langgraph: installing the project and the pinned server from the npm registry');
  const npm = { cwd: dir, timeout: 300_000, env: { ...process.env, npm_config_fund: 'false' } };
  await run('npm', ['ci', '--no-audit'], npm);
  await run(
    'npm',
    [
      'install',
      '--no-save',
      '--no-audit',
      `@langchain/langgraph-api@${LANGGRAPH_JS_SERVER_VERSION}`,
      `@langchain/langgraph-checkpoint-postgres@${LANGGRAPH_POSTGRES_VERSION}`,
      // What a deployment gets for /mcp and /a2a (src/domain/langgraph-config.ts).
      `${MCP_SDK_PACKAGE}@${MCP_SDK_VERSION}`,
      `${A2A_SDK_PACKAGE}@${A2A_SDK_VERSION}`,
    ],
    npm,
  );

  const name = `slw_bench_langgraph_${randomBytes(4).toString('hex')}`;
  await withClient(options.serverUrl, (client) => client.query(`create database ${name}`));
  defer(() =>
    withClient(options.serverUrl, (client) => client.query(`drop database if exists ${name} with (force)`)).then(
      () => undefined,
    ),
  );
  const servers = [
    await startServer(dir, 'memory', null),
    await startServer(dir, 'postgres', databaseUrl(options.serverUrl, name)),
  ];
  for (const server of servers)
    defer(async () => {
      server.child.kill('SIGTERM');
    });

  // Unmeasured: the first runs compile the code paths and make the tables' first pages.
  for (const server of servers) {
    await throughput(server, 1);
    await streamLatency(server);
  }
  const secondsPerRound = Math.max(1, options.durationSeconds / ROUNDS);
  const collected = new Map(
    servers.map((s) => [
      s.mode,
      { runs: 0, seconds: 0, waits: [] as number[], first: [] as number[], values: [] as number[] },
    ]),
  );
  for (let round = 0; round < ROUNDS; round += 1) {
    // Alternating order, so neither mode always runs on a warmer machine.
    const order = round % 2 === 0 ? servers : [...servers].reverse();
    for (const server of order) {
      const into = collected.get(server.mode)!;
      const measured = await throughput(server, secondsPerRound);
      into.runs += measured.runs;
      into.seconds += secondsPerRound;
      into.waits.push(...measured.latencies);
      const streamed = await streamLatency(server);
      into.first.push(...streamed.first);
      into.values.push(...streamed.values);
      say(`  round ${round + 1} ${server.mode}: ${(measured.runs / secondsPerRound).toFixed(1)} runs/s`);
    }
  }
  say('  MCP: tool calls against runs through /runs/wait');
  const mcp = await mcpOverhead(servers.find((server) => server.mode === 'postgres')!);
  // The start phase runs alone: both servers are stopped first (their CPU is not counted, but it would
  // slow the starts).
  await Promise.all(servers.map((server) => stopChild(server.child)));
  say(`  instance start: CPU per start, without and with the build's schemas file, ${START_ROUNDS} rounds`);
  const start = await startCost(dir, databaseUrl(options.serverUrl, name), say, defer).catch(
    (error: unknown) => `${error instanceof Error ? error.message.split('\n')[0] : String(error)}`,
  );
  return {
    mcp,
    start,
    concurrency: CONCURRENCY,
    secondsPerMode: secondsPerRound * ROUNDS,
    streams: STREAMS * ROUNDS,
    rounds: ROUNDS,
    modes: servers.map((server) => {
      const into = collected.get(server.mode)!;
      return {
        mode: server.mode,
        runsPerSecond: into.runs / into.seconds,
        waitLatency: summary(into.waits),
        firstEvent: summary(into.first),
        firstValues: summary(into.values),
      };
    }),
  };
}

const ms = (value: number) => `${value.toFixed(1)} ms`;

export function langGraphTerminalReport(result: LangGraphBenchResult): string {
  const lines = [
    `LangGraph state: a one-node graph, ${result.concurrency} clients waiting for runs for ${result.secondsPerMode} s per mode; ${result.streams} streamed runs per mode`,
    'mode      runs/s   wait p50   wait p99   first event p50/p99   first values p50/p99',
  ];
  for (const m of result.modes)
    lines.push(
      `${m.mode.padEnd(9)} ${m.runsPerSecond.toFixed(1).padStart(6)}   ${ms(m.waitLatency.p50).padStart(8)}   ${ms(m.waitLatency.p99).padStart(8)}   ${`${ms(m.firstEvent.p50)} / ${ms(m.firstEvent.p99)}`.padStart(19)}   ${`${ms(m.firstValues.p50)} / ${ms(m.firstValues.p99)}`.padStart(20)}`,
    );
  lines.push(mcpLine(result.mcp));
  lines.push(...startReport(result.start, false));
  return lines.join('\n');
}

const mean = (values: number[]) => values.reduce((sum, value) => sum + value, 0) / Math.max(1, values.length);
const cpuSeconds = (value: number) => `${value.toFixed(2)} CPU-s`;

/** One start, for the progress lines. */
function startLine(sample: StartSample): string {
  const listed =
    sample.toolsListSeconds === null
      ? ''
      : `, tools/list at ${sample.toolsListSeconds.toFixed(1)} s${sample.toolSchemaKnown ? '' : ' (schema not known yet)'}`;
  return `${cpuSeconds(sample.cpu)} (${cpuSeconds(sample.cpuToOk)} to /ok at ${sample.okSeconds.toFixed(1)} s, window ${sample.windowSeconds.toFixed(1)} s)${listed}`;
}

/** A case's means: CPU per start, CPU to /ok, /ok, first tools/list, window; and how many starts had the schema. */
function startMeans(samples: StartSample[]) {
  const listed = samples.flatMap((sample) => (sample.toolsListSeconds === null ? [] : [sample.toolsListSeconds]));
  return {
    cpu: mean(samples.map((sample) => sample.cpu)),
    cpuToOk: mean(samples.map((sample) => sample.cpuToOk)),
    ok: mean(samples.map((sample) => sample.okSeconds)),
    toolsList: listed.length > 0 ? `${mean(listed).toFixed(1)} s` : '-',
    window: mean(samples.map((sample) => sample.windowSeconds)),
    known: listed.length > 0 ? `${samples.filter((sample) => sample.toolSchemaKnown).length}/${listed.length}` : '-',
  };
}

/** The start phase's rows (terminal or markdown) and its ratio sentence. */
function startReport(start: StartResult | string, markdown: boolean): string[] {
  if (typeof start === 'string') return [`Instance start: not measured: ${start}`];
  const cases = [
    ['without the schemas file (read by the instance)', startMeans(start.without)],
    ["with the build's schemas file", startMeans(start.withFile)],
    ['without, a client listing the tools at /ok', startMeans([start.listed.without])],
    ['with, a client listing the tools at /ok', startMeans([start.listed.withFile])],
  ] as const;
  const ratio = (a: number, b: number) => `${(cases[a]![1].cpu / cases[b]![1].cpu).toFixed(2)}x`;
  const sentence =
    `Instance start: ${cpuSeconds(cases[1][1].cpu)} per start with the build's schemas file against ${cpuSeconds(cases[0][1].cpu)} without: ` +
    `${ratio(1, 0)} (${(cases[0][1].cpu - cases[1][1].cpu).toFixed(2)} CPU-s less per start); ` +
    `with a client listing the tools at once, ${ratio(3, 2)}; the build's schemas step, once: ${cpuSeconds(start.schemasStepCpu)}.`;
  if (markdown)
    return [
      '| instance start | CPU per start | CPU to /ok | /ok after | first tools/list after | with the graph schema | window after /ok |',
      '|---|---|---|---|---|---|---|',
      ...cases.map(
        ([label, m]) =>
          `| ${label} | ${cpuSeconds(m.cpu)} | ${cpuSeconds(m.cpuToOk)} | ${m.ok.toFixed(1)} s | ${m.toolsList} | ${m.known} | ${m.window.toFixed(1)} s |`,
      ),
      '',
      sentence,
    ];
  return [
    `instance start (means; ${start.rounds} starts, 1 listing) CPU/start   CPU to /ok   /ok after   tools/list after   schema   window`,
    ...cases.map(
      ([label, m]) =>
        `${label.padEnd(48)} ${m.cpu.toFixed(2).padStart(9)}   ${m.cpuToOk.toFixed(2).padStart(10)}   ${`${m.ok.toFixed(1)} s`.padStart(9)}   ${m.toolsList.padStart(16)}   ${m.known.padStart(6)}   ${`${m.window.toFixed(1)} s`.padStart(6)}`,
    ),
    sentence,
  ];
}

/** The MCP phase in one sentence. */
function mcpLine(mcp: McpResult | string): string {
  if (typeof mcp === 'string') return `MCP: not measured: ${mcp}`;
  return (
    `MCP: ${mcp.calls} tool calls one after another, p50 ${ms(mcp.toolCall.p50)} p99 ${ms(mcp.toolCall.p99)}, ` +
    `against as many stateless runs through /runs/wait, p50 ${ms(mcp.runsWait.p50)} p99 ${ms(mcp.runsWait.p99)}: ` +
    `${(mcp.toolCall.p50 / mcp.runsWait.p50).toFixed(2)}x at p50, ${(mcp.toolCall.p50 - mcp.runsWait.p50).toFixed(1)} ms more`
  );
}

export function langGraphMarkdownReport(
  result: LangGraphBenchResult,
  run: { date: string; machine: string; node: string; database: string },
): string {
  const rows = result.modes.map(
    (m) =>
      `| ${m.mode === 'memory' ? "in memory (LangChain's default)" : 'PostgreSQL (Slipway)'} | ${m.runsPerSecond.toFixed(1)} | ${ms(m.waitLatency.p50)} | ${ms(m.waitLatency.p99)} | ${ms(m.firstEvent.p50)} | ${ms(m.firstEvent.p99)} | ${ms(m.firstValues.p50)} | ${ms(m.firstValues.p99)} |`,
  );
  return [
    `Run ${run.date} on ${run.machine}, Node.js ${run.node}, ${run.database}. A one-node graph; ${result.concurrency} clients each waiting for runs on a thread of its own for ${result.secondsPerMode} s per mode; then ${result.streams} streamed runs per mode, one at a time; ${result.rounds} rounds, the modes alternating.`,
    '',
    '| state | runs/s | wait p50 | wait p99 | first event p50 | first event p99 | first values p50 | first values p99 |',
    '|---|---|---|---|---|---|---|---|',
    ...rows,
    '',
    `${mcpLine(result.mcp)} (the same graph on the PostgreSQL server; ${result.rounds} rounds, the two in turn).`,
    '',
    ...(typeof result.start === 'string'
      ? startReport(result.start, true)
      : [
          `Instance start: the PostgreSQL server started ${result.start.rounds} times without \`.slipway/langgraph-schemas.json\` and ${result.start.rounds} times with the build's, in turn, then once more each with an MCP client listing the tools as soon as /ok answers; CPU of the launcher's process tree from the spawn to /ok and to the end of a window of at least ${result.start.idleSeconds} s after it; means.`,
          '',
          ...startReport(result.start, true),
        ]),
  ].join('\n');
}
