/**
 * The launcher's PostgreSQL layer (runtime/langgraph-server.mjs) run as the data plane runs it, without
 * the data plane: a small project installed from the npm registry with the packages a deployment gets,
 * servers started by the launcher on a database of the test server, judged by `@langchain/langgraph-sdk`:
 *
 * - an instance that is stopped (SIGTERM, as a redeploy or a scale-down stops it) gives its unfinished
 *   run back at once, its partial checkpoints rolled back, and the next instance finishes it;
 * - langgraph.json's `checkpointer.ttl` and `store.ttl` delete idle threads (with their checkpoints)
 *   and expired store items;
 * - interrupts, state updates, resuming and if_not_exists work across two instances;
 * - a cron's bad time zone is refused; a graph that fails to load ends the process; without
 *   DATABASE_URL the in-memory server is used.
 *
 * The install takes a minute or so.
 */
import assert from 'node:assert/strict';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { Client } from '@langchain/langgraph-sdk';
import pg from 'pg';
import { freePort } from '../../src/db/embedded-postgres.ts';
import { LANGGRAPH_JS_SERVER_VERSION, LANGGRAPH_POSTGRES_VERSION } from '../../src/domain/langgraph-config.ts';
import { createTestDatabase, type TestDatabase } from '../helpers.ts';
import { waitFor } from '../dataplane/data-plane-harness.ts';

const run = promisify(execFile);
const HERE = path.dirname(fileURLToPath(import.meta.url));
const EXAMPLE = path.resolve(HERE, '../../examples/langgraph-js');
const LAUNCHER = path.resolve(HERE, '../../runtime/langgraph-server.mjs');

let project: string;
let database: TestDatabase;
const started: ChildProcess[] = [];

before(async () => {
  project = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-launcher-pg-'));
  await fs.cp(EXAMPLE, project, { recursive: true, filter: (from) => !from.includes('node_modules') });
  const ttl = { strategy: 'delete', default_ttl: 0.05, sweep_interval_minutes: 0.02 };
  await fs.writeFile(
    path.join(project, 'ttl.json'),
    JSON.stringify({
      node_version: '20',
      graphs: { agent: './src/agent.ts:graph' },
      checkpointer: { ttl },
      store: { ttl },
    }),
  );
  await fs.writeFile(
    path.join(project, 'broken.json'),
    JSON.stringify({ node_version: '20', graphs: { agent: './src/broken.ts:graph' } }),
  );
  await fs.writeFile(path.join(project, 'src', 'broken.ts'), "throw new Error('the graph cannot load');\n");
  await fs.mkdir(path.join(project, '.slipway'));
  await fs.copyFile(LAUNCHER, path.join(project, '.slipway', 'langgraph-server.mjs'));
  const npm = { cwd: project, timeout: 300_000 };
  await run('npm', ['ci', '--no-audit', '--no-fund'], npm);
  await run(
    'npm',
    [
      'install',
      '--no-save',
      '--no-audit',
      '--no-fund',
      `@langchain/langgraph-api@${LANGGRAPH_JS_SERVER_VERSION}`,
      `@langchain/langgraph-checkpoint-postgres@${LANGGRAPH_POSTGRES_VERSION}`,
    ],
    npm,
  );
  database = await createTestDatabase();
});

after(async () => {
  // The whole process group: the launcher's server (tsx and its node) must not outlive a failed test,
  // nor hold the output pipes that keep this file's process alive.
  for (const child of started) {
    try {
      process.kill(-child.pid!, 'SIGKILL');
    } catch {
      // Already gone.
    }
  }
  await database?.drop();
  await fs.rm(project, { recursive: true, force: true });
});

/** The launcher as the start command runs it; resolves once the server answers /ok. */
async function startServer(
  config = 'langgraph.json',
  env: Record<string, string> = { DATABASE_URL: database.url },
): Promise<{ client: Client; child: ChildProcess; output: () => string }> {
  const port = await freePort();
  const child = spawn(process.execPath, ['.slipway/langgraph-server.mjs', 'js', config], {
    cwd: project,
    env: { PATH: process.env.PATH ?? '', HOME: project, PORT: String(port), HOST: '127.0.0.1', ...env },
    detached: true,
  });
  started.push(child);
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  await waitFor(
    'the server to answer /ok',
    async () => {
      if (child.exitCode !== null) throw new Error(`the launcher exited with ${child.exitCode}:\n${output}`);
      return fetch(`http://127.0.0.1:${port}/ok`)
        .then((response) => response.ok)
        .catch(() => false);
    },
    120_000,
  );
  return {
    client: new Client({ apiUrl: `http://127.0.0.1:${port}`, callerOptions: { maxRetries: 0 } }),
    child,
    output: () => output,
  };
}

async function query<T>(sql: string, params: unknown[] = []): Promise<T[]> {
  const client = new pg.Client({ connectionString: database.url });
  await client.connect();
  try {
    return (await client.query(sql, params)).rows as T[];
  } finally {
    await client.end();
  }
}

const exited = (child: ChildProcess) =>
  new Promise<number | null>((resolve) =>
    child.exitCode !== null ? resolve(child.exitCode) : child.once('exit', (code) => resolve(code)),
  );

