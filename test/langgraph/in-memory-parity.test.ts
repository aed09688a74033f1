/**
 * A LangGraph client's typo (a graph name misspelt as an assistant id, an id cut short, a negative
 * limit, a filter holding a character PostgreSQL cannot store) gets from the launcher's PostgreSQL
 * layer (runtime/langgraph/) what LangChain's in-memory server answers: its status and its body, never
 * a 500. Both servers run from the same project, the in-memory one without DATABASE_URL, and every
 * request goes to both.
 *
 * Crons are the exception: the in-memory server has none (500 "Not implemented" for any valid
 * request), so the layer's own cron routes are held to "a 4xx saying what is wrong, never a 500".
 *
 * And a run's event stream is numbered as the in-memory server numbers it: from 0 for each run (the
 * layer numbered them with one sequence across all runs: 181, 184, ...), Last-Event-ID resuming after it;
 * and a join ends only once the run's thread is updated, as in memory (once in four runs of LangChain's
 * suite it ended before: `expected 'busy' to be 'idle'`).
 *
 * The install (test/support/langgraph-example.ts) takes a minute or so, once per run of the suite.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs/promises';
import { after, before } from 'node:test';
import pg from 'pg';
import { freePort } from '../../src/db/embedded-postgres.ts';
import { createTestDatabase, type TestDatabase } from '../helpers.ts';
import { eventually, pause } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';
import { langgraphExampleProject } from '../support/langgraph-example.ts';

let project: string;
/** What the file removes at its end beside the project (test/support/made-once.ts). */
const scratch: string[] = [];
let database: TestDatabase;
const started: ChildProcess[] = [];
let postgres: Server;
let memory: Server;

interface Server {
  url: string;
  /** A thread made on this server, for the requests about one. */
  threadId: string;
  output: () => string;
}

async function startServer(env: Record<string, string>): Promise<Server> {
  const port = await freePort();
  const child = spawn(process.execPath, ['.slipway/langgraph-server.mjs', 'js', 'langgraph.json'], {
    cwd: project,
    env: { PATH: process.env.PATH ?? '', HOME: project, PORT: String(port), HOST: '127.0.0.1', ...env },
    detached: true,
  });
  started.push(child);
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const url = `http://127.0.0.1:${port}`;
  await eventually('the server to answer /ok', async () => {
    if (child.exitCode !== null) throw new Error(`the launcher exited with ${child.exitCode}:\n${output}`);
    return fetch(`${url}/ok`)
      .then((response) => response.ok)
      .catch(() => false);
  });
  const thread = (await (await fetch(`${url}/threads`, { method: 'POST', body: '{}', headers: JSON_TYPE })).json()) as {
    thread_id: string;
  };
  return { url, threadId: thread.thread_id, output: () => output };
}

const JSON_TYPE = { 'content-type': 'application/json' };

before(async () => {
  project = await langgraphExampleProject('slipway-langgraph-ids-', scratch);
  database = await createTestDatabase();
  [postgres, memory] = await Promise.all([startServer({ DATABASE_URL: database.url }), startServer({})]);
});

after(async () => {
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

interface Answer {
  status: number;
  body: unknown;
}

async function send(server: Server, method: string, url: string, body?: unknown): Promise<Answer> {
  const response = await fetch(`${server.url}${url.replace('{thread}', server.threadId)}`, {
    method,
    ...(body !== undefined ? { body: typeof body === 'string' ? body : JSON.stringify(body), headers: JSON_TYPE } : {}),
  });
  const text = await response.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // Not JSON (an event stream): compared as text.
  }
  return { status: response.status, body: parsed };
}

/** JSON with object keys sorted: the two servers list a record's fields in different orders. */
function sorted(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sorted);
  if (value === null || typeof value !== 'object') return value;
  return Object.fromEntries(
    Object.keys(value)
      .sort()
      .map((key) => [key, sorted((value as Record<string, unknown>)[key])]),
  );
}

/** Ids and times differ between two servers; what an answer says does not. */
function comparable(body: unknown, server: Server): unknown {
  return sorted(
    JSON.parse(
      JSON.stringify(body ?? null)
        .replaceAll(server.threadId, '<thread>')
        .replace(/"(run_id|thread_id|created_at|updated_at)":"[^"]*"/g, '"$1":"<$1>"'),
    ),
  );
}

