/**
 * The desired state (docs/listener-protocol.md, "Desired state"): what a listener reads, its target
 * revision rule, its ETag, and the long-poll over real HTTP, woken through PostgreSQL by a change made
 * on another replica, or answered 304 when nothing changed.
 */
import assert from 'node:assert/strict';
import { after, before, describe } from 'node:test';
import { startReplica } from '../support/harness.ts';
import { test } from '../support/limited-test.ts';
import { pause } from '../support/wait.ts';
import {
  agent,
  createProtocolFixture,
  fetchDesiredState,
  newDeployment,
  newListener,
  type ProtocolFixture,
} from './protocol-fixture.ts';

let f: ProtocolFixture;
before(async () => {
  f = await createProtocolFixture();
});
after(() => f.close());

/** Lets a long-poll just sent reach its wait (nothing observable says it did; without it the test still passes, by the first read). */
const pollWaits = () => pause(300, 'the long-poll reaches its wait');

/**
 * The answer of `poll`, which must come before `control` ends: a long-poll of a listener nothing changed
 * for, answered only when its (shorter) wait runs out. So the answer was woken, not read at the end of a
 * wait, and no test measures how long it took.
 */
async function answeredBefore<T>(poll: Promise<T>, control: Promise<{ status: number }>): Promise<T> {
  const first = await Promise.race([poll.then((value) => ({ value })), control.then(() => null)]);
  assert.ok(first, 'a poll of an unchanged listener, with a shorter wait, was answered first');
  return first.value;
}

/** A long-poll of a listener of its own that nothing changes: 304 when its `wait` runs out. */
async function controlPoll(wait: number) {
  const l = await newListener(f.api);
  const { etag } = await fetchDesiredState(f, l);
  return fetchDesiredState(f, l, { wait, etag: etag! });
}

