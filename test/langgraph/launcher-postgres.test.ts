/**
 * The launcher's PostgreSQL layer (runtime/langgraph-server.mjs and runtime/langgraph/) run as the data plane runs it, without
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
 * The install (test/support/langgraph-example.ts) takes a minute or so, once per run of the suite.
 */
import assert from 'node:assert/strict';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs/promises';
import path from 'node:path';
import { after, before } from 'node:test';
import { promisify } from 'node:util';
import { Client } from '@langchain/langgraph-sdk';
import pg from 'pg';
import { REPLACED_CHANNEL } from '../../src/dataplane/app-replaced.ts';
import { freePort } from '../../src/db/embedded-postgres.ts';
import { langGraphUsage } from '../../src/store/app-database-usage.ts';
import { createTestDatabase, type TestDatabase } from '../helpers.ts';
import { eventually } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';
import { langgraphExampleProject } from '../support/langgraph-example.ts';

const run = promisify(execFile);

let project: string;
/** What the file removes at its end beside the project (test/support/made-once.ts). */
const scratch: string[] = [];
let database: TestDatabase;
const started: ChildProcess[] = [];

before(async () => {
  project = await langgraphExampleProject('slipway-launcher-pg-', scratch);
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
  // A graph that asks a person: interrupt() inside a node, resumed with a Command.
  await fs.writeFile(
    path.join(project, 'src', 'ask.ts'),
    `import { Annotation, END, START, StateGraph, interrupt } from '@langchain/langgraph';
const State = Annotation.Root({
  question: Annotation<string>(),
  answer: Annotation<string>(),
  log: Annotation<string[]>({ reducer: (all, more) => [...all, ...more], default: () => [] }),
});
export const graph = new StateGraph(State)
  .addNode('ask', (state) => ({ answer: interrupt({ question: state.question }) as string, log: ['asked'] }))
  .addNode('reply', (state) => ({ log: ['reply: ' + state.answer] }))
  .addEdge(START, 'ask')
  .addEdge('ask', 'reply')
  .addEdge('reply', END)
  .compile();
`,
  );
  await fs.writeFile(
    path.join(project, 'ask.json'),
    JSON.stringify({
      node_version: '20',
      graphs: { agent: './src/agent.ts:graph', ask: './src/ask.ts:graph' },
    }),
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
  for (const dir of scratch) await fs.rm(dir, { recursive: true, force: true });
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
  await eventually('the server to answer /ok', async () => {
    if (child.exitCode !== null) throw new Error(`the launcher exited with ${child.exitCode}:\n${output}`);
    return fetch(`http://127.0.0.1:${port}/ok`)
      .then((response) => response.ok)
      .catch(() => false);
  });
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
  await eventually('the run to write part of its state', async () => {
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

test('a run interrupted inside a node resumes with a Command through another instance: the value reaches the graph', async () => {
  const [one, two] = [await startServer('ask.json'), await startServer('ask.json')];
  const thread = await one.client.threads.create();
  await one.client.runs.wait(thread.thread_id, 'ask', { input: { question: 'Which colour?' } });
  assert.equal((await two.client.threads.get(thread.thread_id)).status, 'interrupted');
  const paused = await two.client.threads.getState(thread.thread_id);
  assert.deepEqual(paused.next, ['ask']);
  assert.deepEqual(
    paused.tasks.flatMap((task) => task.interrupts.map((i) => i.value)),
    [{ question: 'Which colour?' }],
    'the question the graph asked is on the thread',
  );
  const resumed = await two.client.runs.wait(thread.thread_id, 'ask', { command: { resume: 'blue' } });
  assert.deepEqual(resumed, { question: 'Which colour?', answer: 'blue', log: ['asked', 'reply: blue'] });
  assert.equal((await one.client.threads.get(thread.thread_id)).status, 'idle');
  // The thread goes on from there: its history holds the interrupted step and the resumed ones.
  const history = await one.client.threads.getHistory(thread.thread_id);
  assert.ok(
    history.some((state) => state.next.includes('ask') && state.tasks.some((task) => task.interrupts.length > 0)),
    'the interrupted state is in the history',
  );
  assert.deepEqual((history[0]!.values as { log: string[] }).log, ['asked', 'reply: blue']);
  for (const server of [one, two]) {
    server.child.kill('SIGTERM');
    await exited(server.child);
  }
});

test("a client reconnecting with Last-Event-ID, on another instance, gets only the run's events after that id", async () => {
  const [one, two] = [await startServer(), await startServer()];
  const thread = await one.client.threads.create();
  const events: { id?: string; event: string; data: unknown }[] = [];
  for await (const part of one.client.runs.stream(thread.thread_id, 'agent', {
    input: { text: 'words shout' },
    streamMode: ['updates'],
  }))
    events.push(part);
  // metadata, then one update per node: planner, analyst twice, writer.
  assert.deepEqual(
    events.map((e) => e.event),
    ['metadata', 'updates', 'updates', 'updates', 'updates'],
  );
  const ids = events.map((e) => e.id);
  assert.ok(
    ids.every((id) => typeof id === 'string' && id !== ''),
    `every event has an id: ${JSON.stringify(ids)}`,
  );
  const runId = (events[0]!.data as { run_id: string }).run_id;
  // The client lost its connection after the second event, and comes back through the other instance.
  const again: typeof events = [];
  for await (const part of two.client.runs.joinStream(thread.thread_id, runId, { lastEventId: ids[1]! }))
    again.push(part);
  assert.deepEqual(again, events.slice(2), 'exactly the events after the one it had, the same ids and data');
  // And from the start without one.
  const all: typeof events = [];
  for await (const part of two.client.runs.joinStream(thread.thread_id, runId)) all.push(part);
  assert.deepEqual(all, events);
  for (const server of [one, two]) {
    server.child.kill('SIGTERM');
    await exited(server.child);
  }
});

/** A graph that says which instance executed it: its revision and endpoint (the data plane's variables). */
async function writeWhichGraph(): Promise<void> {
  await fs.writeFile(
    path.join(project, 'src', 'which.ts'),
    `import { Annotation, END, START, StateGraph } from '@langchain/langgraph';
const State = Annotation.Root({ n: Annotation<number>(), revision: Annotation<string>(), endpoint: Annotation<string>() });
export const graph = new StateGraph(State)
  .addNode('which', () => ({
    revision: process.env.SLIPWAY_REVISION_ID ?? '',
    endpoint: process.env.SLIPWAY_ENDPOINT ?? '',
  }))
  .addEdge(START, 'which')
  .addEdge('which', END)
  .compile();
`,
  );
  await fs.writeFile(
    path.join(project, 'which.json'),
    JSON.stringify({ node_version: '20', graphs: { which: './src/which.ts:graph' } }),
  );
}

test("an instance told that its revision was replaced (the data plane's NOTIFY) takes no more runs; the serving one takes them all", async () => {
  await writeWhichGraph();
  const env = (revision: string) => ({ DATABASE_URL: database.url, SLIPWAY_REVISION_ID: revision });
  const old = await startServer('which.json', env('rev-old'));
  const serving = await startServer('which.json', env('rev-new'));
  try {
    // Another revision's name changes nothing for either.
    // The channel the data plane sends on (src/dataplane/app-replaced.ts): the launcher must listen there.
    await query('select pg_notify($1, $2)', [REPLACED_CHANNEL, 'rev-other']);
    await query('select pg_notify($1, $2)', [REPLACED_CHANNEL, 'rev-old']);
    await eventually('the old instance to say it takes no more runs', () => /no more runs/.test(old.output()), {
      seconds: 20,
    });
    assert.doesNotMatch(serving.output(), /no more runs/, 'the serving revision was not named');
    // Runs made through the old instance (its HTTP requests are still being drained) run on the new one.
    const thread = await old.client.threads.create();
    const made = [];
    for (let n = 0; n < 6; n += 1) {
      const other = await old.client.threads.create();
      made.push(await old.client.runs.create(other.thread_id, 'which', { input: { n } }));
    }
    made.push(await old.client.runs.create(thread.thread_id, 'which', { input: { n: 6 } }));
    const revisions = [];
    for (const run of made) {
      const values = (await serving.client.runs.join(run.thread_id, run.run_id)) as { revision: string };
      revisions.push(values.revision);
    }
    assert.deepEqual(
      revisions,
      made.map(() => 'rev-new'),
      'every run executed by the serving revision',
    );
    // The old instance still serves what it is asked and stops as before.
    assert.equal((await old.client.threads.get(thread.thread_id)).status, 'idle');
  } finally {
    // Stopped even when the test fails: a leftover instance would take the next tests' runs.
    for (const server of [old, serving]) {
      server.child.kill('SIGTERM');
      assert.equal(await exited(server.child), 0, server.output());
    }
  }
});

test("an endpoint's instances (a pull request's preview) and the deployment's own take only their own runs from the shared queue", async () => {
  await writeWhichGraph();
  const main = await startServer('which.json', { DATABASE_URL: database.url, SLIPWAY_REVISION_ID: 'rev-main' });
  const preview = await startServer('which.json', {
    DATABASE_URL: database.url,
    SLIPWAY_REVISION_ID: 'rev-pr',
    SLIPWAY_ENDPOINT: 'pr-7',
  });
  try {
    const made: { through: string; run: { thread_id: string; run_id: string } }[] = [];
    for (let n = 0; n < 8; n += 1) {
      const through = n % 2 === 0 ? main : preview;
      const thread = await through.client.threads.create();
      made.push({
        through: through === main ? 'rev-main' : 'rev-pr',
        run: await through.client.runs.create(thread.thread_id, 'which', { input: { n } }),
      });
    }
    const executed = [];
    for (const { run } of made) {
      const values = (await main.client.runs.join(run.thread_id, run.run_id)) as { revision: string };
      executed.push(values.revision);
    }
    assert.deepEqual(
      executed,
      made.map(({ through }) => through),
      "each run executed by the instances of the address it was made through, never the other's code",
    );
  } finally {
    for (const server of [main, preview]) {
      server.child.kill('SIGTERM');
      assert.equal(await exited(server.child), 0, server.output());
    }
  }
});

test("langgraph.json's checkpointer and store TTLs delete idle threads, their checkpoints, and expired items", async () => {
  const server = await startServer('ttl.json');
  // What the storage view reads as the TTLs in force (GET /v2/deployments/{id}/storage).
  const [recorded] = await query<{ value: unknown }>(`select value from langgraph.settings where name = 'ttl'`);
  assert.deepEqual(recorded?.value, {
    checkpointer: { strategy: 'delete', default_ttl: 0.05, sweep_interval_minutes: 0.02 },
    store: { default_ttl: 0.05, refresh_on_read: true, sweep_interval_minutes: 0.02 },
  });
  const thread = await server.client.threads.create();
  await server.client.runs.wait(thread.thread_id, 'agent', { input: { text: 'words' } });
  await server.client.store.putItem(['notes'], 'today', { text: 'remember' });
  assert.ok((await query(`select 1 from langgraph.checkpoints where thread_id = $1`, [thread.thread_id])).length > 0);
  // default_ttl is 3 s, swept every 1.2 s.
  await eventually('the idle thread and the item to expire', async () => {
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

test("the build's step reads the graphs' schemas once; an instance serves them from there, not reading them again", async () => {
  const file = path.join(project, '.slipway', 'langgraph-schemas.json');
  // What an archive brought under that name goes, whatever the step finds.
  await fs.writeFile(file, '{"brought": "by the archive"}');
  const step = await run(process.execPath, ['.slipway/langgraph-server.mjs', 'schemas', 'langgraph.json'], {
    cwd: project,
  });
  assert.match(step.stdout, /^Graph schemas read at build time: agent\b/m);
  const written = JSON.parse(await fs.readFile(file, 'utf8'));
  const read = written.graphs.agent;
  assert.equal(read.spec, './src/agent.ts:graph');
  assert.ok(read.schema.graph.input.properties.text, JSON.stringify(read.schema));

  const schemasServed = async () => {
    const server = await startServer();
    try {
      const [assistant] = await server.client.assistants.search({ graphId: 'agent' });
      return await server.client.assistants.getSchemas(assistant!.assistant_id);
    } finally {
      server.child.kill('SIGTERM');
      await exited(server.child);
    }
  };
  try {
    // The server's answer is the file's: a mark put there comes back (the types were not read again).
    read.schema.graph.input.description = 'read by the build';
    await fs.writeFile(file, JSON.stringify(written));
    assert.equal(((await schemasServed()).input_schema as { description?: string }).description, 'read by the build');
    // For a graph the config now names differently, the file is not the graph's: the server reads the types.
    written.graphs.agent.spec = './src/other.ts:graph';
    await fs.writeFile(file, JSON.stringify(written));
    const fresh = await schemasServed();
    assert.equal((fresh.input_schema as { description?: string }).description, undefined);
    assert.ok((fresh.input_schema as { properties: Record<string, unknown> }).properties.text);
  } finally {
    await fs.rm(file, { force: true });
  }
});

test('without DATABASE_URL the in-memory server runs, as before', async () => {
  const server = await startServer('langgraph.json', {});
  const output = await server.client.runs.wait(null, 'agent', { input: { text: 'words' } });
  assert.deepEqual((output as { findings: string[] }).findings, ['1 words']);
  assert.doesNotMatch(server.output(), /state in PostgreSQL/);
  server.child.kill('SIGTERM');
  await exited(server.child);
});

test("the storage view (GET /v2/deployments/{id}/storage) reads the launcher's own tables: every one, rows as counted, bytes", async () => {
  // A conversation to measure (the TTL test's sweeps deleted the earlier tests' idle threads).
  const server = await startServer();
  const thread = await server.client.threads.create();
  await server.client.runs.wait(thread.thread_id, 'agent', { input: { text: 'words' } });
  server.child.kill('SIGTERM');
  await exited(server.child);
  const connection = new pg.Client({ connectionString: database.url });
  await connection.connect();
  try {
    await connection.query('begin transaction read only');
    const usage = await langGraphUsage(connection);
    await connection.query('commit');
    assert.ok(usage);
    const tables = Object.fromEntries(usage.tables.map((table) => [table.name, table]));
    for (const name of [
      'assistants',
      'threads',
      'runs',
      'run_events',
      'crons',
      'checkpoints',
      'checkpoint_writes',
      'store',
    ])
      assert.ok(tables[name], `${name} is listed: ${Object.keys(tables).join(', ')}`);
    for (const name of ['threads', 'runs', 'checkpoints']) {
      const [counted] = await query<{ n: number }>(`select count(*)::int as n from langgraph.${name}`);
      assert.equal(tables[name]!.rows, counted!.n, name);
      assert.ok(tables[name]!.rows > 0 && tables[name]!.size_bytes > 0, name);
    }
    assert.ok(usage.ttl, 'the last instance recorded its TTLs');
  } finally {
    await connection.end();
  }
});
