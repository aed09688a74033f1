/**
 * In-place changes (docs/listener-protocol.md, "In-place fields"): a `source_config.resource_spec` or
 * `secret_references` patch makes no revision, yet the listener's desired state carries the new
 * values at once (under a new ETag, waking a waiting long-poll), for the revision already running. A
 * redeploy of an older revision puts that revision's values back.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe } from 'node:test';
import { test } from '../support/limited-test.ts';
import pg from 'pg';
import {
  agent,
  createProtocolFixture,
  fetchDesiredState,
  newDeployment,
  newListener,
  type ProtocolFixture,
} from './protocol-fixture.ts';
import { pause } from '../support/wait.ts';

let f: ProtocolFixture;
before(async () => {
  f = await createProtocolFixture();
});
after(() => f.close());

/** A deployment on a new listener whose first revision the listener reported DEPLOYED. */
async function deployed(resourceSpec: Record<string, unknown>) {
  const l = await newListener(f.api);
  const d = await newDeployment(f.api, l.id, {
    source_config: { listener_id: l.id, resource_spec: resourceSpec },
    secret_references: [{ name: 'DB_PASSWORD', secret_name: 'db', secret_key: 'password' }],
  });
  const report = await agent(f, l).report({ revision_id: d.revisionId, status: 'DEPLOYED' });
  assert.equal(report.body.applied, true, JSON.stringify(report.body));
  return { l, d };
}

async function revisionCount(deploymentId: string): Promise<number> {
  const rows = await f.t.database.db
    .selectFrom('revisions')
    .select('id')
    .where('deployment_id', '=', deploymentId)
    .execute();
  return rows.length;
}