describe('the state', () => {
  test('every deployment of the listener with its revision: image, decrypted secrets, references, resource spec, namespace', async () => {
    const l = await newListener(f.api, ['agents', 'batch']);
    const first = await newDeployment(f.api, l.id, {
      source_config: {
        listener_id: l.id,
        listener_config: { k8s_namespace: 'batch' },
        custom_url: 'https://agent.example.com',
        resource_spec: { min_scale: 2, cpu: 0.5, memory_mb: 512, labels: { team: 'support' } },
      },
      secrets: [{ name: 'OPENAI_API_KEY', value: 'sk-secret-1' }],
      secret_references: [{ name: 'DB_PASSWORD', secret_name: 'db', secret_key: 'password' }],
    });
    const second = await newDeployment(f.api, l.id);
    await newDeployment(f.api, (await newListener(f.api)).id);

    const res = await agent(f, l).desiredState();
    assert.equal(res.status, 200);
    assert.match(String(res.headers.etag), /^"[A-Za-z0-9_-]+"$/);
    assert.equal(res.headers['cache-control'], 'no-store');
    assert.deepEqual(res.body, {
      protocol: 1,
      listener_id: l.id,
      deployments: [
        {
          deployment_id: first.id,
          name: first.name,
          namespace: 'batch',
          delete: false,
          custom_url: 'https://agent.example.com',
          resource_spec: { min_scale: 2, cpu: 0.5, memory_mb: 512, labels: { team: 'support' } },
          secret_references: [{ name: 'DB_PASSWORD', secret_name: 'db', secret_key: 'password' }],
          revision: {
            id: first.revisionId,
            number: 1,
            status: 'QUEUED',
            image_uri: 'ghcr.io/acme/agent:1.0.0',
            secrets: [{ name: 'OPENAI_API_KEY', value: 'sk-secret-1' }],
            secret_references: [{ name: 'DB_PASSWORD', secret_name: 'db', secret_key: 'password' }],
            resource_spec: { min_scale: 2, cpu: 0.5, memory_mb: 512, labels: { team: 'support' } },
          },
          endpoints: [],
        },
        {
          deployment_id: second.id,
          name: second.name,
          namespace: 'agents',
          delete: false,
          custom_url: null,
          resource_spec: null,
          secret_references: null,
          revision: {
            id: second.revisionId,
            number: 1,
            status: 'QUEUED',
            image_uri: 'ghcr.io/acme/agent:1.0.0',
            secrets: [],
            secret_references: null,
            resource_spec: null,
          },
          endpoints: [],
        },
      ],
    });
  });

  test('a listener without deployments has an empty list', async () => {
    const l = await newListener(f.api);
    const res = await agent(f, l).desiredState();
    assert.deepEqual(res.body, { protocol: 1, listener_id: l.id, deployments: [] });
  });

  test('the target revision: the latest unless it failed or was interrupted, then the active one, else none', async () => {
    const l = await newListener(f.api);
    const a = agent(f, l);
    const d = await newDeployment(f.api, l.id);
    const target = async () =>
      (await a.desiredState()).body.deployments[0].revision as { id: string; status: string; image_uri: string } | null;

    assert.equal((await a.report({ revision_id: d.revisionId, status: 'DEPLOYED' })).body.applied, true);
    assert.deepEqual(
      { id: (await target())!.id, status: (await target())!.status },
      { id: d.revisionId, status: 'DEPLOYED' },
    );

    const patched = await f.api.patch(`/v2/deployments/${d.id}`, {
      source_revision_config: { image_uri: 'ghcr.io/acme/agent:2.0.0' },
    });
    const second = patched.body.latest_revision_id as string;
    assert.equal((await target())!.id, second, 'a new revision is the target at once');
    assert.equal((await target())!.image_uri, 'ghcr.io/acme/agent:2.0.0');

    await a.report({
      revision_id: second,
      status: 'DEPLOY_FAILED',
      failure_reason: 'image_pull_failed',
      message: 'not found',
    });
    assert.equal((await target())!.id, d.revisionId, 'a failed latest revision: back to the active one');

    const third = (
      await f.api.patch(`/v2/deployments/${d.id}`, {
        source_revision_config: { image_uri: 'ghcr.io/acme/agent:3.0.0' },
      })
    ).body.latest_revision_id as string;
    assert.equal((await target())!.id, third);
    assert.equal((await f.api.post(`/v2/deployments/${d.id}/revisions/${third}/interrupt`, {})).status, 200);
    assert.equal((await target())!.id, d.revisionId, 'an interrupted latest revision: the active one');

    const never = await newDeployment(f.api, l.id);
    await a.report({ revision_id: never.revisionId, status: 'DEPLOY_FAILED', failure_reason: 'invalid_manifest' });
    const state = (await a.desiredState()).body.deployments.find(
      (x: { deployment_id: string }) => x.deployment_id === never.id,
    );
    assert.equal(state.revision, null, 'nothing ever deployed and the only revision failed: nothing should run');
  });

  test('a desired-state request counts as the listener being seen', async () => {
    const l = await newListener(f.api);
    assert.equal((await f.api.get(`/v2/listeners/${l.id}`)).body.state, 'never_seen');
    await agent(f, l).desiredState();
    const seen = (await f.api.get(`/v2/listeners/${l.id}`)).body;
    assert.equal(seen.state, 'connected');
    assert.ok(Date.now() - Date.parse(seen.last_seen_at) < 60_000);
  });

  test('wait outside 0..60 is 422', async () => {
    const l = await newListener(f.api);
    for (const wait of ['-1', '61', 'soon']) {
      const res = await agent(f, l).desiredState(`?wait=${wait}`);
      assert.equal(res.status, 422, wait);
      assert.deepEqual(res.body.detail[0].loc, ['query', 'wait']);
    }
  });
});