const NUL = '\u0000';
const LONE = '\ud800';

/** [method, path ({thread}: a thread of the server's), body]. */
const CASES: [string, string, unknown?][] = [
  // Assistant ids: a graph name's typo, an id cut short.
  ['GET', '/assistants/agnet'],
  ['GET', '/assistants/not-a-uuid/graph'],
  ['GET', '/assistants/not-a-uuid/schemas'],
  ['GET', '/assistants/not-a-uuid/subgraphs'],
  ['PATCH', '/assistants/not-a-uuid', { metadata: { a: 1 } }],
  ['DELETE', '/assistants/not-a-uuid'],
  ['POST', '/assistants/not-a-uuid/latest', { version: 1 }],
  ['POST', '/assistants/not-a-uuid/versions', {}],
  ['GET', '/assistants/00000000-0000-4000-8000-00000000000'],
  // Runs naming an assistant that is no graph and no UUID.
  ['POST', '/runs/wait', { assistant_id: 'not-a-uuid', input: { text: 'words' } }],
  ['POST', '/runs', { assistant_id: 'agnet', input: { text: 'words' } }],
  ['POST', '/runs/stream', { assistant_id: 'agnet', input: { text: 'words' } }],
  ['POST', '/threads/{thread}/runs/wait', { assistant_id: 'agnet', input: { text: 'words' } }],
  ['POST', '/threads/{thread}/runs', { assistant_id: 'agnet', input: { text: 'words' } }],
  ['POST', '/threads/{thread}/runs/stream', { assistant_id: 'agnet', input: { text: 'words' } }],
  ['POST', '/runs/batch', [{ assistant_id: 'agnet', input: { text: 'words' } }]],
  // Thread, run and checkpoint ids (the server's own validation answers most).
  ['GET', '/threads/not-a-uuid'],
  ['GET', '/threads/{thread}/runs/not-a-uuid'],
  ['GET', '/threads/{thread}/state/not-a-checkpoint'],
  ['POST', '/threads/{thread}/state/checkpoint', { checkpoint: { checkpoint_id: 'not-a-checkpoint' } }],
  ['POST', '/threads/{thread}/history', { before: 'not-a-checkpoint' }],
  ['POST', '/threads/{thread}/history', { checkpoint: { checkpoint_id: 'not-a-uuid' } }],
  ['GET', '/threads/{thread}/history?before=not-a-checkpoint'],
  ['POST', '/threads/search', { ids: ['not-a-uuid'] }],
  ['POST', '/threads', { thread_id: 'not-a-uuid' }],
  ['POST', '/assistants', { graph_id: 'agent', assistant_id: 'not-a-uuid' }],
  ['POST', '/assistants', { graph_id: 'agnet' }],
  ['POST', '/runs/cancel', { run_ids: ['not-a-uuid'] }],
  // Limits and offsets out of range.
  ['GET', '/threads/{thread}/runs?limit=-1'],
  ['GET', '/threads/{thread}/runs?offset=-5'],
  ['GET', '/threads/{thread}/runs?limit=1.5'],
  ['GET', '/threads/{thread}/runs?limit=abc'],
  ['GET', '/threads/{thread}/history?limit=-1'],
  ['GET', '/threads/{thread}/history?limit=abc'],
  ['POST', '/threads/{thread}/history', { limit: -1 }],
  ['POST', '/threads/{thread}/history', { limit: 1.5 }],
  ['POST', '/assistants/search', { limit: -1 }],
  ['POST', '/assistants/search', { offset: -1 }],
  ['POST', '/threads/search', { limit: 0 }],
  ['POST', '/store/items/search', { namespace_prefix: ['a'], limit: -1 }],
  ['POST', '/store/items/search', { namespace_prefix: ['a'], offset: -1 }],
  ['POST', '/store/items/search', { namespace_prefix: ['a'], limit: 1.5 }],
  ['POST', '/store/namespaces', { limit: -1 }],
  ['POST', '/store/namespaces', { offset: -3 }],
  // Filters holding what PostgreSQL cannot store.
  ['POST', '/assistants/search', { metadata: { owner: `a${NUL}b` } }],
  ['POST', '/assistants/count', { metadata: { owner: LONE } }],
  ['POST', '/assistants/search', { name: `a${NUL}` }],
  ['POST', '/assistants/search', { graph_id: `agent${NUL}` }],
  ['POST', '/threads/search', { metadata: { owner: `a${NUL}b` } }],
  ['POST', '/threads/search', { values: { text: LONE } }],
  ['POST', '/threads/count', { metadata: { owner: `a${NUL}b` } }],
  ['GET', `/threads/{thread}/runs?metadata=${encodeURIComponent(JSON.stringify({ a: NUL }))}`],
  ['POST', '/threads/{thread}/history', { metadata: { owner: `a${NUL}b` } }],
  ['POST', '/store/items/search', { namespace_prefix: [`a${NUL}`] }],
  ['POST', '/store/items/search', { namespace_prefix: ['a'], filter: { owner: `a${NUL}` } }],
  ['GET', `/store/items?namespace=a${encodeURIComponent(NUL)}&key=k`],
  ['GET', '/store/items?namespace=a.b&key=k'],
  ['POST', '/store/namespaces', { prefix: [`a${NUL}`] }],
];

