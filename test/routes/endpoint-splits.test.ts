/**
 * Traffic splits on endpoints through the API (docs/app-urls.md, "Traffic split"): set, widen, take back,
 * promote, each an event; and the attacker's side: another workspace's key, bad weights, revisions that
 * are not the deployment's or never deployed: a 4xx that changes nothing. The edges' side (weights,
 * stickiness, threads) is in test/dataplane/endpoint-split-edge.test.ts; a listener deployment's split in
 * the listener's desired state is in test/routes/listener-endpoints.test.ts.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { createOwnPlaneReports } from '../../src/service/lifecycle-reports.ts';
import { client, createTestApp, newWorkspace, type TestApp, type Workspace } from '../support/harness.ts';

let t: TestApp;
let api: ReturnType<typeof client>;
let other: Workspace;

before(async () => {
  t = await createTestApp();
  api = client(t.app);
  other = await newWorkspace(t, 'other-team');
});
after(() => t.close());

/** A deployment with `revisions` DEPLOYED revisions (oldest first) and an endpoint `production` at the first. */
async function deployment(name: string, revisions = 2, as = api) {
  const made = await as.post('/v2/deployments', {
    name,
    source: 'internal_container',
    source_revision_config: { image_uri: `registry.example.com/${name}:1` },
  });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  for (let i = 1; i < revisions; i++)
    await as.patch(`/v2/deployments/${made.body.id}`, {
      source_revision_config: { image_uri: `registry.example.com/${name}:${i + 1}` },
    });
  await t.database.db
    .updateTable('revisions')
    .set({ status: 'DEPLOYED' })
    .where('deployment_id', '=', made.body.id)
    .execute();
  const listed = await as.get(`/v2/deployments/${made.body.id}/revisions`);
  const ids: string[] = listed.body.resources.map((r: { id: string }) => r.id).reverse();
  const put = await as.put(`/v2/deployments/${made.body.id}/endpoints/production`, { revision_id: ids[0] });
  assert.equal(put.status, 201, JSON.stringify(put.body));
  return { id: made.body.id as string, revisions: ids };
}

const rows = () => t.database.db.selectFrom('deployment_endpoints').selectAll().orderBy('name').execute();
const splitEvents = (deploymentId: string) =>
  t.database.db
    .selectFrom('events')
    .select(['type', 'data'])
    .where('deployment_id', '=', deploymentId)
    .where('type', 'like', 'deployment.endpoint_split%')
    .orderBy('id')
    .execute();

describe('traffic splits', () => {
  test('a split is set, widened, shown in the endpoint, taken back; each change an event naming who', async () => {
    const d = await deployment('canary');
    const [a, b] = d.revisions as [string, string];
    const url = `/v2/deployments/${d.id}/endpoints/production/split`;
    const set = await api.put(url, { revision_id: b, weight: 10 });
    assert.equal(set.status, 200, JSON.stringify(set.body));
    assert.equal(set.body.revision_id, a);
    assert.deepEqual(
      { ...set.body.split, started_at: undefined },
      {
        revision_id: b,
        weight: 10,
        served: false,
        not_served_reason: null,
        sticky: true,
        rollback: null,
        started_at: undefined,
      },
    );
    const widened = await api.put(url, { revision_id: b, weight: 50, rollback: { window_seconds: 60 } });
    assert.equal(widened.status, 200);
    assert.equal(widened.body.split.weight, 50);
    assert.deepEqual(widened.body.split.rollback, {
      max_error_rate_increase: 0.05,
      max_p99_increase_ms: null,
      window_seconds: 60,
      min_requests: 50,
    });
    // Widening keeps the split's start (the rollback's window and the clients' pins go on).
    assert.equal(widened.body.split.started_at, set.body.split.started_at);
    const read = await api.get(`/v2/deployments/${d.id}/endpoints/production`);
    assert.equal(read.body.split.weight, 50);
    assert.equal((await api.get(`/v2/deployments/${d.id}/endpoints`)).body.resources[0].split.revision_id, b);
    assert.equal((await api.delete(url)).status, 204);
    assert.equal((await api.get(`/v2/deployments/${d.id}/endpoints/production`)).body.split, null);
    assert.equal((await api.delete(url)).status, 404);
    const events = await splitEvents(d.id);
    assert.deepEqual(
      events.map((e) => [e.type, e.data.split_revision_id, e.data.weight]),
      [
        ['deployment.endpoint_split_set', b, 10],
        ['deployment.endpoint_split_changed', b, 50],
        ['deployment.endpoint_split_ended', b, 50],
      ],
    );
    assert.ok(events.every((e) => typeof (e.data.by as { api_key_id?: unknown }).api_key_id === 'string'));
  });

  test("promoting the split's revision moves the endpoint to it and ends the split", async () => {
    const d = await deployment('promote');
    const [, b] = d.revisions as [string, string];
    await api.put(`/v2/deployments/${d.id}/endpoints/production/split`, { revision_id: b, weight: 20 });
    const moved = await api.put(`/v2/deployments/${d.id}/endpoints/production`, { revision_id: b });
    assert.equal(moved.status, 200);
    assert.equal(moved.body.revision_id, b);
    assert.equal(moved.body.split, null);
    const ended = (await splitEvents(d.id)).at(-1)!;
    assert.equal(ended.type, 'deployment.endpoint_split_ended');
    assert.equal(ended.data.reason, 'promoted');
    assert.equal(ended.data.to_revision_id, b);
  });
});