describe('ETag', () => {
  test('stable while nothing changes; If-None-Match with it is 304 without a body (also weak, or in a list)', async () => {
    const l = await newListener(f.api);
    await newDeployment(f.api, l.id);
    const a = agent(f, l);
    const first = await a.desiredState();
    const again = await a.desiredState();
    assert.equal(again.headers.etag, first.headers.etag);
    const etag = String(first.headers.etag);
    for (const header of [etag, `W/${etag}`, `"something-else", ${etag}`]) {
      const res = await a.desiredState('', { 'if-none-match': header });
      assert.equal(res.status, 304, header);
      assert.equal(res.body, undefined);
      assert.equal(res.headers.etag, etag);
    }
    const other = await a.desiredState('', { 'if-none-match': '"not-the-current-one"' });
    assert.equal(other.status, 200);
    assert.equal(other.headers.etag, etag);
  });

  test('changes with anything in the body: a new revision, a secret, a custom_url, a status, a deletion', async () => {
    const l = await newListener(f.api);
    const d = await newDeployment(f.api, l.id);
    const a = agent(f, l);
    const seen = new Set<string>();
    const etag = async () => {
      const value = String((await a.desiredState()).headers.etag);
      assert.ok(!seen.has(value), `a new ETag after each change, got ${value} again`);
      seen.add(value);
    };
    await etag();
    await f.api.patch(`/v2/deployments/${d.id}`, { source_config: { custom_url: 'https://a.example.com' } });
    await etag();
    await f.api.patch(`/v2/deployments/${d.id}`, { secrets: [{ name: 'TOKEN', value: 'one' }] });
    await etag();
    const latest = (await f.api.get(`/v2/deployments/${d.id}`)).body.latest_revision_id;
    await a.report({ revision_id: latest, status: 'DEPLOYING' });
    await etag();
    await f.api.delete(`/v2/deployments/${d.id}`);
    await etag();
    const state = (await a.desiredState()).body.deployments[0];
    assert.equal(state.delete, true, 'a deleted deployment stays in the state, marked delete');
  });
});

