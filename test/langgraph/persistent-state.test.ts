/**
 * A LangGraph.js deployment keeps its state in its own PostgreSQL database (docs/langgraph.md, "State
 * in the deployment's database"), judged by LangChain's own client, `@langchain/langgraph-sdk`, against
 * examples/langgraph-js deployed on the real local data plane with two web instances:
 *
 * - two instances share threads, runs, history, copies and the store: what one makes, the other reads,
 *   continues and streams;
 * - double-texting: reject, interrupt, rollback and enqueue do what LangGraph's server documents;
 * - a cron fires once per tick with two instances (its next run moved to now, so no minute is waited for;
 *   the claim moves the next run on);
 * - a background run survives a SIGKILL of the instance executing it: another takes it over from the
 *   state before the run (attempt 2), and the result has nothing twice; killed three times, it fails
 *   with the reason (and its thread is `error`), never left running;
 * - a thread survives a redeploy (new secret), a rollback, and a restart of the whole worker;
 * - `POST /internal/truncate`, open to anyone who reaches the URL, wipes nothing.
 *
 * The build installs from the npm registry: a minute or so.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before } from 'node:test';
import { test } from '../support/limited-test.ts';
import { fileURLToPath } from 'node:url';
import { Client } from '@langchain/langgraph-sdk';
import { databaseUrl, withClient } from '../../src/db/admin-client.ts';
import { startTestService, uploadApp, waitForRevision, type TestService } from '../dataplane/data-plane-harness.ts';
import { eventually } from '../support/wait.ts';

const EXAMPLE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../examples/langgraph-js');
/** Short leases, so a lost instance's run is taken over within seconds. */
const SECRETS = [
  { name: 'REPLY_PREFIX', value: 'First' },
  { name: 'LANGGRAPH_RUN_LEASE_SECONDS', value: '4' },
];

let service: TestService;
let source: string;
let deploymentId: string;
let slug: string;
let firstRevisionId: string;

