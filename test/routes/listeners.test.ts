/** Listeners: create, read, page, patch, delete; (workspace, compute_id) is unique; compute_type and compute_id never change. */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { createTestClock } from '../support/clock.ts';
import { client, createTestApp, type TestApp, newWorkspace } from '../support/harness.ts';

let t: TestApp;
let api: ReturnType<typeof client>;
/** The service's clock: the state test moves it past the 90 s instead of dating last_seen_at back. */
const clock = createTestClock();

before(async () => {
  t = await createTestApp({}, { now: clock.now });
  api = client(t.app);
});
after(() => t.close());

const MISSING = '00000000-0000-4000-8000-000000000000';
const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

async function createListener(computeId: string, extra: Record<string, unknown> = {}) {
  const res = await api.post('/v2/listeners', { compute_type: 'k8s', compute_id: computeId, ...extra });
  assert.equal(res.status, 201, JSON.stringify(res.body));
  return res.body as {
    id: string;
    compute_id: string;
    compute_config: { k8s_namespaces: string[] };
    version: string | null;
    created_at: string;
    updated_at: string;
  };
}

function onListener(name: string, listenerId: string, namespace?: string) {
  return {
    name,
    source: 'external_container',
    source_config: { listener_id: listenerId, ...(namespace ? { listener_config: { k8s_namespace: namespace } } : {}) },
    source_revision_config: { image_uri: 'registry.example.com/agent:1.0.0' },
  };
}

describe('create and read', () => {
  test('create answers 201 with every field, namespaces defaulting to ["default"]', async () => {
    const res = await api.post('/v2/listeners', { compute_type: 'k8s', compute_id: 'prod-eu-1', version: '0.3.1' });
    assert.equal(res.status, 201);
    const l = res.body;
    assert.equal(l.compute_type, 'k8s');
    assert.equal(l.compute_id, 'prod-eu-1');
    assert.deepEqual(l.compute_config, { k8s_namespaces: ['default'] });
    assert.equal(l.version, '0.3.1');
    assert.match(l.id, /^[0-9a-f-]{36}$/);
    assert.match(l.created_at, ISO);
    assert.match(l.updated_at, ISO);
    // What its agent reported (docs/listener-protocol.md): nothing yet.
    assert.equal(l.state, 'never_seen');
    assert.equal(l.last_seen_at, null);
    assert.equal(l.watched_namespaces, null);
    assert.equal(l.namespaces_not_watched, null);
    assert.equal(l.agent_version, null);
    assert.equal(l.agent_message, null);

    const got = await api.get(`/v2/listeners/${l.id}`);
    assert.equal(got.status, 200);
    assert.deepEqual(got.body, l);
  });

  test('given namespaces are kept in order; a null compute_config means the default', async () => {
    const l = await createListener('ns-given', { compute_config: { k8s_namespaces: ['agents', 'batch'] } });
    assert.deepEqual(l.compute_config.k8s_namespaces, ['agents', 'batch']);
    const d = await createListener('ns-null', { compute_config: null });
    assert.deepEqual(d.compute_config.k8s_namespaces, ['default']);
  });

  test('compute_type other than k8s is 422 and creates nothing', async () => {
    for (const computeType of ['ecs', 'K8S', '', 'nomad']) {
      const res = await api.post('/v2/listeners', {
        compute_type: computeType,
        compute_id: `bad-type-${computeType || 'empty'}`,
      });
      assert.equal(res.status, 422, `${computeType} -> ${res.status}`);
      assert.deepEqual(res.body.detail[0].loc, ['body', 'compute_type']);
    }
    const ids = (await api.get('/v2/listeners?limit=100')).body.resources.map(
      (l: { compute_id: string }) => l.compute_id,
    );
    assert.ok(!ids.some((id: string) => id.startsWith('bad-type-')));
  });

  test('an unknown id is 404 with the contract message', async () => {
    const res = await api.get(`/v2/listeners/${MISSING}`);
    assert.equal(res.status, 404);
    assert.equal(res.body.detail, `Listener ID ${MISSING} not found.`);
  });

  test('a duplicate compute_id in the workspace is 409; another workspace may use it', async () => {
    await createListener('shared-name');
    const again = await api.post('/v2/listeners', { compute_type: 'k8s', compute_id: 'shared-name', version: 'other' });
    assert.equal(again.status, 409);
    assert.match(again.body.detail, /shared-name/);

    const ws = await newWorkspace(t, 'second');
    const other = await ws.api.post('/v2/listeners', {
      compute_type: 'k8s',
      compute_id: 'shared-name',
    });
    assert.equal(other.status, 201);
    const mine = (await api.get('/v2/listeners?limit=100')).body.resources.filter(
      (l: { compute_id: string }) => l.compute_id === 'shared-name',
    );
    assert.equal(mine.length, 1);
    assert.equal(mine[0].version, null, 'the refused duplicate changed nothing');
  });

  test('concurrent creates of one compute_id give exactly one 201', async () => {
    const results = await Promise.all(
      Array.from({ length: 8 }, (_, i) =>
        api.post('/v2/listeners', { compute_type: 'k8s', compute_id: 'racing-cluster', version: String(i) }),
      ),
    );
    assert.deepEqual(results.map((r) => r.status).sort(), [201, 409, 409, 409, 409, 409, 409, 409]);
    const listed = (await api.get('/v2/listeners?limit=100')).body.resources.filter(
      (l: { compute_id: string }) => l.compute_id === 'racing-cluster',
    );
    assert.equal(listed.length, 1);
    const winner = results.find((r) => r.status === 201)!;
    assert.equal(listed[0].id, winner.body.id);
  });
});