describe('long-poll over real HTTP', () => {
  test('a change made through another replica answers a waiting long-poll at once with the new state', async () => {
    const l = await newListener(f.api);
    const d = await newDeployment(f.api, l.id);
    const first = await fetchDesiredState(f, l);
    assert.equal(first.status, 200);
    assert.ok(first.etag);

    const waiting = fetchDesiredState(f, l, { wait: 60, etag: first.etag });
    const control = controlPoll(5);
    await pollWaits();
    // Through the inject() app: another app instance, connected to PostgreSQL on its own.
    const patched = await f.api.patch(`/v2/deployments/${d.id}`, {
      source_revision_config: { image_uri: 'ghcr.io/acme/agent:1.1.0' },
    });
    assert.equal(patched.status, 200);
    // Woken by the change feed, not a re-read (the safety re-read comes after 7.5 s at the earliest).
    const answered = await answeredBefore(waiting, control);
    assert.equal(answered.status, 200);
    assert.notEqual(answered.etag, first.etag);
    assert.equal(answered.body.deployments[0].revision.id, patched.body.latest_revision_id);
    assert.equal(answered.body.deployments[0].revision.image_uri, 'ghcr.io/acme/agent:1.1.0');
  });

  test('a custom_url changed in place (no new revision) wakes it too', async () => {
    const l = await newListener(f.api);
    const d = await newDeployment(f.api, l.id);
    const first = await fetchDesiredState(f, l);
    const waiting = fetchDesiredState(f, l, { wait: 60, etag: first.etag! });
    const control = controlPoll(5);
    await pollWaits();
    assert.equal(
      (await f.api.patch(`/v2/deployments/${d.id}`, { source_config: { custom_url: 'https://agent.example.com/' } }))
        .status,
      200,
    );
    const answered = await answeredBefore(waiting, control);
    assert.equal(answered.status, 200);
    assert.equal(answered.body.deployments[0].custom_url, 'https://agent.example.com/');
  });

  test('a new deployment on the listener wakes it', async () => {
    const l = await newListener(f.api);
    const first = await fetchDesiredState(f, l);
    assert.deepEqual(first.body.deployments, []);
    const waiting = fetchDesiredState(f, l, { wait: 60, etag: first.etag! });
    const control = controlPoll(5);
    await pollWaits();
    const d = await newDeployment(f.api, l.id);
    const answered = await answeredBefore(waiting, control);
    assert.equal(answered.status, 200);
    assert.deepEqual(
      answered.body.deployments.map((x: { deployment_id: string }) => x.deployment_id),
      [d.id],
    );
  });

  test('nothing changes: 304 with the same ETag when the wait runs out; changes of other listeners do not answer it', async () => {
    const l = await newListener(f.api);
    await newDeployment(f.api, l.id);
    const other = await newListener(f.api);
    const theirs = await newDeployment(f.api, other.id);
    const first = await fetchDesiredState(f, l);
    // Long enough that the other listener's change and its read surely come before it runs out.
    const waiting = fetchDesiredState(f, l, { wait: 10, etag: first.etag! });
    let answeredYet = false;
    void waiting.then(() => (answeredYet = true));
    await pollWaits();
    await f.api.patch(`/v2/deployments/${theirs.id}`, {
      source_revision_config: { image_uri: 'ghcr.io/acme/other:2' },
    });
    // The other listener's own poll sees its change at once; this one's goes on waiting.
    const theirState = await fetchDesiredState(f, other);
    assert.equal(theirState.body.deployments[0].revision.image_uri, 'ghcr.io/acme/other:2');
    assert.equal(answeredYet, false, "another listener's change answered the poll");
    const answered = await waiting;
    assert.equal(answered.status, 304);
    assert.equal(answered.etag, first.etag);
    assert.equal(answered.body, undefined);
  });

  test('an old ETag is answered at once with the current state, however long the wait', async () => {
    const l = await newListener(f.api);
    const d = await newDeployment(f.api, l.id);
    const first = await fetchDesiredState(f, l);
    await f.api.patch(`/v2/deployments/${d.id}`, { source_revision_config: { image_uri: 'ghcr.io/acme/agent:9' } });
    const control = controlPoll(2);
    const res = await answeredBefore(fetchDesiredState(f, l, { wait: 60, etag: first.etag! }), control);
    assert.equal(res.status, 200);
    assert.equal(res.body.deployments[0].revision.image_uri, 'ghcr.io/acme/agent:9');
  });

  test('one long-poll per listener serves many deployments; many listeners wait at once, each woken by its own change', async () => {
    const listeners = await Promise.all(Array.from({ length: 5 }, () => newListener(f.api)));
    const deployments = [];
    for (const l of listeners) deployments.push([await newDeployment(f.api, l.id), await newDeployment(f.api, l.id)]);
    const etags = await Promise.all(listeners.map(async (l) => (await fetchDesiredState(f, l)).etag!));
    const waiting = listeners.map((l, i) => fetchDesiredState(f, l, { wait: i === 2 ? 60 : 5, etag: etags[i]! }));
    await pollWaits();
    await f.api.patch(`/v2/deployments/${deployments[2]![1]!.id}`, {
      source_revision_config: { image_uri: 'ghcr.io/acme/agent:2' },
    });
    // The changed one answers while the others still wait (theirs are the shorter waits).
    await answeredBefore(waiting[2]!, waiting[0]!);
    const answers = await Promise.all(waiting);
    assert.deepEqual(
      answers.map((a) => a.status),
      [304, 304, 200, 304, 304],
    );
  });

  test('a client that goes away, and a closing server, end the wait', async () => {
    const l = await newListener(f.api);
    const first = await fetchDesiredState(f, l);
    const controller = new AbortController();
    const abandoned = fetchDesiredState(f, l, { wait: 60, etag: first.etag!, signal: controller.signal });
    await pollWaits();
    controller.abort();
    await assert.rejects(abandoned);

    // A replica of its own, closed while a long-poll waits: the poll is answered, the close does not
    // wait for the poll's wait to run out (it ends before a shorter wait of the live replica's does).
    const { app: replica, url, changes: feed } = await startReplica(f.t);
    try {
      const waiting = fetchDesiredState(f, l, { wait: 60, etag: first.etag!, url });
      const control = controlPoll(5);
      await pollWaits();
      await answeredBefore(replica.close(), control);
      const res = await waiting;
      assert.equal(res.status, 304);
      assert.equal(res.etag, first.etag);
    } finally {
      await feed.close();
    }
  });
});
