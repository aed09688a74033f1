/**
 * Caps on long-lived requests (docs/api.md, "Streams and long-polls"): followed logs (`follow=true`),
 * desired-state long-polls and OAuth waits hold a slot of their API key (or listener credential) and of
 * their workspace while open; over either cap the answer is 429 `too_many_streams` with Retry-After,
 * and a stream that ends gives its slot back. (The apps' own budgets: test/attack/app-api-otlp-2.test.ts.)
 */
import assert from 'node:assert/strict';
import { after, afterEach, before, beforeEach, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  client,
  createTestApp,
  newWorkspace,
  newWorkspaceAdmin,
  startReplica,
  type Replica,
  type TestApp,
} from '../support/harness.ts';

const PER_KEY = 3;
const PER_WORKSPACE = 5;

let t: TestApp;
let api: ReturnType<typeof client>;
/** The replica the test streams from: counts are per process, so each test has its own. */
let live: Replica;

before(async () => {
  t = await createTestApp({
    SLIPWAY_STREAMS_PER_KEY: String(PER_KEY),
    SLIPWAY_STREAMS_PER_WORKSPACE: String(PER_WORKSPACE),
  });
  api = client(t.app);
});
beforeEach(async () => {
  live = await startReplica(t);
});
// A stream a test left open must not hold the replica's close (Fastify waits for requests in flight).
afterEach(async () => {
  const closing = live.close();
  live.app.server.closeAllConnections();
  await closing;
});
after(() => t.close());

let names = 0;
async function newRevision(): Promise<{ deploymentId: string; revisionId: string }> {
  names += 1;
  const res = await api.post('/v2/deployments', {
    name: `streams-${names}`,
    source: 'internal_container',
    source_revision_config: { image_uri: 'reg.example.com/a:1' },
  });
  assert.equal(res.status, 201, JSON.stringify(res.body));
  return { deploymentId: res.body.id, revisionId: res.body.latest_revision_id };
}

async function memberKey(name: string): Promise<string> {
  const res = await api.post('/v2/api-keys', { name, role: 'member' });
  assert.equal(res.status, 201, JSON.stringify(res.body));
  return res.body.key as string;
}

const followUrl = (r: { deploymentId: string; revisionId: string }) =>
  `${live.url}/v2/deployments/${r.deploymentId}/revisions/${r.revisionId}/logs?follow=true`;

interface Opened {
  response: Response;
  close(): Promise<void>;
}

/** Opens a followed log with `key`; the body is left open until close(). */
async function follow(key: string, r: { deploymentId: string; revisionId: string }): Promise<Opened> {
  const abort = new AbortController();
  const response = await fetch(followUrl(r), { headers: { 'x-api-key': key }, signal: abort.signal });
  return {
    response,
    async close() {
      abort.abort();
      await response.body?.cancel().catch(() => undefined);
    },
  };
}

async function assertTooMany(response: Response): Promise<void> {
  assert.equal(response.status, 429);
  const retryAfter = Number(response.headers.get('retry-after'));
  assert.ok(Number.isInteger(retryAfter) && retryAfter > 0, `Retry-After: ${response.headers.get('retry-after')}`);
  const body = (await response.json()) as { detail: string; code: string };
  assert.equal(body.code, 'too_many_streams');
  assert.equal(typeof body.detail, 'string');
  assert.ok(response.headers.get('x-request-id'));
}

/** Asks again until a slot is free: the server notices a closed stream when its connection closes. */
async function followOnceFree(key: string, r: { deploymentId: string; revisionId: string }): Promise<Opened> {
  for (let attempt = 0; attempt < 1_500; attempt++) {
    const opened = await follow(key, r);
    if (opened.response.status !== 429) return opened;
    await opened.close();
    await sleep(20);
  }
  assert.fail('no slot was given back after its stream closed');
}

