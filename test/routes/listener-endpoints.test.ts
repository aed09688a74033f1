/**
 * Endpoints of a deployment that runs on a listener (docs/listener.md, "Endpoints"): the API takes them
 * as on the own data plane, the listener protocol's desired state carries each (with its revision's
 * image and secrets), and the listener's endpoint reports move `served_revision_id`. The attacker's side:
 * another workspace's key neither reads nor sets one, and a listener never receives, nor reports for,
 * another listener's endpoints.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  client,
  createTestApp,
  newWorkspace,
  registerListener,
  type RegisteredListener,
  type TestApp,
  type Workspace,
} from '../support/harness.ts';

let t: TestApp;
let api: ReturnType<typeof client>;
let other: Workspace;
let mine: RegisteredListener;
let theirs: RegisteredListener;

before(async () => {
  t = await createTestApp();
  api = client(t.app);
  other = await newWorkspace(t, 'other-team');
  mine = await registerListener((url, body) => api.post(url, body), 'cluster-a', ['apps']);
  theirs = await registerListener((url, body) => api.post(url, body), 'cluster-b', ['apps']);
});
after(() => t.close());

/** A client speaking the listener protocol (no API key: the listener's credential goes in `bearer`). */
const as = () => client(t.app, null);
const bearer = (listener: RegisteredListener) => ({ authorization: `Bearer ${listener.credential}` });

/** A deployment on `listener` with one revision, DEPLOYED as the listener would have reported it. */
async function onListener(listener: RegisteredListener, name: string, secret = 'one') {
  const made = await api.post('/v2/deployments', {
    name,
    source: 'external_container',
    source_config: { listener_id: listener.id, listener_config: { k8s_namespace: 'apps' } },
    source_revision_config: { image_uri: `registry.example.com/${name}:1` },
    secrets: [{ name: 'TOKEN', value: secret }],
  });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  await t.database.db
    .updateTable('revisions')
    .set({ status: 'DEPLOYED' })
    .where('deployment_id', '=', made.body.id)
    .execute();
  const revision = (await api.get(`/v2/deployments/${made.body.id}/revisions`)).body.resources[0];
  return { id: made.body.id as string, revisionId: revision.id as string };
}

async function desiredOf(listener: RegisteredListener) {
  const answer = await as().get(`/v2/listeners/${listener.id}/desired-state`, bearer(listener));
  assert.equal(answer.status, 200, JSON.stringify(answer.body));
  return answer.body;
}