before(async () => {
  service = await startTestService({ SLIPWAY_HEALTH_TIMEOUT_SECONDS: '180' });
  // The example as the CLI packs it: without node_modules.
  source = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-langgraph-state-'));
  await fs.cp(EXAMPLE, source, { recursive: true, filter: (from) => !from.includes('node_modules') });
  const tarball = await uploadApp(service, source);
  const created = await service.api('POST', '/v2/deployments', {
    name: 'remembering-agent',
    source: 'internal_source',
    source_config: { resource_spec: { min_scale: 2 } },
    source_revision_config: { source_tarball_path: tarball, framework_config_path: 'langgraph.json' },
    secrets: SECRETS,
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  deploymentId = created.body.id;
  firstRevisionId = created.body.latest_revision_id;
  const revision = await waitForRevision(service, deploymentId, firstRevisionId, undefined, 480);
  assert.equal(revision.status, 'DEPLOYED', JSON.stringify(revision));
  const url: string = (await service.api('GET', `/v2/deployments/${deploymentId}`)).body.source_config.custom_url;
  slug = new URL(url).hostname.split('.')[0]!;
});

after(async () => {
  await service?.close();
  await fs.rm(source, { recursive: true, force: true });
});

/**
 * One SDK client per web instance, straight to its port: which instance answers is the test's choice.
 * Both must answer: an instance killed by an earlier test comes back (on a new port) after a moment.
 */
async function instanceClients(): Promise<[Client, Client]> {
  const targets = await eventually('two answering web instances', async () => {
    const now = service.edge.targets(slug);
    if (now.length !== 2) return null;
    const answering = await Promise.all(
      now.map((target) =>
        fetch(`http://127.0.0.1:${target.port}/ok`)
          .then((response) => response.ok)
          .catch(() => false),
      ),
    );
    return answering.every(Boolean) ? now : null;
  });
  const [a, b] = targets.map(
    (target) => new Client({ apiUrl: `http://127.0.0.1:${target.port}`, callerOptions: { maxRetries: 0 } }),
  );
  return [a!, b!];
}

/** The deployment's own database, as the service's superuser sees it. */
async function appDatabase<T>(query: string, params: unknown[]): Promise<T[]> {
  const runtime = await service.database.db
    .selectFrom('deployment_runtimes')
    .select('database_name')
    .where('deployment_id', '=', deploymentId)
    .executeTakeFirstOrThrow();
  return withClient(databaseUrl(service.database.url, runtime.database_name!), async (client) => {
    const result = await client.query(query, params);
    return result.rows as T[];
  });
}

const slow = (ms: number) => ({ configurable: { step_delay_ms: ms } });
const findingsOf = (values: unknown): string[] => (values as { findings?: string[] }).findings ?? [];

let sharedThreadId: string;

test('two instances share threads, runs, history, copies and the store', async () => {
  const [a, b] = await instanceClients();
  const thread = await a.threads.create({ metadata: { customer: 'ann' } });
  sharedThreadId = thread.thread_id;
  const first = await a.runs.wait(thread.thread_id, 'agent', { input: { text: 'count the words here' } });
  assert.deepEqual(findingsOf(first), ['4 words']);

  // The other instance reads it, finds it, and continues it, streaming.
  const state = await b.threads.getState(thread.thread_id);
  assert.deepEqual(findingsOf(state.values), ['4 words']);
  const found = await b.threads.search({ metadata: { customer: 'ann' } });
  assert.deepEqual(
    found.map((t) => t.thread_id),
    [thread.thread_id],
  );
  const updates: string[] = [];
  for await (const chunk of b.runs.stream(thread.thread_id, 'agent', {
    input: { text: 'shout this' },
    streamMode: ['updates'],
  })) {
    if (chunk.event === 'updates') updates.push(Object.keys(chunk.data)[0]!);
  }
  assert.deepEqual(updates, ['planner', 'analyst', 'writer']);
  const after = await a.threads.getState(thread.thread_id);
  assert.deepEqual(findingsOf(after.values), ['4 words', 'shouted: SHOUT THIS']);
  assert.equal((after.values as { answer: string }).answer, 'First: 4 words; shouted: SHOUT THIS.');
  assert.equal((await a.threads.get(thread.thread_id)).status, 'idle');
  const history = await a.threads.getHistory(thread.thread_id, { limit: 100 });
  assert.ok(history.length >= 8, `every step of both runs is a checkpoint (${history.length})`);
  assert.equal((await b.runs.list(thread.thread_id)).length, 2);

  // A copy made through one instance has the thread's state on the other.
  const copy = await b.threads.copy(thread.thread_id);
  assert.notEqual(copy.thread_id, thread.thread_id);
  assert.deepEqual(findingsOf((await a.threads.getState(copy.thread_id)).values), findingsOf(after.values));

  // The store: items put through one instance are found through the other, by namespace and filter.
  await a.store.putItem(['customers', 'ann'], 'preferences', { tone: 'formal', language: 'en' });
  await a.store.putItem(['customers', 'bob'], 'preferences', { tone: 'casual', language: 'en' });
  const formal = await b.store.searchItems(['customers'], { filter: { tone: 'formal' } });
  assert.deepEqual(
    formal.items.map((item) => item.namespace),
    [['customers', 'ann']],
  );
  assert.equal((await b.store.searchItems(['customers'], { filter: { language: 'en' } })).items.length, 2);
  assert.deepEqual((await b.store.getItem(['customers', 'bob'], 'preferences'))?.value, {
    tone: 'casual',
    language: 'en',
  });
  const namespaces = await b.store.listNamespaces({ prefix: ['customers'] });
  assert.deepEqual(namespaces.namespaces.sort(), [
    ['customers', 'ann'],
    ['customers', 'bob'],
  ]);
});

test('double-texting: reject, interrupt, rollback and enqueue, across instances', async () => {
  const [a, b] = await instanceClients();
  const busy = async (client: Client, threadId: string) => {
    const run = await client.runs.create(threadId, 'agent', {
      input: { text: 'words sentences shout longest' },
      config: slow(1_500),
    });
    await eventually('the run to start', async () => (await b.runs.get(threadId, run.run_id)).status === 'running');
    return run;
  };

  // reject (the default): the second run is refused while the first runs.
  const rejectThread = await a.threads.create();
  const running = await busy(a, rejectThread.thread_id);
  await assert.rejects(
    b.runs.create(rejectThread.thread_id, 'agent', { input: { text: 'words' } }),
    /422.*Thread is already running a task/,
  );
  await b.runs.cancel(rejectThread.thread_id, running.run_id, true);
  assert.equal((await a.runs.get(rejectThread.thread_id, running.run_id)).status, 'interrupted');

  // interrupt: the first stops where it is (its checkpoints stay), the second runs.
  const interruptThread = await a.threads.create();
  const interrupted = await busy(a, interruptThread.thread_id);
  const second = await b.runs.create(interruptThread.thread_id, 'agent', {
    input: { text: 'shout' },
    multitaskStrategy: 'interrupt',
  });
  const secondValues = await b.runs.join(interruptThread.thread_id, second.run_id);
  assert.equal((await a.runs.get(interruptThread.thread_id, interrupted.run_id)).status, 'interrupted');
  assert.equal((await a.runs.get(interruptThread.thread_id, second.run_id)).status, 'success');
  assert.ok(findingsOf(secondValues).includes('shouted: SHOUT'));

  // rollback: the first run and everything it wrote are gone.
  const rollbackThread = await a.threads.create();
  const rolledBack = await busy(a, rollbackThread.thread_id);
  await eventually(
    'the first run to write a finding',
    async () => findingsOf((await a.threads.getState(rollbackThread.thread_id)).values).length > 0,
  );
  const replacement = await b.runs.create(rollbackThread.thread_id, 'agent', {
    input: { text: 'shout' },
    multitaskStrategy: 'rollback',
  });
  const replaced = await b.runs.join(rollbackThread.thread_id, replacement.run_id);
  assert.deepEqual(findingsOf(replaced), ['shouted: SHOUT'], 'nothing of the rolled-back run is left');
  await assert.rejects(a.runs.get(rollbackThread.thread_id, rolledBack.run_id), /404/);
  const history = await a.threads.getHistory(rollbackThread.thread_id, { limit: 100 });
  assert.ok(
    history.every((checkpoint) => checkpoint.metadata?.run_id !== rolledBack.run_id),
    'no checkpoint of the rolled-back run',
  );

  // enqueue: the second waits for the first and then continues from its state.
  const enqueueThread = await a.threads.create();
  const firstRun = await a.runs.create(enqueueThread.thread_id, 'agent', {
    input: { text: 'words' },
    config: slow(300),
  });
  const queued = await b.runs.create(enqueueThread.thread_id, 'agent', {
    input: { text: 'shout' },
    multitaskStrategy: 'enqueue',
  });
  const final = await a.runs.join(enqueueThread.thread_id, queued.run_id);
  assert.equal((await b.runs.get(enqueueThread.thread_id, firstRun.run_id)).status, 'success');
  assert.deepEqual(findingsOf(final), ['1 words', 'shouted: SHOUT']);
});

/** The minute of each run a cron fired, from the deployment's database: one per tick, on any instance. */
async function cronTicks(cronId: string): Promise<string[]> {
  const rows = await appDatabase<{ tick: string }>(
    `select to_char(date_trunc('minute', created_at) at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') as tick
       from langgraph.runs where metadata ->> 'cron_id' = $1`,
    [cronId],
  );
  return rows.map((row) => row.tick);
}

test('a cron fires once per tick with two instances, and is managed through either', async () => {
  const [a, b] = await instanceClients();
  const thread = await a.threads.create();
  const cron = await a.crons.createForThread(thread.thread_id, 'agent', {
    schedule: '* * * * *',
    input: { text: 'words' },
  });
  assert.equal((await b.crons.search({ threadId: thread.thread_id }))[0]?.cron_id, cron.cron_id);
  await assert.rejects(a.crons.create('agent', { schedule: '61 * * * *' }), /422.*out of range for the minute/);
  // The clock, moved for this cron: its next tick is due now rather than at the next minute's start (the
  // instances look every few seconds, by the database's clock), so no test waits up to a minute for it.
  await appDatabase(`update langgraph.crons set next_run_date = now() where cron_id = $1`, [cron.cron_id]);
  // A tick fires one run, whichever instance sees it first: the one that claims it moves the cron's next
  // run on in the same transaction, so the other, looking every few seconds, finds nothing due. A second
  // run of the tick would be queued by then, before the first has ended.
  const firstTick = await eventually(
    'a tick of the cron',
    async () => {
      const rows = await cronTicks(cron.cron_id);
      return rows.length >= 1 ? rows[0]! : null;
    },
    { seconds: 60 },
  );
  await eventually(
    'the run of the first tick to continue the thread',
    async () => findingsOf((await a.threads.getState(thread.thread_id)).values).length >= 1,
  );
  const ticks = await cronTicks(cron.cron_id);
  assert.equal(new Set(ticks).size, ticks.length, `one run per tick: ${ticks.join(', ')}`);
  const [listed] = await b.crons.search({ threadId: thread.thread_id });
  assert.ok(
    new Date(listed!.next_run_date!).getTime() > new Date(firstTick).getTime(),
    `the next run (${listed!.next_run_date}) is after the tick that fired (${firstTick})`,
  );
  await b.crons.delete(cron.cron_id);
  assert.equal(await a.crons.count({ threadId: thread.thread_id }), 0);
});

test('a background run survives the kill of the instance executing it: another takes it over from the state before it', async () => {
  const [a, b] = await instanceClients();
  const thread = await a.threads.create();
  await a.runs.wait(thread.thread_id, 'agent', { input: { text: 'words' } });
  const run = await a.runs.create(thread.thread_id, 'agent', {
    input: { text: 'words sentences shout longest' },
    config: slow(1_000),
  });
  // Kill the instance holding the run's lease once the run has written part of its state.
  const [lease] = await eventually('the run to be claimed and under way', async () => {
    const rows = await appDatabase<{ lease_owner: string | null }>(
      `select r.lease_owner from langgraph.runs r where r.run_id = $1 and r.status = 'running'
         and exists (select 1 from langgraph.checkpoints c where c.metadata ->> 'run_id' = r.run_id::text
           and (c.metadata ->> 'step')::int >= 2)`,
      [run.run_id],
    );
    return rows.length > 0 ? rows : null;
  });
  const owner = lease!.lease_owner!;
  const pids = processesNaming(owner);
  assert.ok(pids.length > 0, `the process of instance ${owner} is found`);
  killAll(pids);

  // Whichever instance is alive answers the join: the run ends once, with each analysis once.
  let values: unknown;
  await eventually('the run to be joined through a live instance', async () => {
    for (const client of [a, b]) {
      try {
        values = await client.runs.join(thread.thread_id, run.run_id);
        return true;
      } catch {
        // That instance is the one killed (or restarting): the other answers.
      }
    }
    return false;
  });
  assert.deepEqual(findingsOf(values), [
    '1 words',
    '4 words',
    'the longest word is "sentences"',
    '1 sentence(s)',
    'shouted: WORDS SENTENCES SHOUT LONGEST',
  ]);
  const [row] = await appDatabase<{ status: string; attempt: number; lease_owner: string | null }>(
    'select status, attempt, lease_owner from langgraph.runs where run_id = $1',
    [run.run_id],
  );
  assert.deepEqual(row, { status: 'success', attempt: 2, lease_owner: null });
});

test('a run whose instance dies three times fails with the reason, never left running', async () => {
  const [a, b] = await instanceClients();
  const thread = await a.threads.create();
  const run = await a.runs.create(thread.thread_id, 'agent', {
    input: { text: 'words sentences shout longest' },
    config: slow(2_000),
  });
  for (let attempt = 1; attempt <= 3; attempt += 1) {
    const [lease] = await eventually(`attempt ${attempt} to be under way`, async () => {
      const rows = await appDatabase<{ lease_owner: string }>(
        `select lease_owner from langgraph.runs where run_id = $1 and status = 'running' and attempt = $2`,
        [run.run_id, attempt],
      );
      return rows.length > 0 ? rows : null;
    });
    killAll(processesNaming(lease!.lease_owner));
  }
  let result: unknown;
  await eventually('the run to end', async () => {
    for (const client of [a, b]) {
      try {
        result = await client.runs.join(thread.thread_id, run.run_id);
        return true;
      } catch {
        // Killed or restarting: the other answers.
      }
    }
    return false;
  });
  assert.match(JSON.stringify(result), /InstanceLost.*stopped 3 times before it finished/);
  const [row] = await appDatabase<{ status: string; failure: string }>(
    'select status, failure from langgraph.runs where run_id = $1',
    [run.run_id],
  );
  assert.deepEqual(row, {
    status: 'error',
    failure: 'The instance executing this run stopped 3 times before it finished',
  });
  const [threadRow] = await appDatabase<{ status: string }>(
    'select status from langgraph.threads where thread_id = $1',
    [thread.thread_id],
  );
  assert.equal(threadRow!.status, 'error');
});

/**
 * SIGKILL to each of `pids`. One may be gone already: killing the sandbox that holds an instance ends the
 * processes inside it before their own turn comes (ESRCH then means it is dead, as wanted).
 */
function killAll(pids: readonly number[]): void {
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ESRCH') throw error;
    }
  }
}