describe('list', () => {
  test('newest first, paged with limit and offset; offset in the response is request offset + count', async () => {
    // A workspace of its own, so the count is exact.
    const p = (await newWorkspace(t, 'paging')).api;
    const made: string[] = [];
    for (let i = 0; i < 7; i++) {
      const res = await p.post('/v2/listeners', { compute_type: 'k8s', compute_id: `page-${i}` });
      assert.equal(res.status, 201);
      made.push(res.body.id);
    }
    const all = await p.get('/v2/listeners?limit=100');
    assert.equal(all.status, 200);
    assert.deepEqual(
      all.body.resources.map((l: { id: string }) => l.id),
      [...made].reverse(),
      'newest first',
    );
    assert.equal(all.body.offset, 7);

    const first = await p.get('/v2/listeners?limit=3');
    assert.deepEqual(
      first.body.resources.map((l: { compute_id: string }) => l.compute_id),
      ['page-6', 'page-5', 'page-4'],
    );
    assert.equal(first.body.offset, 3);
    const second = await p.get(`/v2/listeners?limit=3&offset=${first.body.offset}`);
    assert.deepEqual(
      second.body.resources.map((l: { compute_id: string }) => l.compute_id),
      ['page-3', 'page-2', 'page-1'],
    );
    assert.equal(second.body.offset, 6);
    const third = await p.get(`/v2/listeners?limit=3&offset=${second.body.offset}`);
    assert.deepEqual(
      third.body.resources.map((l: { compute_id: string }) => l.compute_id),
      ['page-0'],
    );
    assert.equal(third.body.offset, 7);
    const past = await p.get('/v2/listeners?limit=3&offset=7');
    assert.deepEqual(past.body.resources, []);
    assert.equal(past.body.offset, 7);
    const fromTwo = await p.get('/v2/listeners?limit=2&offset=2');
    assert.deepEqual(
      fromTwo.body.resources.map((l: { compute_id: string }) => l.compute_id),
      ['page-4', 'page-3'],
    );
    assert.equal(fromTwo.body.offset, 4);
  });

  test('the default page size is 20', async () => {
    const ws = await newWorkspace(t, 'default-page');
    const p = ws.api;
    for (let i = 0; i < 22; i++)
      assert.equal((await p.post('/v2/listeners', { compute_type: 'k8s', compute_id: `d-${i}` })).status, 201);
    const res = await p.get('/v2/listeners');
    assert.equal(res.body.resources.length, 20);
    assert.equal(res.body.offset, 20);
  });
});