test('malformed ids, limits and filters answer what the in-memory server answers, never a 500', async () => {
  const differences: string[] = [];
  for (const [method, url, body] of CASES) {
    const label = `${method} ${url}${body !== undefined ? ` ${JSON.stringify(body)}` : ''}`;
    const [ours, theirs] = [await send(postgres, method, url, body), await send(memory, method, url, body)];
    if (ours.status >= 500) {
      differences.push(`${label}: ${ours.status} ${JSON.stringify(ours.body)} (in-memory: ${theirs.status})`);
      continue;
    }
    // The in-memory server's own 500s (a NUL in a store namespace) are not copied: an empty answer instead.
    if (theirs.status >= 500) continue;
    if (ours.status !== theirs.status) {
      differences.push(
        `${label}: ${ours.status} ${JSON.stringify(ours.body)}, in-memory ${theirs.status} ${JSON.stringify(theirs.body)}`,
      );
      continue;
    }
    if (ours.status >= 400 || Array.isArray(ours.body) || typeof ours.body === 'number') {
      const [a, b] = [comparable(ours.body, postgres), comparable(theirs.body, memory)];
      if (JSON.stringify(a) !== JSON.stringify(b))
        differences.push(`${label}: ${JSON.stringify(a)}, in-memory ${JSON.stringify(b)}`);
    }
  }
  assert.deepEqual(differences, [], postgres.output().slice(-2000));
});

test('the cron routes (which the in-memory server lacks) answer malformed ids with a 4xx, never a 500', async () => {
  const answers: string[] = [];
  const nothing = await send(postgres, 'POST', '/runs/crons/search', { metadata: { owner: `a${NUL}` } });
  assert.deepEqual(nothing, { status: 200, body: [] }, 'a filter holding a NUL finds nothing');
  for (const [method, url, body] of [
    ['POST', '/runs/crons', { assistant_id: 'agnet', schedule: '* * * * *' }],
    ['POST', '/runs/crons', { assistant_id: 'not-a-uuid-but-36-characters-long-xx', schedule: '* * * * *' }],
    ['POST', '/threads/not-a-uuid/runs/crons', { assistant_id: 'agent', schedule: '* * * * *' }],
    ['POST', '/runs/crons/search', { assistant_id: 'agnet' }],
    ['POST', '/runs/crons/search', { thread_id: 'not-a-uuid' }],
    ['POST', '/runs/crons/count', { assistant_id: 'agnet' }],
    ['POST', '/runs/crons/count', { thread_id: 'not-a-uuid' }],
    ['PATCH', '/runs/crons/not-a-uuid', { enabled: false }],
    ['DELETE', '/runs/crons/not-a-uuid'],
  ] as [string, string, unknown?][]) {
    const answer = await send(postgres, method, url, body);
    if (answer.status < 400 || answer.status >= 500)
      answers.push(`${method} ${url} ${JSON.stringify(body)}: ${answer.status} ${JSON.stringify(answer.body)}`);
  }
  assert.deepEqual(answers, []);
  const typo = await send(postgres, 'POST', '/runs/crons', { assistant_id: 'agnet', schedule: '* * * * *' });
  assert.equal(typo.status, 404, JSON.stringify(typo.body));
  assert.match(JSON.stringify(typo.body), /Assistant agnet not found/);
});

