/**
 * Endpoints of a deployment through the API (docs/app-urls.md, "Endpoints"): who may read and move one,
 * which revisions may be pinned, which names are refused, and that a refusal changes nothing. The data
 * plane's side (instances, routes, the move without failed requests) is in
 * test/dataplane/endpoints.test.ts.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
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

/** A deployment with `revisions` revisions, each marked DEPLOYED as the data plane would. */
async function deployment(
  name: string,
  revisions = 1,
  as = api,
): Promise<{ id: string; slug: string; revisions: string[] }> {
  const made = await as.post('/v2/deployments', {
    name,
    source: 'internal_container',
    source_revision_config: { image_uri: `registry.example.com/${name}:1` },
  });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  for (let i = 1; i < revisions; i++) {
    const patched = await as.patch(`/v2/deployments/${made.body.id}`, {
      source_revision_config: { image_uri: `registry.example.com/${name}:${i + 1}` },
    });
    assert.equal(patched.status, 200, JSON.stringify(patched.body));
  }
  await t.database.db
    .updateTable('revisions')
    .set({ status: 'DEPLOYED' })
    .where('deployment_id', '=', made.body.id)
    .execute();
  const row = await t.database.db
    .selectFrom('deployments')
    .select('app_slug')
    .where('id', '=', made.body.id)
    .executeTakeFirstOrThrow();
  const listed = await as.get(`/v2/deployments/${made.body.id}/revisions`);
  return {
    id: made.body.id,
    slug: row.app_slug,
    revisions: listed.body.resources.map((r: { id: string }) => r.id).reverse(),
  };
}

const endpointRows = () => t.database.db.selectFrom('deployment_endpoints').selectAll().orderBy('name').execute();
const endpointEvents = (deploymentId: string) =>
  t.database.db
    .selectFrom('events')
    .select(['type', 'data'])
    .where('deployment_id', '=', deploymentId)
    .where('type', 'like', 'deployment.endpoint_%')
    .orderBy('id')
    .execute();

describe('endpoints', () => {
  test('an endpoint is created at a revision, moved to another, listed, read and deleted, each change an event', async () => {
    const d = await deployment('shop', 2);
    const [first, second] = d.revisions as [string, string];
    const created = await api.put(`/v2/deployments/${d.id}/endpoints/staging`, { revision_id: second });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    assert.equal(created.body.name, 'staging');
    assert.equal(created.body.revision_id, second);
    assert.equal(created.body.served_revision_id, null);
    const production = await api.put(`/v2/deployments/${d.id}/endpoints/production`, { revision_id: first });
    assert.equal(production.status, 201);
    // Promotion: production takes the revision staging serves.
    const promoted = await api.put(`/v2/deployments/${d.id}/endpoints/production`, { revision_id: second });
    assert.equal(promoted.status, 200);
    assert.equal(promoted.body.revision_id, second);
    // The same revision again is no move and no event.
    assert.equal((await api.put(`/v2/deployments/${d.id}/endpoints/production`, { revision_id: second })).status, 200);

    const listed = await api.get(`/v2/deployments/${d.id}/endpoints`);
    assert.deepEqual(
      listed.body.resources.map((e: { name: string; revision_id: string }) => [e.name, e.revision_id]),
      [
        ['production', second],
        ['staging', second],
      ],
    );
    assert.equal((await api.get(`/v2/deployments/${d.id}/endpoints/staging`)).body.revision_id, second);
    assert.equal((await api.delete(`/v2/deployments/${d.id}/endpoints/staging`)).status, 204);
    assert.equal((await api.get(`/v2/deployments/${d.id}/endpoints/staging`)).status, 404);
    assert.equal((await api.delete(`/v2/deployments/${d.id}/endpoints/staging`)).status, 404);

    const events = await endpointEvents(d.id);
    assert.deepEqual(
      events.map((e) => [e.type, e.data.endpoint, e.data.from_revision_id, e.data.to_revision_id ?? null]),
      [
        ['deployment.endpoint_set', 'staging', null, second],
        ['deployment.endpoint_set', 'production', null, first],
        ['deployment.endpoint_set', 'production', first, second],
        ['deployment.endpoint_deleted', 'staging', second, null],
      ],
    );
    assert.ok(events.every((e) => typeof (e.data.by as { api_key_id?: unknown }).api_key_id === 'string'));
  });

  test('the endpoint URL is the stable URL with --<name> after the slug', async () => {
    const d = await deployment('urls');
    await t.database.db
      .updateTable('deployments')
      .set({ source_config: JSON.stringify({ custom_url: `http://${d.slug}.localhost:8125` }) as never })
      .where('id', '=', d.id)
      .execute();
    const put = await api.put(`/v2/deployments/${d.id}/endpoints/staging`, { revision_id: d.revisions[0] });
    assert.equal(put.body.url, `http://${d.slug}--staging.localhost:8125`);
  });

  test('a deployment is deleted with its endpoints', async () => {
    const d = await deployment('gone');
    await api.put(`/v2/deployments/${d.id}/endpoints/staging`, { revision_id: d.revisions[0] });
    assert.equal((await api.delete(`/v2/deployments/${d.id}`)).status, 204);
    assert.equal(
      (await api.put(`/v2/deployments/${d.id}/endpoints/other`, { revision_id: d.revisions[0] })).status,
      404,
    );
  });
});