describe('endpoints of a listener deployment', () => {
  test("are set like the own plane's, carried in the desired state, and served once the listener reports it", async () => {
    const d = await onListener(mine, 'staged', 's3cret');
    const put = await api.put(`/v2/deployments/${d.id}/endpoints/staging`, { revision_id: d.revisionId });
    assert.equal(put.status, 201, JSON.stringify(put.body));
    assert.equal(put.body.served_revision_id, null);

    const entry = (await desiredOf(mine)).deployments.find((x: any) => x.deployment_id === d.id);
    assert.deepEqual(entry.endpoints, [
      {
        name: 'staging',
        revision: {
          id: d.revisionId,
          number: 1,
          image_uri: 'registry.example.com/staged:1',
          secrets: [{ name: 'TOKEN', value: 's3cret' }],
        },
        served_revision_id: null,
        split: null,
      },
    ]);

    const report = { deployment_id: d.id, endpoint: 'staging', revision_id: d.revisionId, status: 'SERVED' };
    const first = await as().post(`/v2/listeners/${mine.id}/endpoint-reports`, report, bearer(mine));
    assert.equal(first.status, 200, JSON.stringify(first.body));
    assert.deepEqual(first.body, { applied: true });
    const again = await as().post(`/v2/listeners/${mine.id}/endpoint-reports`, report, bearer(mine));
    assert.deepEqual(again.body, { applied: false }, 'a repeat changes nothing');
    const read = await api.get(`/v2/deployments/${d.id}/endpoints/staging`);
    assert.equal(read.body.served_revision_id, d.revisionId);
    const events = await api.get(`/v2/deployments/${d.id}/events?limit=100`);
    const served = (events.body.resources ?? events.body).filter((e: any) => e.type === 'deployment.endpoint_served');
    assert.equal(served.length, 1, 'one deployment.endpoint_served, not one per report');

    const failed = await as().post(
      `/v2/listeners/${mine.id}/endpoint-reports`,
      { ...report, status: 'FAILED', message: 'splits cannot be served on this cluster' },
      bearer(mine),
    );
    assert.deepEqual(failed.body, { applied: true });
  });

  test("another workspace's key can neither set nor read an endpoint of a listener deployment: 404, nothing changes", async () => {
    const d = await onListener(mine, 'guarded');
    assert.equal((await api.put(`/v2/deployments/${d.id}/endpoints/prod`, { revision_id: d.revisionId })).status, 201);
    for (const answer of [
      await other.api.get(`/v2/deployments/${d.id}/endpoints`),
      await other.api.get(`/v2/deployments/${d.id}/endpoints/prod`),
      await other.api.put(`/v2/deployments/${d.id}/endpoints/prod`, { revision_id: d.revisionId }),
      await other.api.put(`/v2/deployments/${d.id}/endpoints/theirs`, { revision_id: d.revisionId }),
      await other.api.delete(`/v2/deployments/${d.id}/endpoints/prod`),
    ])
      assert.equal(answer.status, 404, JSON.stringify(answer.body));
    const listed = await api.get(`/v2/deployments/${d.id}/endpoints`);
    assert.deepEqual(
      listed.body.resources.map((e: any) => e.name),
      ['prod'],
    );
  });

  test("a listener never receives another listener's endpoints, nor reports for them", async () => {
    const d = await onListener(mine, 'private-one', 'only-for-a');
    assert.equal((await api.put(`/v2/deployments/${d.id}/endpoints/beta`, { revision_id: d.revisionId })).status, 201);
    const state = await desiredOf(theirs);
    assert.ok(!JSON.stringify(state).includes(d.id), "the other listener's desired state does not name the deployment");
    assert.ok(!JSON.stringify(state).includes('only-for-a'), 'nor carries its secrets');
    // Its own credential on the other listener's path: 404, as for any listener not its own.
    const stolen = await as().get(`/v2/listeners/${mine.id}/desired-state`, bearer(theirs));
    assert.equal(stolen.status, 404);
    const report = { deployment_id: d.id, endpoint: 'beta', revision_id: d.revisionId, status: 'SERVED' };
    for (const answer of [
      await as().post(`/v2/listeners/${theirs.id}/endpoint-reports`, report, bearer(theirs)),
      await as().post(`/v2/listeners/${mine.id}/endpoint-reports`, report, bearer(theirs)),
    ])
      assert.equal(answer.status, 404, JSON.stringify(answer.body));
    assert.equal((await api.get(`/v2/deployments/${d.id}/endpoints/beta`)).body.served_revision_id, null);
  });

  test("a split set through the API is in the listener's desired state with its revision's image and secrets, and in no other listener's", async () => {
    const d = await onListener(mine, 'split-one', 'secret-a');
    const patched = await api.patch(`/v2/deployments/${d.id}`, {
      source_revision_config: { image_uri: 'registry.example.com/split-one:2' },
      secrets: [{ name: 'TOKEN', value: 'secret-b' }],
    });
    assert.equal(patched.status, 200, JSON.stringify(patched.body));
    const b: string = patched.body.latest_revision_id;
    await t.database.db.updateTable('revisions').set({ status: 'DEPLOYED' }).where('id', '=', b).execute();
    assert.equal(
      (await api.put(`/v2/deployments/${d.id}/endpoints/production`, { revision_id: d.revisionId })).status,
      201,
    );

    const split = await api.put(`/v2/deployments/${d.id}/endpoints/production/split`, { revision_id: b, weight: 20 });
    assert.equal(split.status, 200, JSON.stringify(split.body));
    assert.equal(split.body.split.served, false, 'served only once a data plane says so');
    const entry = (await desiredOf(mine)).deployments.find((x: any) => x.deployment_id === d.id);
    assert.deepEqual(entry.endpoints[0].split, {
      revision_id: b,
      weight: 20,
      revision: {
        id: b,
        number: 2,
        image_uri: 'registry.example.com/split-one:2',
        secrets: [{ name: 'TOKEN', value: 'secret-b' }],
      },
    });
    assert.equal(entry.endpoints[0].revision.id, d.revisionId);
    const state = JSON.stringify(await desiredOf(theirs));
    assert.ok(!state.includes(b) && !state.includes('secret-b'), "the other listener's desired state has none of it");
    // Another workspace's key can neither set nor take back the split: 404, and it stays.
    for (const answer of [
      await other.api.put(`/v2/deployments/${d.id}/endpoints/production/split`, { revision_id: b, weight: 90 }),
      await other.api.delete(`/v2/deployments/${d.id}/endpoints/production/split`),
    ])
      assert.equal(answer.status, 404, JSON.stringify(answer.body));
    assert.equal(
      (await desiredOf(mine)).deployments.find((x: any) => x.deployment_id === d.id).endpoints[0].split.weight,
      20,
    );

    // Taken back, the desired state has no split again.
    assert.equal((await api.delete(`/v2/deployments/${d.id}/endpoints/production/split`)).status, 204);
    const after = (await desiredOf(mine)).deployments.find((x: any) => x.deployment_id === d.id);
    assert.equal(after.endpoints[0].split, null);
  });

  test("a listener's split report says whether the split is served, and why not, on the endpoint; a stale one changes nothing", async () => {
    const d = await onListener(mine, 'split-served', 'secret-a');
    const patched = await api.patch(`/v2/deployments/${d.id}`, {
      source_revision_config: { image_uri: 'registry.example.com/split-served:2' },
    });
    assert.equal(patched.status, 200, JSON.stringify(patched.body));
    const b: string = patched.body.latest_revision_id;
    await t.database.db.updateTable('revisions').set({ status: 'DEPLOYED' }).where('id', '=', b).execute();
    assert.equal(
      (await api.put(`/v2/deployments/${d.id}/endpoints/production`, { revision_id: d.revisionId })).status,
      201,
    );
    const set = await api.put(`/v2/deployments/${d.id}/endpoints/production/split`, { revision_id: b, weight: 20 });
    assert.equal(set.status, 200, JSON.stringify(set.body));
    assert.equal(set.body.split.served, false);
    assert.equal(set.body.split.not_served_reason, null, 'nothing said yet');
    assert.equal(
      set.body.split.sticky,
      false,
      "a listener's Gateway weighs each request: no client stays on a revision",
    );

    const post = (body: Record<string, unknown>) =>
      as().post(`/v2/listeners/${mine.id}/endpoint-reports`, body, bearer(mine));
    const refused = {
      deployment_id: d.id,
      endpoint: 'production',
      revision_id: b,
      status: 'FAILED',
      message: 'no Gateway API in this cluster (gateway.networking.k8s.io/v1 HTTPRoute is not served)',
      split: { weight: 20 },
    };
    assert.deepEqual((await post(refused)).body, { applied: true });
    assert.deepEqual((await post(refused)).body, { applied: false }, 'a repeat changes nothing');
    let read = await api.get(`/v2/deployments/${d.id}/endpoints/production`);
    assert.equal(read.body.split.served, false);
    assert.match(read.body.split.not_served_reason, /^no Gateway API in this cluster/);
    assert.equal(read.body.served_revision_id, null, "the endpoint's own revision is not what the report is about");

    const served = { ...refused, status: 'SERVED', message: undefined };
    assert.deepEqual((await post(served)).body, { applied: true });
    read = await api.get(`/v2/deployments/${d.id}/endpoints/production`);
    assert.equal(read.body.split.served, true);
    assert.equal(read.body.split.not_served_reason, null);
    const listed = await api.get(`/v2/deployments/${d.id}/endpoints`);
    assert.equal(listed.body.resources[0].split.served, true);

    // Stale: another weight than the split has now, or a revision that is not the split's.
    assert.deepEqual((await post({ ...refused, split: { weight: 50 } })).body, { applied: false });
    assert.deepEqual((await post({ ...refused, revision_id: d.revisionId })).body, { applied: false });
    assert.equal((await api.get(`/v2/deployments/${d.id}/endpoints/production`)).body.split.served, true);

    const refusedByGateway = {
      ...refused,
      message: 'the gateway refused the route: no listener allows namespace apps',
    };
    assert.deepEqual((await post(refusedByGateway)).body, { applied: true });
    read = await api.get(`/v2/deployments/${d.id}/endpoints/production`);
    assert.equal(read.body.split.served, false);
    assert.equal(read.body.split.not_served_reason, 'the gateway refused the route: no listener allows namespace apps');
    const events = await api.get(`/v2/deployments/${d.id}/events?limit=100`);
    const types = (events.body.resources ?? events.body).map((e: any) => e.type);
    assert.equal(types.filter((x: string) => x === 'deployment.endpoint_split_failed').length, 2);
    assert.equal(types.filter((x: string) => x === 'deployment.endpoint_split_served').length, 1);
    assert.equal(types.filter((x: string) => x === 'deployment.endpoint_failed').length, 0);

    // Another listener cannot say anything about it.
    assert.equal((await as().post(`/v2/listeners/${theirs.id}/endpoint-reports`, served, bearer(theirs))).status, 404);
    assert.equal((await api.get(`/v2/deployments/${d.id}/endpoints/production`)).body.split.served, false);

    // Served at 20%, then widened: not served at 50% until the listener says its Gateway took the weight.
    assert.deepEqual((await post(served)).body, { applied: true });
    const widened = await api.put(`/v2/deployments/${d.id}/endpoints/production/split`, { revision_id: b, weight: 50 });
    assert.equal(widened.status, 200, JSON.stringify(widened.body));
    assert.equal(widened.body.split.served, false, 'what the cluster serves is still the 20% split');
    assert.deepEqual((await post({ ...served, split: { weight: 50 } })).body, { applied: true });
    assert.equal((await api.get(`/v2/deployments/${d.id}/endpoints/production`)).body.split.served, true);
  });

  test("a listener's split takes no automatic rollback (400, nothing changes): the service sees none of its cluster's requests", async () => {
    const d = await onListener(mine, 'split-rollback');
    const patched = await api.patch(`/v2/deployments/${d.id}`, {
      source_revision_config: { image_uri: 'registry.example.com/split-rollback:2' },
    });
    const b: string = patched.body.latest_revision_id;
    await t.database.db.updateTable('revisions').set({ status: 'DEPLOYED' }).where('id', '=', b).execute();
    assert.equal(
      (await api.put(`/v2/deployments/${d.id}/endpoints/production`, { revision_id: d.revisionId })).status,
      201,
    );
    const refused = await api.put(`/v2/deployments/${d.id}/endpoints/production/split`, {
      revision_id: b,
      weight: 20,
      rollback: { max_error_rate_increase: 0.1 },
    });
    assert.equal(refused.status, 400, JSON.stringify(refused.body));
    assert.match(refused.body.detail, /rollback: .*listener/);
    assert.equal((await api.get(`/v2/deployments/${d.id}/endpoints/production`)).body.split, null);
    const plain = await api.put(`/v2/deployments/${d.id}/endpoints/production/split`, {
      revision_id: b,
      weight: 20,
      rollback: null,
    });
    assert.equal(plain.status, 200, JSON.stringify(plain.body));
    assert.equal(plain.body.split.rollback, null);
  });
});