/** The `id:` of each event of an SSE answer. */
async function eventIds(server: Server, url: string, body: unknown, headers: Record<string, string> = {}) {
  const response = await fetch(`${server.url}${url.replace('{thread}', server.threadId)}`, {
    method: body === undefined ? 'GET' : 'POST',
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    headers: { ...JSON_TYPE, ...headers },
  });
  const text = await response.text();
  return [...text.matchAll(/^id: ?(.*)$/gm)].map((m) => m[1]!);
}

test("a run's streamed events are numbered from 0, each run on its own, and Last-Event-ID resumes after one", async () => {
  const run = { assistant_id: 'agent', input: { text: 'words sentences' }, stream_mode: ['values', 'updates'] };
  for (const server of [memory, postgres]) {
    const first = await eventIds(server, '/threads/{thread}/runs/stream', run);
    assert.ok(first.length >= 3, `${server === memory ? 'in-memory' : 'PostgreSQL'}: ${first.join()}`);
    assert.deepEqual(
      first,
      first.map((_, i) => String(i)),
      `${server === memory ? 'in-memory' : 'PostgreSQL'}: ids from 0`,
    );
    const second = await eventIds(server, '/threads/{thread}/runs/stream', run);
    assert.equal(second[0], '0', 'the next run starts again at 0');
  }
  // Resuming a resumable run's stream after its event 1 gives events 2 onwards.
  const resumable = { ...run, stream_resumable: true };
  const created = await (
    await fetch(`${postgres.url}/threads/${postgres.threadId}/runs`, {
      method: 'POST',
      body: JSON.stringify(resumable),
      headers: JSON_TYPE,
    })
  ).json();
  const all = await eventIds(postgres, `/threads/{thread}/runs/${created.run_id}/stream`, undefined);
  const rest = await eventIds(postgres, `/threads/{thread}/runs/${created.run_id}/stream`, undefined, {
    'last-event-id': '1',
  });
  assert.deepEqual(rest, all.slice(2), `all ${all.join()}, after 1: ${rest.join()}`);
});

test("a join ends only once the run's thread is updated, however long that takes", async () => {
  const created = (await (
    await fetch(`${postgres.url}/threads/${postgres.threadId}/runs`, {
      method: 'POST',
      body: JSON.stringify({
        assistant_id: 'agent',
        input: { text: 'words sentences' },
        config: { configurable: { step_delay_ms: 300 } },
      }),
      headers: JSON_TYPE,
    })
  ).json()) as { run_id: string };
  const runStatus = async (): Promise<string | undefined> => {
    const { rows } = await database.pool.query('select status from langgraph.runs where run_id = $1', [created.run_id]);
    return rows[0]?.status as string | undefined;
  };
  // The lock is taken only once the run has been claimed: the claim skips a locked thread, and a run
  // never claimed never ends.
  await eventually('the run to be claimed', async () => (await runStatus()) !== 'pending');
  // The thread's update waits behind this lock, as behind a slow instance: the run ends, its thread not yet.
  const holder = new pg.Client({ connectionString: database.url });
  await holder.connect();
  try {
    await holder.query('begin');
    await holder.query('select 1 from langgraph.threads where thread_id = $1 for update', [postgres.threadId]);
    assert.equal(await runStatus(), 'running', 'the thread is locked while its run runs (its steps take 300 ms each)');
    let joinedAt: number | null = null;
    const joined = send(postgres, 'GET', `/threads/{thread}/runs/${created.run_id}/join`).then((answer) => {
      joinedAt = Date.now();
      return answer;
    });
    await eventually('the run to end', async () => (await runStatus()) === 'success');
    // Well past the 1 s after which a join used to give up waiting for the run's end to be announced.
    await pause(3_000, "the LangGraph server's own 1-s give-up (another process's timer) passes");
    assert.equal(joinedAt, null, 'the join waits for the thread');
    await holder.query('commit');
    const answer = await joined;
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    const thread = await send(postgres, 'GET', '/threads/{thread}');
    assert.equal((thread.body as { status: string }).status, 'idle');
  } finally {
    await holder.end();
  }
});