describe('patch', () => {
  test('version and namespaces change; updated_at moves, created_at does not', async () => {
    const l = await createListener('patchable', { version: '1.0.0' });
    // Both times are the service's clock's, as every other time the listener shows (its state).
    assert.ok(Math.abs(Date.parse(l.created_at) - clock.now().getTime()) < 60_000, "created at the clock's time");
    assert.equal(l.updated_at, l.created_at);
    clock.advance(5 * 60_000);
    const res = await api.patch(`/v2/listeners/${l.id}`, {
      version: '1.1.0',
      compute_config: { k8s_namespaces: ['agents', 'default'] },
    });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.equal(res.body.version, '1.1.0');
    assert.deepEqual(res.body.compute_config.k8s_namespaces, ['agents', 'default']);
    assert.equal(res.body.created_at, l.created_at);
    assert.ok(
      Date.parse(res.body.updated_at) - Date.parse(l.updated_at) >= 5 * 60_000,
      `updated_at moved with the clock: ${l.updated_at} then ${res.body.updated_at}`,
    );
    assert.equal(res.body.compute_id, 'patchable');

    const versionOnly = await api.patch(`/v2/listeners/${l.id}`, { version: '1.2.0' });
    assert.equal(versionOnly.status, 200);
    assert.deepEqual(
      versionOnly.body.compute_config.k8s_namespaces,
      ['agents', 'default'],
      'namespaces kept when not given',
    );
    const got = await api.get(`/v2/listeners/${l.id}`);
    assert.equal(got.body.version, '1.2.0');
  });

  test('compute_id and compute_type cannot change (400); the same value is fine (200)', async () => {
    const l = await createListener('fixed-id', { version: 'v1' });
    const otherId = await api.patch(`/v2/listeners/${l.id}`, { compute_id: 'renamed', version: 'v2' });
    assert.equal(otherId.status, 400);
    assert.match(otherId.body.detail, /compute_id/);
    const otherType = await api.patch(`/v2/listeners/${l.id}`, { compute_type: 'ecs', version: 'v2' });
    assert.equal(otherType.status, 400);
    assert.match(otherType.body.detail, /compute_type/);
    const unchanged = await api.get(`/v2/listeners/${l.id}`);
    assert.equal(unchanged.body.compute_id, 'fixed-id');
    assert.equal(unchanged.body.version, 'v1', 'refused patches changed nothing');

    const same = await api.patch(`/v2/listeners/${l.id}`, {
      compute_id: 'fixed-id',
      compute_type: 'k8s',
      version: 'v3',
    });
    assert.equal(same.status, 200, JSON.stringify(same.body));
    assert.equal(same.body.version, 'v3');
  });

  test('an unknown listener is 404', async () => {
    const res = await api.patch(`/v2/listeners/${MISSING}`, { version: 'x' });
    assert.equal(res.status, 404);
    assert.equal(res.body.detail, `Listener ID ${MISSING} not found.`);
  });

  test('removing a namespace a deployment uses is 409; keeping it is fine', async () => {
    const l = await createListener('ns-in-use', { compute_config: { k8s_namespaces: ['agents', 'batch'] } });
    const d = await api.post('/v2/deployments', onListener('uses-batch', l.id, 'batch'));
    assert.equal(d.status, 201, JSON.stringify(d.body));
    const removed = await api.patch(`/v2/listeners/${l.id}`, { compute_config: { k8s_namespaces: ['agents'] } });
    assert.equal(removed.status, 409);
    assert.match(removed.body.detail, /batch/);
    assert.deepEqual((await api.get(`/v2/listeners/${l.id}`)).body.compute_config.k8s_namespaces, ['agents', 'batch']);

    const kept = await api.patch(`/v2/listeners/${l.id}`, { compute_config: { k8s_namespaces: ['batch', 'more'] } });
    assert.equal(kept.status, 200, JSON.stringify(kept.body));
    assert.deepEqual(kept.body.compute_config.k8s_namespaces, ['batch', 'more']);
  });

  test('a deployment on the default namespace holds it too', async () => {
    const l = await createListener('default-ns-in-use');
    const d = await api.post('/v2/deployments', onListener('uses-default', l.id));
    assert.equal(d.status, 201, JSON.stringify(d.body));
    assert.equal(d.body.source_config.listener_config.k8s_namespace, 'default');
    const removed = await api.patch(`/v2/listeners/${l.id}`, { compute_config: { k8s_namespaces: ['elsewhere'] } });
    assert.equal(removed.status, 409);
  });
});