describe('attacks on endpoints', () => {
  test("another workspace's key can neither read, move, create nor delete an endpoint: 404, nothing changes", async () => {
    const d = await deployment('private');
    assert.equal(
      (await api.put(`/v2/deployments/${d.id}/endpoints/production`, { revision_id: d.revisions[0] })).status,
      201,
    );
    const before = await endpointRows();
    const eventsBefore = await endpointEvents(d.id);
    const answers = [
      await other.api.get(`/v2/deployments/${d.id}/endpoints`),
      await other.api.get(`/v2/deployments/${d.id}/endpoints/production`),
      await other.api.put(`/v2/deployments/${d.id}/endpoints/production`, { revision_id: d.revisions[0] }),
      await other.api.put(`/v2/deployments/${d.id}/endpoints/mine`, { revision_id: d.revisions[0] }),
      await other.api.delete(`/v2/deployments/${d.id}/endpoints/production`),
    ];
    assert.deepEqual(
      answers.map((a) => a.status),
      [404, 404, 404, 404, 404],
    );
    for (const answer of answers) assert.doesNotMatch(JSON.stringify(answer.body), new RegExp(d.revisions[0]!));
    assert.deepEqual(await endpointRows(), before);
    assert.deepEqual(await endpointEvents(d.id), eventsBefore);
  });

  test("a revision of another deployment (the caller's own, or another workspace's) cannot be pinned", async () => {
    const d = await deployment('pinned');
    const mine = await deployment('neighbour');
    const theirs = await deployment('theirs', 1, other.api);
    const before = await endpointRows();
    for (const revisionId of [mine.revisions[0], theirs.revisions[0]]) {
      const answer = await api.put(`/v2/deployments/${d.id}/endpoints/production`, { revision_id: revisionId });
      assert.equal(answer.status, 400, JSON.stringify(answer.body));
      assert.equal(answer.body.code, 'invalid_reference');
    }
    // And the other workspace cannot pin one of ours to its own deployment.
    const stolen = await other.api.put(`/v2/deployments/${theirs.id}/endpoints/production`, {
      revision_id: d.revisions[0],
    });
    assert.equal(stolen.status, 400);
    assert.deepEqual(await endpointRows(), before);
  });

  test('a revision that has not deployed cannot be pinned', async () => {
    const d = await deployment('unbuilt');
    const patched = await api.patch(`/v2/deployments/${d.id}`, {
      source_revision_config: { image_uri: 'registry.example.com/unbuilt:2' },
    });
    assert.equal(patched.status, 200);
    const queued = (await api.get(`/v2/deployments/${d.id}/revisions`)).body.resources[0];
    assert.notEqual(queued.status, 'DEPLOYED');
    const answer = await api.put(`/v2/deployments/${d.id}/endpoints/staging`, { revision_id: queued.id });
    assert.equal(answer.status, 400);
    assert.match(answer.body.detail, /only a revision that built and deployed/);
    assert.equal((await api.get(`/v2/deployments/${d.id}/endpoints`)).body.resources.length, 0);
  });

  test('hostile endpoint names are a 4xx that changes nothing', async () => {
    const d = await deployment('names');
    const revision_id = d.revisions[0];
    const before = await endpointRows();
    const hostile = [
      'a--b', // would split the host label twice
      'Production', // upper case
      'pr%C3%B6d', // unicode (prod with an umlaut)
      '%E2%80%8Bprod', // a zero-width space
      '-staging',
      'staging-',
      'x'.repeat(64),
      'x'.repeat(63 - d.slug.length - 1), // the host label would be 64 characters
      'x-0b9e1c2d', // `<slug>--x-0b9e1c2d` reads as the slug of a deployment named `<slug>--x`
      'x-0b9e1c2d5d2a4f1e',
      'a.b',
      '%2E%2E',
    ];
    for (const name of hostile) {
      const answer = await api.put(`/v2/deployments/${d.id}/endpoints/${name}`, { revision_id });
      assert.ok(
        answer.status >= 400 && answer.status < 500,
        `${name}: ${answer.status} ${JSON.stringify(answer.body)}`,
      );
    }
    // The longest name that fits is taken.
    const longest = 'x'.repeat(63 - d.slug.length - 2);
    assert.equal((await api.put(`/v2/deployments/${d.id}/endpoints/${longest}`, { revision_id })).status, 201);
    await api.delete(`/v2/deployments/${d.id}/endpoints/${longest}`);
    assert.deepEqual(await endpointRows(), before);
  });

  test("an endpoint named pr-<n> is a pull request preview's: creating or moving one by hand is a 400 that changes nothing", async () => {
    const d = await deployment('reserved-names', 2);
    const [first, second] = d.revisions as [string, string];
    const before = await endpointRows();
    for (const name of ['pr-1', 'pr-42', 'pr-0']) {
      const answer = await api.put(`/v2/deployments/${d.id}/endpoints/${name}`, { revision_id: first });
      assert.equal(answer.status, 400, `${name}: ${JSON.stringify(answer.body)}`);
      assert.equal(answer.body.code, 'endpoint_name_reserved', JSON.stringify(answer.body));
      assert.match(answer.body.detail, /kept for the preview of pull request/);
    }
    assert.deepEqual(await endpointRows(), before, 'no endpoint was made');

    // A preview's endpoint the webhooks made (its row, as pinPreviewEndpoint writes it) cannot be moved by hand.
    await t.database.db
      .insertInto('deployment_endpoints')
      .values({ deployment_id: d.id, name: 'pr-7', revision_id: first })
      .execute();
    const moved = await api.put(`/v2/deployments/${d.id}/endpoints/pr-7`, { revision_id: second });
    assert.equal(moved.status, 400, JSON.stringify(moved.body));
    assert.equal(moved.body.code, 'endpoint_name_reserved');
    const row = await t.database.db
      .selectFrom('deployment_endpoints')
      .select('revision_id')
      .where('deployment_id', '=', d.id)
      .where('name', '=', 'pr-7')
      .executeTakeFirstOrThrow();
    assert.equal(row.revision_id, first, 'the preview stays on its revision');
    // Names that only look alike are anyone's.
    for (const name of ['pr', 'pr-x', 'preview-1', 'pr-1-b']) {
      const answer = await api.put(`/v2/deployments/${d.id}/endpoints/${name}`, { revision_id: first });
      assert.equal(answer.status, 201, `${name}: ${JSON.stringify(answer.body)}`);
    }
  });
});

