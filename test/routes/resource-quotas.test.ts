/**
 * Operator maxima and workspace quotas (issue 33, item 1). Attacker's test: a member key asks for more
 * memory, CPU or instances than the operator allows, or more than its workspace's quota across several
 * deployments; each is a 422 naming the limit, before anything is stored. An organization admin sets a
 * workspace's quota; a member (or a workspace admin) cannot.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
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
  assert.deepEqual(set.body.quota, { memory_mb: 3072, cpu: null, instances: 3, deployments: 5 });
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
  assert.deepEqual(seen.body.quota, { memory_mb: 3072, cpu: null, instances: 3, deployments: 5 });
  assert.deepEqual(seen.body.usage, { memory_mb: 2560, cpu: 2, instances: 2, deployments: 2 });
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