describe('attacks on traffic splits', () => {
  test("another workspace's key can neither read, set nor take back a split: 404, nothing changes", async () => {
    const d = await deployment('private-split');
    const [, b] = d.revisions as [string, string];
    await api.put(`/v2/deployments/${d.id}/endpoints/production/split`, { revision_id: b, weight: 10 });
    const before = await rows();
    const eventsBefore = await splitEvents(d.id);
    const url = `/v2/deployments/${d.id}/endpoints/production/split`;
    const answers = [
      await other.api.put(url, { revision_id: b, weight: 90 }),
      await other.api.delete(url),
      await other.api.get(`/v2/deployments/${d.id}/endpoints/production`),
    ];
    assert.deepEqual(
      answers.map((x) => x.status),
      [404, 404, 404],
    );
    for (const answer of answers) assert.doesNotMatch(JSON.stringify(answer.body), new RegExp(b));
    assert.deepEqual(await rows(), before);
    assert.deepEqual(await splitEvents(d.id), eventsBefore);
  });

  test('bad weights and rollbacks, foreign, unbuilt or same revisions: a clear 4xx that changes nothing', async () => {
    const d = await deployment('hostile-split', 2);
    const [a, b] = d.revisions as [string, string];
    const theirs = await deployment('theirs-split', 1, other.api);
    const mine = await deployment('neighbour-split', 1);
    await api.patch(`/v2/deployments/${d.id}`, { source_revision_config: { image_uri: 'registry.example.com/x:9' } });
    const unbuilt = (await api.get(`/v2/deployments/${d.id}/revisions`)).body.resources[0].id as string;
    const before = await rows();
    const url = `/v2/deployments/${d.id}/endpoints/production/split`;
    const cases: [unknown, number, RegExp?][] = [
      [{ revision_id: b, weight: 0 }, 422],
      [{ revision_id: b, weight: 100 }, 422],
      [{ revision_id: b, weight: 7.5 }, 422],
      [{ revision_id: b, weight: 'x' }, 422],
      [{ revision_id: b, weight: -5 }, 422],
      [{ revision_id: b }, 422],
      [{ revision_id: 'not-a-uuid', weight: 10 }, 422],
      [{ revision_id: b, weight: 10, rollback: { window_seconds: 5 } }, 422],
      [{ revision_id: b, weight: 10, rollback: { max_error_rate_increase: 2 } }, 422],
      [{ revision_id: b, weight: 10, rollback: { min_requests: 3 } }, 422],
      [{ revision_id: theirs.revisions[0], weight: 10 }, 400, /not found in this deployment/],
      [{ revision_id: mine.revisions[0], weight: 10 }, 400, /not found in this deployment/],
      [{ revision_id: unbuilt, weight: 10 }, 400, /DEPLOYED/],
      [{ revision_id: a, weight: 10 }, 400, /serves revision .* already/],
    ];
    for (const [body, status, detail] of cases) {
      const answer = await api.put(url, body);
      assert.equal(answer.status, status, `${JSON.stringify(body)}: ${JSON.stringify(answer.body)}`);
      if (detail) assert.match(answer.body.detail, detail);
    }
    assert.equal(
      (await api.put(`/v2/deployments/${d.id}/endpoints/nosuch/split`, { revision_id: b, weight: 10 })).status,
      404,
    );
    assert.equal(
      (await api.put(`/v2/deployments/${d.id}/endpoints/Bad--Name/split`, { revision_id: b, weight: 10 })).status,
      422,
    );
    assert.deepEqual(await rows(), before);
    assert.deepEqual(await splitEvents(d.id), []);
  });

  test("a split counts as a copy of the deployment's instances in the workspace's quota", async () => {
    const ws = await newWorkspace(t, 'quota-split');
    const d = await deployment('counted-split', 2, ws.api);
    // The deployment and its endpoint: 2 instances; a split would be a third.
    const quota = await client(t.app, t.orgKey).patch(`/v2/workspaces/${ws.id}/quota`, { instances: 2 });
    assert.equal(quota.status, 200, JSON.stringify(quota.body));
    const before = await rows();
    const answer = await ws.api.put(`/v2/deployments/${d.id}/endpoints/production/split`, {
      revision_id: d.revisions[1],
      weight: 10,
    });
    assert.equal(answer.status, 422, JSON.stringify(answer.body));
    assert.deepEqual(await rows(), before);
  });

  test("the own data plane's word on a split it could not start is the split's not_served_reason, gone once served", async () => {
    const d = await deployment('split-reason');
    const [a, b] = d.revisions as [string, string];
    const url = `/v2/deployments/${d.id}/endpoints/production`;
    assert.equal((await api.put(`${url}/split`, { revision_id: b, weight: 10 })).status, 200);
    const owner = { id: 'node-reason/1', nodePrefix: 'node-reason/' };
    await t.database.pool.query('update deployments set runner_owner = $2 where id = $1', [d.id, owner.id]);
    const reports = createOwnPlaneReports(t.database.db, { owner, leaseSeconds: 30 });
    const target = { deploymentId: d.id, endpoint: 'production', revisionId: b, split: { weight: 10 } };
    await reports.reportEndpoint({ ...target, recordedRevisionId: a, served: false, message: 'health check failed' });
    let split = (await api.get(url)).body.split;
    assert.deepEqual([split.served, split.not_served_reason, split.sticky], [false, 'health check failed', true]);
    await reports.reportEndpoint({ ...target, recordedRevisionId: a, served: true, fromRevisionId: null });
    split = (await api.get(url)).body.split;
    assert.deepEqual([split.served, split.not_served_reason], [true, null]);
  });
});
