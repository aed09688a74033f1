/**
 * API keys and tenancy (docs/api.md, "Authentication and tenancy"): who may call, which workspace a
 * request acts in, and that two workspaces never see each other's resources.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { ADMIN_KEY, client, createTestApp, type TestApp, newWorkspace, newWorkspaceAdmin } from '../support/harness.ts';

let t: TestApp;
let api: ReturnType<typeof client>;

before(async () => {
  t = await createTestApp();
  api = client(t.app);
});
after(() => t.close());

const MISSING = '00000000-0000-4000-8000-000000000000';
const container = (name: string) => ({
  name,
  source: 'internal_container',
  source_revision_config: { image_uri: 'registry.example.com/agent:1.0.0' },
});

describe('API keys', () => {
  test('a request without a key is 401 in the contract shape', async () => {
    const res = await client(t.app, null).get('/v2/deployments');
    assert.equal(res.status, 401);
    assert.equal(typeof res.body.detail, 'string');
  });

  test('an unknown key is 401, whichever header carries it', async () => {
    assert.equal((await client(t.app, 'slw_not_a_real_key_at_all_000000').get('/v2/deployments')).status, 401);
    const bearer = await client(t.app, null).get('/v2/deployments', {
      authorization: 'Bearer slw_not_a_real_key_at_all_000000',
    });
    assert.equal(bearer.status, 401);
  });

  test('X-Api-Key and Authorization: Bearer both authenticate', async () => {
    assert.equal((await client(t.app).get('/v2/deployments')).status, 200);
    const bearer = await client(t.app, null).get('/v2/deployments', { authorization: `Bearer ${ADMIN_KEY}` });
    assert.equal(bearer.status, 200);
  });

  test('a created key is shown once, works, is never listed, and is stored hashed', async () => {
    const created = await api.post('/v2/api-keys', { name: 'ci robot', role: 'member' });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const key: string = created.body.key;
    assert.equal(typeof key, 'string');
    assert.ok(key.length >= 32);
    assert.equal(created.body.workspace_id, t.workspaceId);
    assert.equal(created.body.role, 'member');

    assert.equal((await client(t.app, key).get('/v2/deployments')).status, 200);

    const listed = await api.get('/v2/api-keys?limit=100');
    assert.equal(listed.status, 200);
    const item = listed.body.resources.find((k: { id: string }) => k.id === created.body.id);
    assert.ok(item, 'the new key is listed');
    assert.equal(item.key, undefined);
    assert.ok(!JSON.stringify(listed.body).includes(key), 'no listed field holds the key');
    assert.ok(key.startsWith(item.key_prefix), 'the prefix tells keys apart');

    const rows = await t.database.pool.query('select t::text as row from api_keys t');
    assert.ok(rows.rows.length >= 3);
    for (const { row } of rows.rows) {
      assert.ok(!row.includes(key), 'no api_keys row holds the key in plaintext');
      assert.ok(!row.includes(ADMIN_KEY), 'nor the bootstrap key');
      assert.ok(!row.includes(t.orgKey), 'nor the first-start key');
    }
  });

  test('a revoked key is 401 from then on', async () => {
    const created = await api.post('/v2/api-keys', { name: 'short-lived', role: 'member' });
    assert.equal(created.status, 201);
    const key: string = created.body.key;
    assert.equal((await client(t.app, key).get('/v2/listeners')).status, 200);
    const revoked = await api.delete(`/v2/api-keys/${created.body.id}`);
    assert.equal(revoked.status, 204);
    assert.equal((await client(t.app, key).get('/v2/listeners')).status, 401);
    const bearer = await client(t.app, null).get('/v2/listeners', { authorization: `Bearer ${key}` });
    assert.equal(bearer.status, 401);
    const listed = await api.get('/v2/api-keys?limit=100');
    assert.ok(
      listed.body.resources.find((k: { id: string; revoked_at: string | null }) => k.id === created.body.id)
        ?.revoked_at,
    );
    assert.equal(
      (await api.delete(`/v2/api-keys/${created.body.id}`)).status,
      404,
      'revoking twice finds nothing to revoke',
    );
  });

  test('admin-only endpoints refuse a member key with 403 and change nothing', async () => {
    const member = await api.post('/v2/api-keys', { name: 'member', role: 'member' });
    assert.equal(member.status, 201);
    const m = client(t.app, member.body.key);
    const keysBefore = (await api.get('/v2/api-keys?limit=100')).body.resources.length;
    const workspacesBefore = (await client(t.app, t.orgKey).get('/v2/workspaces?limit=100')).body.resources.length;

    const calls = [
      await m.post('/v2/workspaces', { name: 'not-allowed' }),
      await m.get('/v2/workspaces'),
      await m.post('/v2/api-keys', { name: 'escalation', role: 'admin' }),
      await m.get('/v2/api-keys'),
      await m.delete(`/v2/api-keys/${member.body.id}`),
    ];
    for (const res of calls) {
      assert.equal(res.status, 403, JSON.stringify(res.body));
      assert.equal(typeof res.body.detail, 'string');
    }
    assert.equal((await api.get('/v2/api-keys?limit=100')).body.resources.length, keysBefore);
    assert.equal(
      (await client(t.app, t.orgKey).get('/v2/workspaces?limit=100')).body.resources.length,
      workspacesBefore,
    );
    assert.equal((await m.get('/v2/deployments')).status, 200, 'the member key still works');
  });
});

describe('workspace selection', () => {
  let second: string;
  let secondKey: string;

  test('an organization key with a single workspace needs no X-Tenant-Id', async () => {
    const res = await client(t.app, t.orgKey).get('/v2/listeners');
    assert.equal(res.status, 200);
  });

  test('a workspace admin key can neither make nor list workspaces', async () => {
    const made = await api.post('/v2/workspaces', { name: 'from-workspace-key' });
    assert.equal(made.status, 403);
    assert.match(made.body.detail, /organization API key/);
    assert.equal((await api.get('/v2/workspaces')).status, 403);
    const names = (await client(t.app, t.orgKey).get('/v2/workspaces?limit=100')).body.resources.map(
      (w: { name: string }) => w.name,
    );
    assert.ok(!names.includes('from-workspace-key'));
  });

  test('a second workspace is made by an organization admin key', async () => {
    const created = await client(t.app, t.orgKey).post('/v2/workspaces', { name: 'team-b' });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    assert.equal(created.body.organization_id, t.organizationId);
    second = created.body.id;
    const duplicate = await client(t.app, t.orgKey).post('/v2/workspaces', { name: 'team-b' });
    assert.equal(duplicate.status, 409);
    const key = await client(t.app, t.orgKey).post('/v2/api-keys', {
      name: 'team-b admin',
      role: 'admin',
      workspace_id: second,
    });
    assert.equal(key.status, 201, JSON.stringify(key.body));
    assert.equal(key.body.workspace_id, second);
    secondKey = key.body.key;
  });

  test('an organization key without X-Tenant-Id now gets 403 requires workspace specification', async () => {
    const res = await client(t.app, t.orgKey).get('/v2/listeners');
    assert.equal(res.status, 403);
    assert.match(res.body.detail, /requires workspace specification/);
  });

  test('an organization key with X-Tenant-Id acts in that workspace (header and value in any case)', async () => {
    const inFirst = await client(t.app, t.orgKey, t.workspaceId).post('/v2/listeners', {
      compute_type: 'k8s',
      compute_id: 'org-made',
    });
    assert.equal(inFirst.status, 201);
    const upper = await client(t.app, t.orgKey).get(`/v2/listeners/${inFirst.body.id}`, {
      'X-TENANT-ID': t.workspaceId.toUpperCase(),
    });
    assert.equal(upper.status, 200);
    assert.equal(upper.body.compute_id, 'org-made');
    const fromSecond = await client(t.app, t.orgKey).get(`/v2/listeners/${inFirst.body.id}`, { 'x-tenant-id': second });
    assert.equal(fromSecond.status, 404, 'the listener lives in the first workspace only');
    const created = await client(t.app, t.orgKey, second).post('/v2/deployments', container('org-in-b'));
    assert.equal(created.status, 201);
    assert.equal(created.body.tenant_id, second);
  });

  test('an organization key naming a workspace outside its organization gets 403', async () => {
    const res = await client(t.app, t.orgKey, MISSING).get('/v2/listeners');
    assert.equal(res.status, 403);
  });

  test('a workspace key with its own X-Tenant-Id works, with another one gets 403', async () => {
    assert.equal((await client(t.app, ADMIN_KEY, t.workspaceId).get('/v2/listeners')).status, 200);
    assert.equal(
      (await client(t.app, ADMIN_KEY).get('/v2/listeners', { 'X-Tenant-Id': t.workspaceId.toUpperCase() })).status,
      200,
    );
    const other = await client(t.app, ADMIN_KEY, second).get('/v2/listeners');
    assert.equal(other.status, 403);
    assert.equal(typeof other.body.detail, 'string');
    const write = await client(t.app, ADMIN_KEY, second).post('/v2/listeners', {
      compute_type: 'k8s',
      compute_id: 'sneaky',
    });
    assert.equal(write.status, 403);
    const listed = await client(t.app, secondKey).get('/v2/listeners');
    assert.ok(
      !listed.body.resources.some((l: { compute_id: string }) => l.compute_id === 'sneaky'),
      'the refused write made nothing',
    );
  });

  test('a malformed X-Tenant-Id is 422 with loc header x-tenant-id', async () => {
    for (const value of ['not-a-uuid', '1234', `${t.workspaceId}x`, `{${t.workspaceId}}`, '']) {
      const res = await client(t.app, ADMIN_KEY).get('/v2/listeners', { 'x-tenant-id': value });
      assert.equal(res.status, 422, `'${value}' -> ${res.status}`);
      assert.deepEqual(res.body.detail[0].loc, ['header', 'x-tenant-id']);
    }
  });
});

describe('two workspaces are isolated', () => {
  let b: ReturnType<typeof client>;
  let bWorkspace: string;
  let deployment: { id: string; latest_revision_id: string };
  let listenerId: string;
  let tagKeyId: string;
  let tagValueId: string;

  before(async () => {
    bWorkspace = (await newWorkspace(t, 'isolated-b')).id;
    b = (await newWorkspaceAdmin(t, bWorkspace, 'isolated-b')).api;

    const listener = await api.post('/v2/listeners', {
      compute_type: 'k8s',
      compute_id: 'a-cluster',
      compute_config: { k8s_namespaces: ['agents'] },
    });
    assert.equal(listener.status, 201);
    listenerId = listener.body.id;
    const created = await api.post('/v2/deployments', {
      name: 'a-private',
      source: 'external_container',
      source_config: { listener_id: listenerId },
      source_revision_config: { image_uri: 'registry.example.com/a:1' },
      secrets: [{ name: 'TOKEN', value: 'a-secret-canary' }],
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    deployment = created.body;
    const tagKey = await api.post('/v2/tags/keys', { key: 'team' });
    assert.equal(tagKey.status, 201);
    tagKeyId = tagKey.body.id;
    const tagValue = await api.post(`/v2/tags/keys/${tagKeyId}/values`, { value: 'alpha' });
    assert.equal(tagValue.status, 201);
    tagValueId = tagValue.body.id;
    assert.equal((await api.put(`/v2/deployments/${deployment.id}/tags`, { tag_value_ids: [tagValueId] })).status, 200);
  });

  test('workspace B gets 404 (never 403, never data) for every resource of A', async () => {
    const d = deployment.id;
    const r = deployment.latest_revision_id;
    const calls: [string, Promise<{ status: number; body: any }>][] = [
      ['get deployment', b.get(`/v2/deployments/${d}`)],
      ['patch deployment', b.patch(`/v2/deployments/${d}`, { source_revision_config: { image_uri: 'evil/image:1' } })],
      ['list revisions', b.get(`/v2/deployments/${d}/revisions`)],
      ['get revision', b.get(`/v2/deployments/${d}/revisions/${r}`)],
      ['redeploy revision', b.post(`/v2/deployments/${d}/revisions/${r}/redeploy`)],
      ['interrupt revision', b.post(`/v2/deployments/${d}/revisions/${r}/interrupt`)],
      ['get deployment tags', b.get(`/v2/deployments/${d}/tags`)],
      ['put deployment tags', b.put(`/v2/deployments/${d}/tags`, { tag_value_ids: [] })],
      ['get listener', b.get(`/v2/listeners/${listenerId}`)],
      ['patch listener', b.patch(`/v2/listeners/${listenerId}`, { version: 'evil' })],
      ['list tag values', b.get(`/v2/tags/keys/${tagKeyId}/values`)],
      ['add tag value', b.post(`/v2/tags/keys/${tagKeyId}/values`, { value: 'evil' })],
      ['delete tag value', b.delete(`/v2/tags/keys/${tagKeyId}/values/${tagValueId}`)],
      ['delete tag key', b.delete(`/v2/tags/keys/${tagKeyId}`)],
      ['delete listener', b.delete(`/v2/listeners/${listenerId}`)],
      ['delete deployment', b.delete(`/v2/deployments/${d}`)],
    ];
    for (const [label, call] of calls) {
      const res = await call;
      assert.equal(res.status, 404, `${label}: ${res.status} ${JSON.stringify(res.body)}`);
      const text = JSON.stringify(res.body);
      assert.ok(
        !text.includes('a-private') && !text.includes('a-cluster') && !text.includes('alpha'),
        `${label} leaks nothing`,
      );
    }
    assert.equal((await b.get(`/v2/deployments/${d}`)).body.detail, `Deployment ID ${d} not found.`);
    assert.equal((await b.get(`/v2/listeners/${listenerId}`)).body.detail, `Listener ID ${listenerId} not found.`);

    // Nothing of A changed.
    const after = await api.get(`/v2/deployments/${d}`);
    assert.equal(after.status, 200);
    assert.equal(after.body.latest_revision_id, r);
    assert.equal(after.body.source_revision_config.image_uri, 'registry.example.com/a:1');
    assert.equal((await api.get(`/v2/listeners/${listenerId}`)).body.version, null);
    assert.deepEqual(
      (await api.get(`/v2/deployments/${d}/tags`)).body.resources.map((x: { tag_value_id: string }) => x.tag_value_id),
      [tagValueId],
    );
    assert.deepEqual(
      (await api.get(`/v2/tags/keys/${tagKeyId}/values`)).body.resources.map((v: { value: string }) => v.value),
      ['alpha'],
    );
    assert.equal((await api.get(`/v2/deployments/${d}/revisions`)).body.resources.length, 1);
  });

  test('lists of B never show rows of A, and A never shows rows of B', async () => {
    const bDeployment = await b.post('/v2/deployments', container('b-only'));
    assert.equal(bDeployment.status, 201);
    assert.equal(bDeployment.body.tenant_id, bWorkspace);
    assert.equal((await b.post('/v2/listeners', { compute_type: 'k8s', compute_id: 'b-cluster' })).status, 201);
    assert.equal((await b.post('/v2/tags/keys', { key: 'b-key' })).status, 201);

    const bLists = {
      deployments: (await b.get('/v2/deployments?limit=100')).body.resources,
      listeners: (await b.get('/v2/listeners?limit=100')).body.resources,
      tags: (await b.get('/v2/tags/keys?limit=100')).body.resources,
      projects: (await b.get('/v2/tracing-projects?limit=100')).body.resources,
    };
    assert.deepEqual(
      bLists.deployments.map((d: { name: string }) => d.name),
      ['b-only'],
    );
    assert.deepEqual(
      bLists.listeners.map((l: { compute_id: string }) => l.compute_id),
      ['b-cluster'],
    );
    assert.deepEqual(
      bLists.tags.map((k: { key: string }) => k.key),
      ['b-key'],
    );
    assert.deepEqual(
      bLists.projects.map((p: { name: string }) => p.name),
      ['b-only'],
    );
    const byIds = await b.get(`/v2/deployments?deployment_ids=${deployment.id}`);
    assert.deepEqual(byIds.body.resources, [], "filtering by A's id finds nothing in B");
    const byName = await b.get('/v2/deployments?name=a-private');
    assert.deepEqual(byName.body.resources, []);
    const byTag = await b.get(`/v2/deployments?tag_value_ids=${tagValueId}`);
    assert.equal(byTag.status, 200);
    assert.deepEqual(byTag.body.resources, [], "A's tag value matches nothing in B");

    const aNames = (await api.get('/v2/deployments?limit=100')).body.resources.map((d: { name: string }) => d.name);
    assert.ok(aNames.includes('a-private'));
    assert.ok(!aNames.includes('b-only'));
    const aListeners = (await api.get('/v2/listeners?limit=100')).body.resources.map(
      (l: { compute_id: string }) => l.compute_id,
    );
    assert.ok(!aListeners.includes('b-cluster'));
  });

  test('names and compute_ids are per workspace', async () => {
    assert.equal((await b.post('/v2/deployments', container('a-private'))).status, 201, 'B may use a name A uses');
    assert.equal((await b.post('/v2/listeners', { compute_type: 'k8s', compute_id: 'a-cluster' })).status, 201);
  });

  test('a listener of another workspace in a deployment create is 400 and creates nothing', async () => {
    const res = await b.post('/v2/deployments', {
      name: 'borrows-a-listener',
      source: 'external_container',
      source_config: { listener_id: listenerId },
      source_revision_config: { image_uri: 'registry.example.com/b:1' },
    });
    assert.equal(res.status, 400);
    assert.match(res.body.detail, /listener_id/);
    assert.deepEqual((await b.get('/v2/deployments?name=borrows-a-listener')).body.resources, []);
  });

  test('tag values of another workspace cannot be put on a deployment', async () => {
    const own = (await b.get('/v2/deployments?name=b-only')).body.resources[0];
    const res = await b.put(`/v2/deployments/${own.id}/tags`, { tag_value_ids: [tagValueId] });
    assert.equal(res.status, 400);
    assert.deepEqual((await b.get(`/v2/deployments/${own.id}/tags`)).body.resources, []);
  });
});

describe('request ids', () => {
  test('every response carries X-Request-Id, and a sent one is echoed', async () => {
    const responses = [
      await client(t.app, null).get('/healthz'),
      await client(t.app, null).get('/v2/deployments'),
      await api.get('/v2/deployments'),
      await api.get(`/v2/deployments/${MISSING}`),
      await api.get('/v2/deployments/not-a-uuid'),
      await api.get('/v2/no-such-route'),
      await api.post('/v2/deployments', '{broken'),
      await api.get('/v2/deployments/%ZZ'),
      await api.get(`/v2/deployments/${'a'.repeat(300)}`),
    ];
    const ids = responses.map((r) => r.headers['x-request-id']);
    for (const [i, id] of ids.entries()) assert.ok(typeof id === 'string' && id.length > 0, `response ${i} has an id`);
    assert.equal(new Set(ids).size, ids.length, 'each request gets its own id');

    for (const path of [
      '/healthz',
      '/v2/deployments',
      `/v2/deployments/${MISSING}`,
      '/v2/deployments/not-a-uuid',
      '/v2/deployments/%ZZ',
    ]) {
      const res = await api.get(path, { 'x-request-id': 'trace-abc-123' });
      assert.equal(res.headers['x-request-id'], 'trace-abc-123', path);
    }
    const unauthenticated = await client(t.app, null).get('/v2/listeners', { 'x-request-id': 'trace-401' });
    assert.equal(unauthenticated.status, 401);
    assert.equal(unauthenticated.headers['x-request-id'], 'trace-401');
  });
});