describe('endpoints and the workspace quota', () => {
  test("each endpoint counts as a copy of its deployment's instances: one past the quota is a 422 that changes nothing, and a patch counts them too", async () => {
    const ws = await newWorkspace(t, 'quota-team');
    const quota = await client(t.app, t.orgKey).patch(`/v2/workspaces/${ws.id}/quota`, { instances: 3 });
    assert.equal(quota.status, 200, JSON.stringify(quota.body));
    const made = await ws.api.post('/v2/deployments', {
      name: 'counted',
      source: 'internal_container',
      source_config: { resource_spec: { min_scale: 1 } },
      source_revision_config: { image_uri: 'registry.example.com/counted:1' },
    });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    await t.database.db
      .updateTable('revisions')
      .set({ status: 'DEPLOYED' })
      .where('deployment_id', '=', made.body.id)
      .execute();
    const revision_id = (await ws.api.get(`/v2/deployments/${made.body.id}/revisions`)).body.resources[0].id;
    const url = (name: string) => `/v2/deployments/${made.body.id}/endpoints/${name}`;
    assert.equal((await ws.api.put(url('staging'), { revision_id })).status, 201);
    assert.equal((await ws.api.put(url('production'), { revision_id })).status, 201);
    // Three instances in use: the deployment's and one per endpoint.
    assert.equal((await ws.api.get(`/v2/workspaces/${ws.id}`)).body.usage.instances, 3);
    const over = await ws.api.put(url('preview'), { revision_id });
    assert.equal(over.status, 422, JSON.stringify(over.body));
    assert.equal(over.body.detail[0].type, 'quota_exceeded');
    assert.equal((await ws.api.get(`/v2/deployments/${made.body.id}/endpoints`)).body.resources.length, 2);
    // Moving an existing endpoint takes nothing more.
    assert.equal((await ws.api.put(url('staging'), { revision_id })).status, 200);
    // Scaling the deployment up scales its endpoints too: 2 x 3 instances is over the quota.
    const scaled = await ws.api.patch(`/v2/deployments/${made.body.id}`, {
      source_config: { resource_spec: { min_scale: 2 } },
    });
    assert.equal(scaled.status, 422, JSON.stringify(scaled.body));
    // The refusal tells the endpoints' copies apart from the other deployments (there are none).
    const issue = scaled.body.detail[0];
    assert.equal(issue.type, 'quota_exceeded');
    assert.match(issue.msg, /quota allows 3 instances in all/, issue.msg);
    assert.match(issue.msg, /other deployments and their endpoints use 0\b/, issue.msg);
    assert.match(issue.msg, /this deployment and its 2 endpoints .* may have at most 3 together/, issue.msg);
    assert.match(issue.msg, /they ask 6: 2 for the deployment and 2 for each endpoint/, issue.msg);
  });
});