/** Host pids of the processes whose environment says they are revision `revisionId`'s (SLIPWAY_REVISION_ID). */
function revisionProcesses(revisionId: string): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/environ`, 'utf8').split('\0').includes(`SLIPWAY_REVISION_ID=${revisionId}`))
        pids.push(Number(entry));
    } catch {
      // Ended while the list was read, or not ours to read.
    }
  }
  return pids;
}

/** Host pids of the processes whose command line names `text` (the instance id a server runs with). */
function processesNaming(text: string): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      if (readFileSync(`/proc/${entry}/cmdline`, 'utf8').includes(text)) pids.push(Number(entry));
    } catch {
      // The process ended while the list was read.
    }
  }
  return pids;
}

test('a thread survives a redeploy and a rollback, and the whole worker restarting', async () => {
  // Redeploy: a new secret makes revision 2, on new instances.
  const patched = await service.api('PATCH', `/v2/deployments/${deploymentId}`, {
    secrets: [{ name: 'REPLY_PREFIX', value: 'Second' }, SECRETS[1]],
  });
  assert.equal(patched.status, 200, JSON.stringify(patched.body));
  const second = await waitForRevision(service, deploymentId, patched.body.latest_revision_id, undefined, 480);
  assert.equal(second.status, 'DEPLOYED', JSON.stringify(second));
  // Revision 1's instances are told at the switch and take no more runs (docs/langgraph.md, "Redeploys");
  // once they are gone, nothing of revision 1 can run the next one.
  await eventually(
    'the instances of revision 1 to have stopped',
    () => revisionProcesses(firstRevisionId).length === 0,
    {
      seconds: 120,
    },
  );
  let [a, b] = await instanceClients();
  assert.deepEqual(findingsOf((await b.threads.getState(sharedThreadId)).values), ['4 words', 'shouted: SHOUT THIS']);
  const continued = await a.runs.wait(sharedThreadId, 'agent', { input: { text: 'sentences: one.' } });
  assert.equal(
    (continued as { answer: string }).answer,
    'Second: 4 words; shouted: SHOUT THIS; 1 sentence(s).',
    'the new revision continues the conversation',
  );

  // Rollback to revision 1: the thread is still there, and the old code continues it.
  const rollback = await service.api('POST', `/v2/deployments/${deploymentId}/revisions/${firstRevisionId}/redeploy`);
  assert.ok([200, 201].includes(rollback.status), JSON.stringify(rollback.body));
  const restored = await waitForRevision(
    service,
    deploymentId,
    (await service.api('GET', `/v2/deployments/${deploymentId}`)).body.latest_revision_id,
    undefined,
    8 * 60_000,
  );
  assert.equal(restored.status, 'DEPLOYED', JSON.stringify(restored));
  await eventually('the instances of revision 2 to have stopped', () => revisionProcesses(second.id).length === 0, {
    seconds: 120,
  });
  [a, b] = await instanceClients();
  const afterRollback = await b.runs.wait(sharedThreadId, 'agent', { input: { text: 'shout again' } });
  assert.match((afterRollback as { answer: string }).answer, /^First: 4 words; shouted: SHOUT THIS; 1 sentence\(s\); /);

  // The whole worker (every instance) stops and starts again: threads, history and the store are there.
  await service.stopWorker();
  await service.startWorker();
  [a, b] = await instanceClients();
  await eventually('the restarted instances to answer', async () => {
    try {
      return (await a.threads.get(sharedThreadId)).status === 'idle';
    } catch {
      return false;
    }
  });
  assert.equal(findingsOf((await b.threads.getState(sharedThreadId)).values).length, 4);
  assert.equal((await a.runs.list(sharedThreadId)).length, 4);
  assert.deepEqual((await b.store.getItem(['customers', 'ann'], 'preferences'))?.value, {
    tone: 'formal',
    language: 'en',
  });
});

test('POST /internal/truncate, open to whoever reaches the URL, wipes nothing', async () => {
  const [a] = await instanceClients();
  const target = service.edge.targets(slug)[0]!;
  const response = await fetch(`http://127.0.0.1:${target.port}/internal/truncate`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ runs: true, threads: true, assistants: true, checkpointer: true, store: true }),
  });
  assert.equal(response.status, 200);
  assert.equal((await a.threads.get(sharedThreadId)).thread_id, sharedThreadId);
  assert.equal(findingsOf((await a.threads.getState(sharedThreadId)).values).length, 4);
  assert.ok(await a.store.getItem(['customers', 'ann'], 'preferences'));
});