describe('in-place fields', () => {
  test('a resource_spec patch answers a waiting long-poll with the new spec for the same, still DEPLOYED revision', async () => {
    const { l, d } = await deployed({ min_scale: 1, cpu: 0.5 });
    const first = await fetchDesiredState(f, l);
    assert.equal(first.status, 200);
    assert.deepEqual(first.body.deployments[0].resource_spec, { min_scale: 1, cpu: 0.5 });

    const waiting = fetchDesiredState(f, l, { wait: 30, etag: first.etag! });
    await pause(300, 'the long-poll reaches its wait (unseen; the test passes without it, by the first read)');
    const patched = await f.api.patch(`/v2/deployments/${d.id}`, {
      source_config: { resource_spec: { min_scale: 3, cpu: 0.5 } },
    });
    assert.equal(patched.status, 200, JSON.stringify(patched.body));
    assert.equal(patched.body.latest_revision_id, d.revisionId, 'no new revision');

    const answered = await waiting;
    assert.equal(answered.status, 200);
    assert.notEqual(answered.etag, first.etag);
    const entry = answered.body.deployments[0];
    assert.deepEqual(entry.resource_spec, { min_scale: 3, cpu: 0.5 });
    assert.equal(entry.revision.id, d.revisionId);
    assert.equal(entry.revision.status, 'DEPLOYED');
    // Agents that read the spec from the revision get the new one too.
    assert.deepEqual(entry.revision.resource_spec, { min_scale: 3, cpu: 0.5 });
    assert.equal(await revisionCount(d.id), 1);

    const again = await agent(f, l).desiredState('', { 'if-none-match': answered.etag! });
    assert.equal(again.status, 304, 'the ETag is stable for the patched state');
  });

  test('a secret_references patch alone notifies the change feed and shows in the desired state', async () => {
    const { l, d } = await deployed({ min_scale: 1 });
    const before = await agent(f, l).desiredState();

    const listening = new pg.Client({ connectionString: f.t.database.url });
    await listening.connect();
    try {
      const heard: string[] = [];
      listening.on('notification', (message) => heard.push(message.payload ?? ''));
      await listening.query('listen slipway_changes');
      const patched = await f.api.patch(`/v2/deployments/${d.id}`, {
        secret_references: [{ name: 'DB_PASSWORD', secret_name: 'db-rotated', secret_key: 'password' }],
      });
      assert.equal(patched.status, 200, JSON.stringify(patched.body));
      // Notifications arrive in commit order: once this marker is heard, the patch's would have been.
      const marker = randomUUID();
      const markerHeard = new Promise<void>((resolve) =>
        listening.on('notification', (message) => {
          if (message.payload?.includes(marker)) resolve();
        }),
      );
      await f.t.database.db
        .selectNoFrom((eb) =>
          eb
            .fn('pg_notify', [eb.val('slipway_changes'), eb.val(JSON.stringify({ kind: 'log', revision_id: marker }))])
            .as('sent'),
        )
        .execute();
      await markerHeard;
      assert.ok(
        heard.some((payload) => payload.includes(d.id)),
        `a notification names the deployment; heard ${JSON.stringify(heard)}`,
      );
    } finally {
      await listening.end();
    }

    const after = await agent(f, l).desiredState('', { 'if-none-match': String(before.headers.etag) });
    assert.equal(after.status, 200, 'a new ETag');
    assert.deepEqual(after.body.deployments[0].secret_references, [
      { name: 'DB_PASSWORD', secret_name: 'db-rotated', secret_key: 'password' },
    ]);
    assert.deepEqual(after.body.deployments[0].revision.secret_references, [
      { name: 'DB_PASSWORD', secret_name: 'db-rotated', secret_key: 'password' },
    ]);
    assert.equal(after.body.deployments[0].revision.id, d.revisionId);
    assert.equal(await revisionCount(d.id), 1);
  });

  test("a redeploy of an older revision puts its image back in the desired state and keeps the deployment's scale", async () => {
    const { l, d } = await deployed({ min_scale: 2 });
    const a = agent(f, l);
    const second = await f.api.patch(`/v2/deployments/${d.id}`, {
      source_config: { resource_spec: { min_scale: 5 } },
      source_revision_config: { image_uri: 'ghcr.io/acme/agent:2.0.0' },
    });
    assert.equal(second.status, 200, JSON.stringify(second.body));
    await a.report({ revision_id: second.body.latest_revision_id, status: 'DEPLOYED' });
    assert.deepEqual((await a.desiredState()).body.deployments[0].resource_spec, { min_scale: 5 });

    const rolled = await f.api.post(`/v2/deployments/${d.id}/revisions/${d.revisionId}/redeploy`);
    assert.equal(rolled.status, 201, JSON.stringify(rolled.body));
    const entry = (await a.desiredState()).body.deployments[0];
    assert.equal(entry.revision.id, rolled.body.latest_revision_id);
    assert.equal(entry.revision.image_uri, 'ghcr.io/acme/agent:1.0.0');
    // Scale is the deployment's (docs/lifecycle.md, "What a redeploy restores").
    assert.deepEqual(entry.resource_spec, { min_scale: 5 });
    assert.deepEqual(entry.revision.resource_spec, { min_scale: 5 });
  });

  test('when the latest revision failed, the active one runs with the deployment’s current spec', async () => {
    const { l, d } = await deployed({ min_scale: 1 });
    const a = agent(f, l);
    const next = await f.api.patch(`/v2/deployments/${d.id}`, {
      source_config: { resource_spec: { min_scale: 4 } },
      source_revision_config: { image_uri: 'ghcr.io/acme/agent:broken' },
    });
    await a.report({ revision_id: next.body.latest_revision_id, status: 'DEPLOY_FAILED' });
    const entry = (await a.desiredState()).body.deployments[0];
    assert.equal(entry.revision.id, d.revisionId, 'back to the active revision');
    assert.equal(entry.revision.image_uri, 'ghcr.io/acme/agent:1.0.0');
    assert.deepEqual(entry.resource_spec, { min_scale: 4 }, 'what the deployment shows');
  });
});
