/**
 * `slipway endpoints ls|set|promote|rm` and the SDK's `endpoints`, against a real service (real HTTP and
 * PostgreSQL, no data plane: revisions are marked DEPLOYED as the data plane would, and moves are not
 * waited for). Attacker's view: another workspace's deployment is not found by name or id, and a refused
 * name is the API's message with the usage exit code, changing nothing.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { SlipwayClient, endpointFailure } from '@slipway/sdk';
import { ADMIN_KEY, client, createTestApp, newWorkspace, type TestApp } from '../helpers.ts';
import { cliUser, type CliUser } from './cli-runner.ts';

let t: TestApp;
let base: string;
let user: CliUser;
let api: ReturnType<typeof client>;
before(async () => {
  t = await createTestApp();
  await t.app.listen({ port: 0, host: '127.0.0.1' });
  const address = t.app.server.address();
  assert.ok(address && typeof address === 'object');
  base = `http://127.0.0.1:${address.port}`;
  api = client(t.app);
  user = await cliUser({ SLIPWAY_URL: base, SLIPWAY_API_KEY: ADMIN_KEY });
});
after(async () => {
  await user.remove();
  await t.close();
});

async function deployment(as: ReturnType<typeof client>, name: string, revisions: number) {
  const made = await as.post('/v2/deployments', {
    name,
    source: 'internal_container',
    source_revision_config: { image_uri: `reg.example.com/${name}:1` },
  });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  for (let i = 2; i <= revisions; i++)
    await as.patch(`/v2/deployments/${made.body.id}`, {
      source_revision_config: { image_uri: `reg.example.com/${name}:${i}` },
    });
  await t.database.db
    .updateTable('revisions')
    .set({ status: 'DEPLOYED' })
    .where('deployment_id', '=', made.body.id)
    .execute();
  const listed = await as.get(`/v2/deployments/${made.body.id}/revisions`);
  return {
    id: made.body.id as string,
    revisions: (listed.body.resources as { id: string }[]).map((r) => r.id).reverse(),
  };
}

test('set, promote, ls and rm through the CLI; the revision by its id prefix; the deployment by name', async () => {
  const d = await deployment(api, 'cli-shop', 2);
  const [first, second] = d.revisions as [string, string];
  const staging = await user.run(['endpoints', 'set', 'cli-shop', 'staging', second.slice(0, 8), '--no-wait']);
  assert.equal(staging.code, 0, staging.stderr);
  assert.match(staging.stdout, new RegExp(`staging is pinned to revision ${second}`));
  const production = await user.run(['endpoints', 'set', 'cli-shop', 'production', first, '--no-wait', '--json']);
  assert.equal(production.code, 0, production.stderr);
  assert.equal(JSON.parse(production.stdout).revision_id, first);

  const promoted = await user.run(['endpoints', 'promote', 'cli-shop', 'staging', 'production', '--no-wait']);
  assert.equal(promoted.code, 0, promoted.stderr);
  assert.equal((await api.get(`/v2/deployments/${d.id}/endpoints/production`)).body.revision_id, second);

  const listed = await user.run(['endpoints', 'ls', 'cli-shop']);
  assert.equal(listed.code, 0, listed.stderr);
  assert.match(listed.stdout, /production/);
  assert.match(listed.stdout, /staging/);
  assert.match(listed.stdout, new RegExp(second.slice(0, 8)));

  const removed = await user.run(['endpoints', 'rm', 'cli-shop', 'staging', '--yes']);
  assert.equal(removed.code, 0, removed.stderr);
  assert.deepEqual(
    (await api.get(`/v2/deployments/${d.id}/endpoints`)).body.resources.map((e: { name: string }) => e.name),
    ['production'],
  );
});

test("a refused name is the API's message with the usage exit code; another workspace's deployment is not found", async () => {
  const d = await deployment(api, 'cli-names', 1);
  const refused = await user.run(['endpoints', 'set', 'cli-names', 'a--b', d.revisions[0]!, '--no-wait']);
  assert.equal(refused.code, 2, refused.stderr);
  assert.match(refused.stderr, /--/);
  const other = await newWorkspace(t, 'cli-other');
  const theirs = await deployment(other.api, 'their-shop', 1);
  for (const ref of ['their-shop', theirs.id]) {
    const answer = await user.run(['endpoints', 'set', ref, 'staging', theirs.revisions[0]!, '--no-wait']);
    assert.equal(answer.code, 4, answer.stderr);
  }
  assert.equal((await other.api.get(`/v2/deployments/${theirs.id}/endpoints`)).body.resources.length, 0);
  assert.equal((await api.get(`/v2/deployments/${d.id}/endpoints`)).body.resources.length, 0);
});

test("the SDK's waitServed ends with the data plane's failure for the revision, not an older move's", async () => {
  const d = await deployment(api, 'sdk-wait', 2);
  const [first, second] = d.revisions as [string, string];
  const sdk = new SlipwayClient({ baseUrl: base, apiKey: ADMIN_KEY });
  await sdk.endpoints.set(d.id, 'staging', first);
  // What the worker writes when the revision's instances do not become healthy.
  const failure = (revisionId: string, message: string) =>
    t.database.db
      .insertInto('events')
      .values({
        workspace_id: t.workspaceId,
        subject_type: 'deployment',
        subject_id: d.id,
        deployment_id: d.id,
        type: 'deployment.endpoint_failed',
        data: JSON.stringify({ endpoint: 'staging', revision_id: revisionId, message }),
      })
      .execute();
  await failure(second, 'an older attempt at the second revision');
  await sdk.endpoints.set(d.id, 'staging', second);
  await failure(second, 'health check failed');
  await assert.rejects(sdk.endpoints.waitServed(d.id, 'staging', second, { everyMs: 10 }), /health check failed/);
  // Served: the answer.
  await t.database.db
    .updateTable('deployment_endpoints')
    .set({ served_revision_id: second })
    .where('deployment_id', '=', d.id)
    .execute();
  assert.equal((await sdk.endpoints.waitServed(d.id, 'staging', second)).served_revision_id, second);
});

test('a failure of an earlier move to the same revision is not taken for the current one', () => {
  const set = (to: string) => ({ type: 'deployment.endpoint_set', data: { endpoint: 'staging', to_revision_id: to } });
  const failed = (revision: string, message: string) => ({
    type: 'deployment.endpoint_failed',
    data: { endpoint: 'staging', revision_id: revision, message },
  });
  const other = {
    type: 'deployment.endpoint_failed',
    data: { endpoint: 'production', revision_id: 'r2', message: 'x' },
  };
  // Newest first.
  assert.equal(endpointFailure([set('r2'), failed('r2', 'old'), set('r2')], 'staging', 'r2'), null);
  assert.equal(endpointFailure([other, failed('r2', 'new'), set('r2'), failed('r2', 'old')], 'staging', 'r2'), 'new');
  assert.equal(endpointFailure([failed('r1', 'of r1'), set('r2')], 'staging', 'r2'), null);
  assert.equal(endpointFailure([other], 'staging', 'r2'), null);
});