describe('open streams are capped per key and per workspace', () => {
  test('a member key over its cap gets 429s; another key still streams; closing a stream frees its slot', async () => {
    const r = await newRevision();
    const attacker = await memberKey('stream hog');
    const other = await memberKey('bystander');

    const held: Opened[] = [];
    for (let i = 0; i < PER_KEY; i++) {
      const opened = await follow(attacker, r);
      assert.equal(opened.response.status, 200);
      held.push(opened);
    }
    for (let i = 0; i < 3; i++) {
      const refused = await follow(attacker, r);
      await assertTooMany(refused.response);
    }

    // The cap is the attacker's, not everyone's.
    const bystander = await follow(other, r);
    assert.equal(bystander.response.status, 200);
    assert.match(bystander.response.headers.get('content-type') ?? '', /^text\/event-stream/);

    // A closed stream gives its slot back.
    await held.shift()!.close();
    const again = await followOnceFree(attacker, r);
    assert.equal(again.response.status, 200);
    held.push(again);
    await assertTooMany((await follow(attacker, r)).response);

    // A page of logs (no follow) is not a stream and is never capped.
    const page = await fetch(followUrl(r).replace('follow=true', 'follow=false'), {
      headers: { 'x-api-key': attacker },
    });
    assert.equal(page.status, 200);

    for (const opened of [...held, bystander]) await opened.close();
  });

  test("many keys of one workspace stop at its cap; another workspace's keys still stream", async () => {
    const r = await newRevision();
    const keys = await Promise.all([0, 1, 2].map((i) => memberKey(`spread ${i}`)));
    const held: Opened[] = [];
    // 2 + 2 + 1 streams of three keys: each under its key cap, together at the workspace cap.
    for (const [i, key] of keys.entries()) {
      for (let n = 0; n < (i < 2 ? 2 : 1); n++) {
        const opened = await followOnceFree(key, r);
        assert.equal(opened.response.status, 200);
        held.push(opened);
      }
    }
    assert.equal(held.length, PER_WORKSPACE);
    await assertTooMany((await follow(keys[2]!, r)).response);
    // The same address, another workspace: its own budget.
    const other = await newWorkspace(t, 'other tenant');
    const otherAdmin = await newWorkspaceAdmin(t, other.id, 'other admin');
    const made = await client(t.app, otherAdmin.key).post('/v2/deployments', {
      name: 'other-streams',
      source: 'internal_container',
      source_revision_config: { image_uri: 'reg.example.com/a:1' },
    });
    assert.equal(made.status, 201);
    const theirs = await follow(otherAdmin.key, {
      deploymentId: made.body.id,
      revisionId: made.body.latest_revision_id,
    });
    assert.equal(theirs.response.status, 200);
    held.push(theirs);
    for (const opened of held) await opened.close();
  });

  test('desired-state long-polls count against their listener credential', async () => {
    const listener = await api.post('/v2/listeners', { compute_type: 'k8s', compute_id: 'capped-cluster' });
    assert.equal(listener.status, 201);
    const credential = await api.post(`/v2/listeners/${listener.body.id}/credentials`, {});
    assert.equal(credential.status, 201);
    const url = `${live.url}/v2/listeners/${listener.body.id}/desired-state`;
    const auth = { authorization: `Bearer ${credential.body.credential}` };
    const first = await fetch(url, { headers: auth });
    assert.equal(first.status, 200);
    const etag = first.headers.get('etag')!;

    // One more waiting poll than the credential may hold, sent together: whichever reaches the server
    // last is refused at once, and the others keep waiting (nothing changes the state). Sent one by one
    // with a probe after each, a probe could take a slot a poll was about to take, and the probe that
    // took it would give it back only to the next probe.
    const aborts: AbortController[] = [];
    const polls = Array.from({ length: PER_KEY + 1 }, () => {
      const abort = new AbortController();
      aborts.push(abort);
      return fetch(`${url}?wait=60`, { headers: { ...auth, 'if-none-match': etag }, signal: abort.signal }).catch(
        (error: unknown) => {
          if ((error as Error).name !== 'AbortError') throw error;
          return new Response(null, { status: 499 });
        },
      );
    });
    const firstAnswered = await Promise.race(polls);
    await assertTooMany(firstAnswered);
    // A request that does not wait is never capped.
    assert.equal((await fetch(url, { headers: auth })).status, 200);

    for (const abort of aborts) abort.abort();
    const answers = await Promise.all(polls);
    assert.deepEqual(
      answers.map((response) => response.status).sort(),
      [429, 499, 499, 499],
      'the polls within the cap waited until they were closed',
    );
  });

  test('429 with Retry-After is in the OpenAPI document of the capped routes', async () => {
    const doc = (await t.app.inject({ method: 'GET', url: '/openapi.json' })).json<{
      paths: Record<string, Record<string, { responses: Record<string, unknown> }>>;
      components: { responses: Record<string, { headers?: Record<string, unknown> }> };
    }>();
    const resolve = (response: unknown) => {
      const ref = (response as { $ref?: string } | undefined)?.$ref;
      return ref ? doc.components.responses[ref.split('/').at(-1)!] : (response as { headers?: object });
    };
    for (const [path, method] of [
      ['/v2/deployments/{deployment_id}/revisions/{revision_id}/logs', 'get'],
      ['/v2/listeners/{listener_id}/desired-state', 'get'],
      ['/v2/auth/wait/{auth_id}', 'get'],
    ] as const) {
      const response = resolve(doc.paths[path]![method]!.responses['429']);
      assert.ok(response, `${method} ${path} documents 429`);
      assert.ok(response.headers && 'Retry-After' in response.headers, `${method} ${path}: 429 has Retry-After`);
    }
    assert.equal(doc.paths['/v2/deployments']!.get!.responses['429'], undefined);
  });
});
