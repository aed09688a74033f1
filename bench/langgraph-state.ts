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

export interface LangGraphBenchResult {
  /** The MCP phase, or why it did not run. */
  mcp: McpResult | string;
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
  return {
    mcp,
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
  return lines.join('\n');
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
  ].join('\n');
}