test('a stopped instance gives its unfinished run back at once, rolled back, and the next one finishes it', async () => {
  const first = await startServer();
  const thread = await first.client.threads.create();
  const background = await first.client.runs.create(thread.thread_id, 'agent', {
    input: { text: 'words sentences shout longest' },
    config: { configurable: { step_delay_ms: 1_000 } },
  });
  await waitFor('the run to write part of its state', async () => {
    const rows = await query(
      `select 1 from langgraph.checkpoints where metadata ->> 'run_id' = $1 and (metadata ->> 'step')::int >= 1`,
      [background.run_id],
    );
    return rows.length > 0;
  });
  first.child.kill('SIGTERM');
  assert.equal(await exited(first.child), 0, first.output());
  const [handedBack] = await query<{ status: string; lease_owner: string | null }>(
    'select status, lease_owner from langgraph.runs where run_id = $1',
    [background.run_id],
  );
  assert.deepEqual(
    handedBack,
    { status: 'pending', lease_owner: null },
    `given back, not left running:\n${first.output().slice(-3000)}`,
  );
  assert.deepEqual(
    await query(`select 1 from langgraph.checkpoints where metadata ->> 'run_id' = $1`, [background.run_id]),
    [],
    'what the stopped execution wrote is rolled back',
  );

  const second = await startServer();
  const values = await second.client.runs.join(thread.thread_id, background.run_id);
  assert.deepEqual((values as { findings: string[] }).findings, [
    '4 words',
    'the longest word is "sentences"',
    '1 sentence(s)',
    'shouted: WORDS SENTENCES SHOUT LONGEST',
  ]);
  const [done] = await query<{ status: string; attempt: number }>(
    'select status, attempt from langgraph.runs where run_id = $1',
    [background.run_id],
  );
  assert.deepEqual(done, { status: 'success', attempt: 2 });

  // Crons: a time zone that is not one is refused, and nothing is made.
  await assert.rejects(
    second.client.crons.create('agent', { schedule: '0 9 * * *', timezone: 'Mars/Olympus' }),
    /422.*not an IANA time zone/,
  );
  assert.equal(await second.client.crons.count({}), 0);
  second.child.kill('SIGTERM');
  await exited(second.child);
});

test('interrupts, resuming, state updates and if_not_exists, across two instances', async () => {
  const [one, two] = [await startServer(), await startServer()];
  const thread = await one.client.threads.create();
  // Stopped before the writer: interrupted, with the writer next, seen from the other instance.
  await one.client.runs.wait(thread.thread_id, 'agent', {
    input: { text: 'count the words' },
    interruptBefore: ['writer'],
  });
  assert.equal((await two.client.threads.get(thread.thread_id)).status, 'interrupted');
  const paused = await two.client.threads.getState(thread.thread_id);
  assert.deepEqual(paused.next, ['writer']);
  // A state update as a node, then resuming (input null) through the other instance.
  await two.client.threads.updateState(thread.thread_id, { values: { findings: ['edited'] }, asNode: 'analyst' });
  const resumed = await one.client.runs.wait(thread.thread_id, 'agent', { input: null });
  assert.equal((resumed as { answer: string }).answer, 'Analysis: 3 words; edited.');
  assert.equal((await two.client.threads.get(thread.thread_id)).status, 'idle');
  // if_not_exists: a run on an unknown thread id is refused, or makes the thread when asked to.
  const fresh = '0195f0c4-1111-7000-8000-000000000001';
  // (Refused as LangChain's server refuses it: 422, 'already running a task'.)
  await assert.rejects(one.client.runs.wait(fresh, 'agent', { input: { text: 'words' } }), /422/);
  await one.client.runs.wait(fresh, 'agent', { input: { text: 'words' }, ifNotExists: 'create' });
  assert.deepEqual(((await two.client.threads.getState(fresh)).values as { findings: string[] }).findings, ['1 words']);
  for (const server of [one, two]) {
    server.child.kill('SIGTERM');
    await exited(server.child);
  }
});

test("langgraph.json's checkpointer and store TTLs delete idle threads, their checkpoints, and expired items", async () => {
  const server = await startServer('ttl.json');
  const thread = await server.client.threads.create();
  await server.client.runs.wait(thread.thread_id, 'agent', { input: { text: 'words' } });
  await server.client.store.putItem(['notes'], 'today', { text: 'remember' });
  assert.ok((await query(`select 1 from langgraph.checkpoints where thread_id = $1`, [thread.thread_id])).length > 0);
  // default_ttl is 3 s, swept every 1.2 s.
  await waitFor('the idle thread and the item to expire', async () => {
    const threads = await query('select 1 from langgraph.threads where thread_id = $1', [thread.thread_id]);
    const items = await query(`select 1 from langgraph.store where namespace_path = 'notes'`);
    return threads.length === 0 && items.length === 0;
  });
  await assert.rejects(server.client.threads.get(thread.thread_id), /404/);
  assert.deepEqual(await query(`select 1 from langgraph.checkpoints where thread_id = $1`, [thread.thread_id]), []);
  server.child.kill('SIGTERM');
  await exited(server.child);
});

test('a graph that fails to load ends the process with its error, as the in-memory server does', async () => {
  const child = spawn(process.execPath, ['.slipway/langgraph-server.mjs', 'js', 'broken.json'], {
    cwd: project,
    env: { PATH: process.env.PATH ?? '', HOME: project, PORT: String(await freePort()), DATABASE_URL: database.url },
    detached: true,
  });
  started.push(child);
  let output = '';
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  assert.equal(await exited(child), 1, output);
  assert.match(output, /the graph cannot load/);
});

test('without DATABASE_URL the in-memory server runs, as before', async () => {
  const server = await startServer('langgraph.json', {});
  const output = await server.client.runs.wait(null, 'agent', { input: { text: 'words' } });
  assert.deepEqual((output as { findings: string[] }).findings, ['1 words']);
  assert.doesNotMatch(server.output(), /state in PostgreSQL/);
  server.child.kill('SIGTERM');
  await exited(server.child);
});
