/**
 * Operator maxima and workspace quotas (issue 33, item 1). Attacker's test: a member key asks for more
 * memory, CPU or instances than the operator allows, or more than its workspace's quota across several
 * deployments; each is a 422 naming the limit, before anything is stored. An organization admin sets a
 * workspace's quota; a member (or a workspace admin) cannot.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { client, createTestApp, type TestApp } from '../support/harness.ts';

let t: TestApp;
let admin: ReturnType<typeof client>;
let member: ReturnType<typeof client>;

before(async () => {
  t = await createTestApp({
    SLIPWAY_MAX_INSTANCE_MEMORY_MB: '2048',
    SLIPWAY_MAX_INSTANCE_CPU: '2',
    SLIPWAY_MAX_INSTANCES: '4',
  });
  admin = client(t.app);
  const key = await admin.post('/v2/api-keys', { name: 'member', role: 'member' });
  assert.equal(key.status, 201, JSON.stringify(key.body));
  member = client(t.app, key.body.key);
});
after(() => t.close());

const deployment = (name: string, resourceSpec: Record<string, unknown>) => ({
  name,
  source: 'internal_container',
  source_config: { resource_spec: resourceSpec },
  source_revision_config: { image_uri: 'registry.example.com/agent:1.0.0' },
});

async function countDeployments(name: string): Promise<number> {
  const rows = await t.database.db.selectFrom('deployments').select('id').where('name', '=', name).execute();
  return rows.length;
}

test("a member's spec over the operator's maxima is a 422 naming the limit, and nothing is stored", async () => {
  const cases: [Record<string, unknown>, string, number][] = [
    [{ memory_limit_mb: 4 * 1024 * 1024 }, 'memory_limit_mb', 2048],
    [{ memory_mb: 64 * 1024 }, 'memory_mb', 2048],
    [{ cpu_limit: 512 }, 'cpu_limit', 2],
    [{ queue_cpu: 3 }, 'queue_cpu', 2],
    [{ min_scale: 1000 }, 'min_scale', 4],
    [{ queue_max_scale: 64 }, 'queue_max_scale', 4],
  ];
  for (const [spec, field, allowed] of cases) {
    const name = `too-big-${field.replaceAll('_', '-')}`;
    const answer = await member.post('/v2/deployments', deployment(name, spec));
    assert.equal(answer.status, 422, `${field}: ${JSON.stringify(answer.body)}`);
    const [issue] = answer.body.detail;
    assert.deepEqual(issue.loc, ['body', 'source_config', 'resource_spec', field]);
    assert.equal(issue.input, spec[field]);
    assert.match(issue.msg, new RegExp(`at most ${allowed}\\b`), issue.msg);
    assert.equal(await countDeployments(name), 0, `${field}: a deployment was stored`);
  }
});

test('a patch over the maxima is a 422 and leaves the stored spec as it was', async () => {
  const made = await member.post('/v2/deployments', deployment('patched', { memory_limit_mb: 512 }));
  assert.equal(made.status, 201, JSON.stringify(made.body));
  const answer = await member.patch(`/v2/deployments/${made.body.id}`, {
    source_config: { resource_spec: { memory_limit_mb: 64 * 1024, min_scale: 2 } },
  });
  assert.equal(answer.status, 422, JSON.stringify(answer.body));
  assert.deepEqual(answer.body.detail[0].loc, ['body', 'source_config', 'resource_spec', 'memory_limit_mb']);
  const now = await member.get(`/v2/deployments/${made.body.id}`);
  assert.deepEqual(now.body.source_config.resource_spec, { memory_limit_mb: 512 });
});

test("an organization admin sets a workspace's quota; a member or the workspace's own admin cannot", async () => {
  const url = `/v2/workspaces/${t.workspaceId}/quota`;
  const byMember = await member.patch(url, { memory_mb: 1_000_000 });
  assert.equal(byMember.status, 403, JSON.stringify(byMember.body));
  const byWorkspaceAdmin = await admin.patch(url, { instances: 1000 });
  assert.equal(byWorkspaceAdmin.status, 403, JSON.stringify(byWorkspaceAdmin.body));

  const org = client(t.app, t.orgKey);
  const overHost = await org.patch(url, { memory_mb: t.config.limits.appsMemoryMb + 1 });
  assert.equal(overHost.status, 422, JSON.stringify(overHost.body));
  assert.deepEqual(overHost.body.detail[0].loc, ['body', 'quota', 'memory_mb']);

  const set = await org.patch(url, { memory_mb: 3072, instances: 3, deployments: 5 });
  assert.equal(set.status, 200, JSON.stringify(set.body));
  assert.deepEqual(set.body.quota, {
    memory_mb: 3072,
    cpu: null,
    instances: 3,
    deployments: 5,
    database_storage_gi: null,
  });
  const events = await t.database.db
    .selectFrom('events')
    .select(['type', 'data'])
    .where('subject_id', '=', t.workspaceId)
    .where('type', '=', 'workspace.quota_changed')
    .execute();
  assert.equal(events.length, 1);
});

test('the quota holds across deployments: the second one over it is a 422, and GET shows quota and use', async () => {
  // The quota of the test before: 3072 MiB, 3 instances, 5 deployments; the workspace holds 'patched' (512 MiB, 1 instance).
  const first = await member.post('/v2/deployments', deployment('quota-first', { memory_limit_mb: 2048 }));
  assert.equal(first.status, 201, JSON.stringify(first.body));
  const second = await member.post('/v2/deployments', deployment('quota-second', { memory_limit_mb: 1024 }));
  assert.equal(second.status, 422, JSON.stringify(second.body));
  const [issue] = second.body.detail;
  assert.deepEqual(issue.loc, ['body', 'source_config', 'resource_spec', 'memory_limit_mb']);
  assert.match(issue.msg, /quota allows 3072 MiB/);
  assert.match(issue.msg, /at most 512\b/);
  assert.equal(await countDeployments('quota-second'), 0);

  const scaled = await member.patch(`/v2/deployments/${first.body.id}`, {
    source_config: { resource_spec: { memory_limit_mb: 512, min_scale: 3 } },
  });
  assert.equal(scaled.status, 422, JSON.stringify(scaled.body));
  assert.deepEqual(scaled.body.detail[0].loc, ['body', 'source_config', 'resource_spec', 'min_scale']);

  const seen = await member.get(`/v2/workspaces/${t.workspaceId}`);
  assert.equal(seen.status, 200, JSON.stringify(seen.body));
  assert.deepEqual(seen.body.quota, {
    memory_mb: 3072,
    cpu: null,
    instances: 3,
    deployments: 5,
    database_storage_gi: null,
  });
  // Two deployments of the default 1 GiB of database storage; no database measured (no data plane here).
  assert.deepEqual(seen.body.usage, {
    memory_mb: 2560,
    cpu: 2,
    instances: 2,
    deployments: 2,
    database_storage_gi: 2,
    database_size_bytes: 0,
  });
});

test("a workspace key does not see another workspace's quota", async () => {
  const other = await client(t.app, t.orgKey).post('/v2/workspaces', { name: 'other' });
  assert.equal(other.status, 201, JSON.stringify(other.body));
  const seen = await member.get(`/v2/workspaces/${other.body.id}`);
  assert.equal(seen.status, 404, JSON.stringify(seen.body));
});

test('under a lowered quota a deployment may still scale down, never up', async () => {
  const org = client(t.app, t.orgKey);
  const lowered = await org.patch(`/v2/workspaces/${t.workspaceId}/quota`, { memory_mb: 1024 });
  assert.equal(lowered.status, 200, JSON.stringify(lowered.body));
  const [first] = (await member.get('/v2/deployments?name=quota-first')).body.resources;
  const down = await member.patch(`/v2/deployments/${first.id}`, {
    source_config: { resource_spec: { memory_limit_mb: 1024 } },
  });
  assert.equal(down.status, 200, JSON.stringify(down.body));
  const up = await member.patch(`/v2/deployments/${first.id}`, {
    source_config: { resource_spec: { memory_limit_mb: 1536 } },
  });
  assert.equal(up.status, 422, JSON.stringify(up.body));
  const seen = await member.get(`/v2/workspaces/${t.workspaceId}`);
  assert.equal(seen.body.usage.memory_mb, 512 + 1024);
});

test('a paused deployment (min_scale 0) counts no web instance: what it frees another deployment may use', async () => {
  // The quota of the test before: 1024 MiB, 3 instances; 'patched' (512 MiB) and 'quota-first' (1024 MiB) hold 1536.
  const [first] = (await member.get('/v2/deployments?name=quota-first')).body.resources;
  const paused = await member.patch(`/v2/deployments/${first.id}`, {
    source_config: { resource_spec: { memory_limit_mb: 1024, min_scale: 0 } },
  });
  assert.equal(paused.status, 200, JSON.stringify(paused.body));
  const seen = await member.get(`/v2/workspaces/${t.workspaceId}`);
  assert.equal(seen.body.usage.memory_mb, 512);
  assert.equal(seen.body.usage.instances, 1);
  const next = await member.post('/v2/deployments', deployment('quota-after-pause', { memory_limit_mb: 512 }));
  assert.equal(next.status, 201, JSON.stringify(next.body));
  // Serving it again would take the workspace over its quota: refused, and the spec stays paused.
  const resumed = await member.patch(`/v2/deployments/${first.id}`, {
    source_config: { resource_spec: { memory_limit_mb: 1024, min_scale: 1 } },
  });
  assert.equal(resumed.status, 422, JSON.stringify(resumed.body));
  const stored = await member.get(`/v2/deployments/${first.id}`);
  assert.equal(stored.body.source_config.resource_spec.min_scale, 0);
});

describe('database storage (issue 33: db_storage_gi held to the maximum and the quota)', () => {
  let d: TestApp;
  let dAdmin: ReturnType<typeof client>;
  let dMember: ReturnType<typeof client>;
  let org: ReturnType<typeof client>;

  before(async () => {
    d = await createTestApp({ SLIPWAY_MAX_DATABASE_STORAGE_GI: '8', SLIPWAY_APP_DATABASE_STORAGE_GI: '2' });
    dAdmin = client(d.app);
    const key = await dAdmin.post('/v2/api-keys', { name: 'member', role: 'member' });
    assert.equal(key.status, 201, JSON.stringify(key.body));
    dMember = client(d.app, key.body.key);
    org = client(d.app, d.orgKey);
  });
  after(() => d.close());

  const count = async (name: string) =>
    (await d.database.db.selectFrom('deployments').select('id').where('name', '=', name).execute()).length;

  test("a member's db_storage_gi over the operator's maximum is a 422 naming it, and nothing is stored", async () => {
    const answer = await dMember.post('/v2/deployments', deployment('big-database', { db_storage_gi: 64 }));
    assert.equal(answer.status, 422, JSON.stringify(answer.body));
    const [issue] = answer.body.detail;
    assert.deepEqual(issue.loc, ['body', 'source_config', 'resource_spec', 'db_storage_gi']);
    assert.equal(issue.input, 64);
    assert.match(issue.msg, /at most 8 GiB of database storage per deployment \(SLIPWAY_MAX_DATABASE_STORAGE_GI\)/);
    assert.equal(await count('big-database'), 0);

    const made = await dMember.post('/v2/deployments', deployment('small-database', { db_storage_gi: 8 }));
    assert.equal(made.status, 201, JSON.stringify(made.body));
    const patched = await dMember.patch(`/v2/deployments/${made.body.id}`, {
      source_config: { resource_spec: { db_storage_gi: 9 } },
    });
    assert.equal(patched.status, 422, JSON.stringify(patched.body));
    const now = await dMember.get(`/v2/deployments/${made.body.id}`);
    assert.deepEqual(now.body.source_config.resource_spec, { db_storage_gi: 8 });
  });

  test('the database storage quota holds across deployments; each deployment counts its default when silent', async () => {
    const url = `/v2/workspaces/${d.workspaceId}/quota`;
    const byMember = await dMember.patch(url, { database_storage_gi: 1000 });
    assert.equal(byMember.status, 403, JSON.stringify(byMember.body));
    // The workspace holds 'small-database' (8 GiB). A quota of 12: 4 GiB left, two default deployments (2 each).
    const set = await org.patch(url, { database_storage_gi: 12 });
    assert.equal(set.status, 200, JSON.stringify(set.body));
    assert.equal(set.body.quota.database_storage_gi, 12);

    const silent = await dMember.post('/v2/deployments', deployment('silent-database', {}));
    assert.equal(silent.status, 201, JSON.stringify(silent.body));
    const over = await dMember.post('/v2/deployments', deployment('over-database', { db_storage_gi: 3 }));
    assert.equal(over.status, 422, JSON.stringify(over.body));
    const [issue] = over.body.detail;
    assert.deepEqual(issue.loc, ['body', 'source_config', 'resource_spec', 'db_storage_gi']);
    assert.match(issue.msg, /quota allows 12 GiB of database storage/);
    assert.match(issue.msg, /at most 2\b/);
    assert.equal(await count('over-database'), 0);
    // Silent, it asks the default (2 GiB), which fits exactly.
    const fits = await dMember.post('/v2/deployments', deployment('fits-database', {}));
    assert.equal(fits.status, 201, JSON.stringify(fits.body));
    const grow = await dMember.patch(`/v2/deployments/${fits.body.id}`, {
      source_config: { resource_spec: { db_storage_gi: 3 } },
    });
    assert.equal(grow.status, 422, JSON.stringify(grow.body));

    const seen = await dMember.get(`/v2/workspaces/${d.workspaceId}`);
    assert.equal(seen.status, 200, JSON.stringify(seen.body));
    assert.equal(seen.body.quota.database_storage_gi, 12);
    assert.equal(seen.body.usage.database_storage_gi, 12);
    // Nothing measured yet: no database was made (no data plane runs here).
    assert.equal(seen.body.usage.database_size_bytes, 0);

    // Lowered under its use: a deployment may still shrink, never grow.
    const lowered = await org.patch(url, { database_storage_gi: 6 });
    assert.equal(lowered.status, 200, JSON.stringify(lowered.body));
    const shrink = await dMember.patch(
      `/v2/deployments/${(await dMember.get('/v2/deployments?name=small-database')).body.resources[0].id}`,
      {
        source_config: { resource_spec: { db_storage_gi: 4 } },
      },
    );
    assert.equal(shrink.status, 200, JSON.stringify(shrink.body));
    const removed = await org.patch(url, { database_storage_gi: null });
    assert.equal(removed.body.quota.database_storage_gi, null);
  });
});