describe('delete', () => {
  test('delete answers 204 with no body, then the listener is 404 and unlisted', async () => {
    const l = await createListener('short-lived');
    const res = await api.delete(`/v2/listeners/${l.id}`);
    assert.equal(res.status, 204);
    assert.equal(res.body, undefined);
    assert.equal((await api.get(`/v2/listeners/${l.id}`)).status, 404);
    assert.equal((await api.delete(`/v2/listeners/${l.id}`)).status, 404);
    const ids = (await api.get('/v2/listeners?limit=100')).body.resources.map((x: { id: string }) => x.id);
    assert.ok(!ids.includes(l.id));
    // Its compute_id is free again.
    await createListener('short-lived');
  });

  test('delete while a deployment uses the listener is 409; after the deployment goes it is 204', async () => {
    const l = await createListener('busy');
    const d = await api.post('/v2/deployments', onListener('keeps-busy', l.id));
    assert.equal(d.status, 201, JSON.stringify(d.body));
    const refused = await api.delete(`/v2/listeners/${l.id}`);
    assert.equal(refused.status, 409);
    assert.match(refused.body.detail, /keeps-busy/);
    assert.equal((await api.get(`/v2/listeners/${l.id}`)).status, 200, 'still there');

    assert.equal((await api.delete(`/v2/deployments/${d.body.id}`)).status, 204);
    assert.equal((await api.delete(`/v2/listeners/${l.id}`)).status, 204);
  });

  test('a deployment deleted while its listener is connected holds the listener until the listener confirms', async () => {
    const l = await createListener('confirming');
    const d = await api.post('/v2/deployments', onListener('being-removed', l.id));
    assert.equal(d.status, 201, JSON.stringify(d.body));
    const credential = (await api.post(`/v2/listeners/${l.id}/credentials`, {})).body.credential;
    const asListener = client(t.app, null);
    const auth = { authorization: `Bearer ${credential}` };
    assert.equal(
      (await asListener.post(`/v2/listeners/${l.id}/heartbeat`, { version: '0.1.0', namespaces: ['default'] }, auth))
        .status,
      200,
    );

    assert.equal((await api.delete(`/v2/deployments/${d.body.id}`)).status, 204);
    assert.equal((await api.get(`/v2/deployments/${d.body.id}`)).body.status, 'AWAITING_DELETE');
    const refused = await api.delete(`/v2/listeners/${l.id}`);
    assert.equal(refused.status, 409);
    assert.match(refused.body.detail, /being-removed/);

    assert.equal(
      (await asListener.post(`/v2/listeners/${l.id}/deletions`, { deployment_id: d.body.id }, auth)).status,
      204,
    );
    assert.equal((await api.get(`/v2/deployments/${d.body.id}`)).status, 404);
    assert.equal((await api.delete(`/v2/listeners/${l.id}`)).status, 204);
  });
});

describe('state', () => {
  test('list and get show the agent: connected after a heartbeat, stale after 90 s without one', async () => {
    const l = await createListener('heartbeats', { compute_config: { k8s_namespaces: ['agents', 'batch'] } });
    const credential = (await api.post(`/v2/listeners/${l.id}/credentials`, {})).body.credential;
    const beat = await client(t.app, null).post(
      `/v2/listeners/${l.id}/heartbeat`,
      { version: '1.2.3', namespaces: ['agents', 'batch'] },
      { authorization: `Bearer ${credential}` },
    );
    assert.equal(beat.status, 200, JSON.stringify(beat.body));
    const listed = (await api.get('/v2/listeners?limit=100')).body.resources.find((x: { id: string }) => x.id === l.id);
    assert.equal(listed.state, 'connected');
    assert.match(listed.last_seen_at, ISO);
    assert.deepEqual(listed.watched_namespaces, ['agents', 'batch']);
    assert.deepEqual(listed.namespaces_not_watched, []);
    assert.equal(listed.agent_version, '1.2.3');
    assert.equal(listed.version, null, "the registered version is the user's, apart from the agent's");

    clock.advance(2 * 60_000);
    assert.equal((await api.get(`/v2/listeners/${l.id}`)).body.state, 'stale', 'two minutes without a heartbeat');
    const patched = await api.patch(`/v2/listeners/${l.id}`, { version: '2' });
    assert.equal(patched.body.state, 'stale', 'the patch answer shows it too');
  });
});
