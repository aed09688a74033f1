/**
 * Status reports (docs/listener-protocol.md, "Status reports"): a listener moves its revisions through
 * the state table, each step with its event; DEPLOYED makes the revision active and the deployment
 * READY; repeated and stale reports change nothing; failures carry their reason and message.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { expireOverdueRevisions } from '../../src/pipeline/deadlines.ts';
import { stepsTo } from '../../src/service/listener-protocol.ts';
import {
  agent,
  createProtocolFixture,
  eventTrail,
  newDeployment,
  newListener,
  type ProtocolFixture,
} from './protocol-fixture.ts';

let f: ProtocolFixture;
before(async () => {
  f = await createProtocolFixture();
});
after(() => f.close());

const revisionOf = async (deploymentId: string, revisionId: string) =>
  (await f.api.get(`/v2/deployments/${deploymentId}/revisions/${revisionId}`)).body;

/**
 * A listener's deployment whose first revision serves, whose second the listener is deploying, and
 * whose third (the latest) is queued, not yet taken up.
 */
async function deployingBehindQueued() {
  const l = await newListener(f.api);
  const d = await newDeployment(f.api, l.id);
  const a = agent(f, l);
  await a.report({ revision_id: d.revisionId, status: 'DEPLOYED' });
  const patch = (image: string) =>
    f.api.patch(`/v2/deployments/${d.id}`, { source_revision_config: { image_uri: image } });
  const second: string = (await patch('ghcr.io/acme/agent:2.0.0')).body.latest_revision_id;
  await a.report({ revision_id: second, status: 'DEPLOYING' });
  const third: string = (await patch('ghcr.io/acme/agent:3.0.0')).body.latest_revision_id;
  return { d, a, second, third };
}

describe('to DEPLOYED', () => {
  test('a full sequence: each report moves the revision one step; DEPLOYED makes it active and the deployment READY', async () => {
    const l = await newListener(f.api);
    const d = await newDeployment(f.api, l.id);
    const a = agent(f, l);
    assert.equal((await f.api.get(`/v2/deployments/${d.id}`)).body.status, 'AWAITING_DATABASE');

    for (const status of ['AWAITING_DEPLOY', 'DEPLOYING']) {
      const res = await a.report({ revision_id: d.revisionId, status });
      assert.equal(res.status, 200, JSON.stringify(res.body));
      assert.deepEqual(res.body, { applied: true, status, not_applied_reason: null });
      assert.equal((await revisionOf(d.id, d.revisionId)).status, status);
    }
    const deployed = await a.report({
      revision_id: d.revisionId,
      status: 'DEPLOYED',
      message: 'all 2 replicas available',
    });
    assert.deepEqual(deployed.body, { applied: true, status: 'DEPLOYED', not_applied_reason: null });

    const deployment = (await f.api.get(`/v2/deployments/${d.id}`)).body;
    assert.equal(deployment.status, 'READY');
    assert.equal(deployment.active_revision_id, d.revisionId);
    assert.equal(deployment.remote_reconciled, true);
    const revision = await revisionOf(d.id, d.revisionId);
    assert.equal(revision.status, 'DEPLOYED');
    assert.equal(revision.remote_reconciled, true);

    assert.deepEqual(await eventTrail(f, d.id), [
      'deployment.created:->AWAITING_DATABASE',
      'revision.created:->CREATING',
      'revision.status_changed:CREATING->QUEUED',
      'revision.status_changed:QUEUED->AWAITING_DEPLOY',
      'revision.reported:->AWAITING_DEPLOY',
      'revision.status_changed:AWAITING_DEPLOY->DEPLOYING',
      'revision.reported:->DEPLOYING',
      'revision.status_changed:DEPLOYING->DEPLOYED',
      'revision.reported:->DEPLOYED',
      'deployment.active_revision_changed:->',
      'deployment.status_changed:AWAITING_DATABASE->READY',
    ]);
    const reported = await f.t.database.db
      .selectFrom('events')
      .select('data')
      .where('deployment_id', '=', d.id)
      .where('type', '=', 'revision.reported')
      .where('to_status', '=', 'DEPLOYED')
      .executeTakeFirstOrThrow();
    assert.deepEqual(reported.data, { listener_id: l.id, message: 'all 2 replicas available' });
  });

  test('steps the listener skipped are walked through in order, each with its event', async () => {
    const l = await newListener(f.api);
    const d = await newDeployment(f.api, l.id);
    const res = await agent(f, l).report({ revision_id: d.revisionId, status: 'DEPLOYED' });
    assert.deepEqual(res.body, { applied: true, status: 'DEPLOYED', not_applied_reason: null });
    const trail = (await eventTrail(f, d.id)).filter((e) => e.startsWith('revision.status_changed'));
    assert.deepEqual(trail, [
      'revision.status_changed:CREATING->QUEUED',
      'revision.status_changed:QUEUED->AWAITING_DEPLOY',
      'revision.status_changed:AWAITING_DEPLOY->DEPLOYING',
      'revision.status_changed:DEPLOYING->DEPLOYED',
    ]);
    assert.equal((await f.api.get(`/v2/deployments/${d.id}`)).body.active_revision_id, d.revisionId);
  });

  test('a new image replaces the active revision once it is DEPLOYED; the old one stays DEPLOYED', async () => {
    const l = await newListener(f.api);
    const d = await newDeployment(f.api, l.id);
    const a = agent(f, l);
    await a.report({ revision_id: d.revisionId, status: 'DEPLOYED' });
    const second = (
      await f.api.patch(`/v2/deployments/${d.id}`, {
        source_revision_config: { image_uri: 'ghcr.io/acme/agent:2.0.0' },
      })
    ).body.latest_revision_id;
    await a.report({ revision_id: second, status: 'DEPLOYING' });
    assert.equal(
      (await f.api.get(`/v2/deployments/${d.id}`)).body.active_revision_id,
      d.revisionId,
      'the old one serves until the new one is DEPLOYED',
    );
    await a.report({ revision_id: second, status: 'DEPLOYED' });
    const deployment = (await f.api.get(`/v2/deployments/${d.id}`)).body;
    assert.equal(deployment.active_revision_id, second);
    assert.equal(deployment.status, 'READY');
    assert.equal((await revisionOf(d.id, d.revisionId)).status, 'DEPLOYED');
  });
});

describe('idempotent and stale reports', () => {
  test('a retry after a lost reply changes nothing twice', async () => {
    const l = await newListener(f.api);
    const d = await newDeployment(f.api, l.id);
    const a = agent(f, l);
    await a.report({ revision_id: d.revisionId, status: 'DEPLOYING' });
    const before = await eventTrail(f, d.id);
    const again = await a.report({ revision_id: d.revisionId, status: 'DEPLOYING' });
    assert.deepEqual(again.body, { applied: false, status: 'DEPLOYING', not_applied_reason: 'duplicate' });
    await a.report({ revision_id: d.revisionId, status: 'DEPLOYED' });
    const deployedTrail = await eventTrail(f, d.id);
    const retried = await a.report({ revision_id: d.revisionId, status: 'DEPLOYED' });
    assert.deepEqual(retried.body, { applied: false, status: 'DEPLOYED', not_applied_reason: 'final' });
    assert.deepEqual(await eventTrail(f, d.id), deployedTrail, 'no second event');
    assert.equal(
      deployedTrail.length,
      before.length + 4,
      'DEPLOYED: its step, its report, the active revision and READY',
    );
  });

  test('concurrent identical reports: one applies, every step happens once', async () => {
    const l = await newListener(f.api);
    const d = await newDeployment(f.api, l.id);
    const a = agent(f, l);
    const results = await Promise.all(
      Array.from({ length: 6 }, () => a.report({ revision_id: d.revisionId, status: 'DEPLOYED' })),
    );
    assert.deepEqual(
      results.map((r) => r.status),
      [200, 200, 200, 200, 200, 200],
    );
    assert.equal(results.filter((r) => r.body.applied).length, 1);
    const trail = await eventTrail(f, d.id);
    assert.equal(trail.filter((e) => e === 'revision.status_changed:DEPLOYING->DEPLOYED').length, 1);
    assert.equal(trail.filter((e) => e === 'deployment.status_changed:AWAITING_DATABASE->READY').length, 1);
  });

  test('a status behind the current one never goes back', async () => {
    const l = await newListener(f.api);
    const d = await newDeployment(f.api, l.id);
    const a = agent(f, l);
    await a.report({ revision_id: d.revisionId, status: 'DEPLOYING' });
    const late = await a.report({ revision_id: d.revisionId, status: 'AWAITING_DEPLOY' });
    assert.deepEqual(late.body, { applied: false, status: 'DEPLOYING', not_applied_reason: 'behind' });
    assert.equal((await revisionOf(d.id, d.revisionId)).status, 'DEPLOYING');
  });

  test('a report for a revision older than the latest never overwrites newer state', async () => {
    const l = await newListener(f.api);
    const d = await newDeployment(f.api, l.id);
    const a = agent(f, l);
    await a.report({ revision_id: d.revisionId, status: 'DEPLOYING' });
    const second = (
      await f.api.patch(`/v2/deployments/${d.id}`, {
        source_revision_config: { image_uri: 'ghcr.io/acme/agent:2.0.0' },
      })
    ).body.latest_revision_id;
    await a.report({ revision_id: second, status: 'DEPLOYED' });

    const stale = await a.report({ revision_id: d.revisionId, status: 'DEPLOYED' });
    assert.equal(stale.body.applied, false);
    const deployment = (await f.api.get(`/v2/deployments/${d.id}`)).body;
    assert.equal(deployment.active_revision_id, second, 'the newer revision stays active');
    const old = await revisionOf(d.id, d.revisionId);
    assert.equal(old.status, 'INTERRUPTED', 'the listener replaced it before it was deployed');
    assert.equal(old.failure_reason, 'superseded');
    assert.deepEqual(stale.body, { applied: false, status: 'INTERRUPTED', not_applied_reason: 'final' });
  });

  test('a revision still on its way but no longer the latest: not applied (superseded)', async () => {
    const l = await newListener(f.api);
    const d = await newDeployment(f.api, l.id);
    const a = agent(f, l);
    await a.report({ revision_id: d.revisionId, status: 'AWAITING_DEPLOY' });
    const second = (
      await f.api.patch(`/v2/deployments/${d.id}`, {
        source_revision_config: { image_uri: 'ghcr.io/acme/agent:2.0.0' },
      })
    ).body.latest_revision_id;
    const stale = await a.report({ revision_id: d.revisionId, status: 'DEPLOYED' });
    assert.deepEqual(stale.body, { applied: false, status: 'AWAITING_DEPLOY', not_applied_reason: 'superseded' });
    assert.equal((await f.api.get(`/v2/deployments/${d.id}`)).body.active_revision_id, null);
    assert.equal((await revisionOf(d.id, second)).status, 'QUEUED');
  });

  test('the latest interrupted before the listener took it up: an older revision on its way ends with it, the active one keeps serving', async () => {
    const { d, a, second, third } = await deployingBehindQueued();
    // The listener has not reported the third yet; the user takes it back.
    assert.equal((await f.api.post(`/v2/deployments/${d.id}/revisions/${third}/interrupt`, {})).status, 200);

    const left = await revisionOf(d.id, second);
    assert.equal(
      left.status,
      'INTERRUPTED',
      'nothing works toward the second any more: it ends now, not at its deadline',
    );
    assert.equal(left.failure_reason, 'superseded');
    assert.match(left.failure_message, /Revision 3/);
    const late = await a.report({ revision_id: second, status: 'DEPLOYED' });
    assert.deepEqual(late.body, { applied: false, status: 'INTERRUPTED', not_applied_reason: 'final' });
    const deployment = (await f.api.get(`/v2/deployments/${d.id}`)).body;
    assert.equal(deployment.active_revision_id, d.revisionId, 'the first keeps serving');
    assert.equal((await revisionOf(d.id, d.revisionId)).status, 'DEPLOYED');
  });

  test('the latest past its deadline before the listener took it up: an older revision on its way ends with it', async () => {
    const { d, second, third } = await deployingBehindQueued();
    // The third waited in QUEUED for more than its day (the second only just started deploying).
    await f.t.database.pool.query(
      `update revisions set status_changed_at = now() - interval '25 hours' where id = $1`,
      [third],
    );
    assert.equal(await expireOverdueRevisions(f.t.database.db, new Date()), 1);

    assert.equal((await revisionOf(d.id, third)).status, 'UNKNOWN');
    const left = await revisionOf(d.id, second);
    assert.equal(left.status, 'INTERRUPTED');
    assert.equal(left.failure_reason, 'superseded');
    assert.equal((await f.api.get(`/v2/deployments/${d.id}`)).body.active_revision_id, d.revisionId);
  });

  test('a revision in a final state (interrupted by a user, skipped) is not applied', async () => {
    const l = await newListener(f.api);
    const d = await newDeployment(f.api, l.id);
    const a = agent(f, l);
    assert.equal((await f.api.post(`/v2/deployments/${d.id}/revisions/${d.revisionId}/interrupt`, {})).status, 200);
    const res = await a.report({ revision_id: d.revisionId, status: 'DEPLOYING' });
    assert.deepEqual(res.body, { applied: false, status: 'INTERRUPTED', not_applied_reason: 'final' });
  });
});

describe('failures and refusals', () => {
  test('DEPLOY_FAILED with reason and message shows on the revision; the previous revision keeps serving', async () => {
    const l = await newListener(f.api);
    const d = await newDeployment(f.api, l.id);
    const a = agent(f, l);
    await a.report({ revision_id: d.revisionId, status: 'DEPLOYED' });
    const second = (
      await f.api.patch(`/v2/deployments/${d.id}`, { source_revision_config: { image_uri: 'ghcr.io/acme/agent:typo' } })
    ).body.latest_revision_id;
    const res = await a.report({
      revision_id: second,
      status: 'DEPLOY_FAILED',
      failure_reason: 'image_pull_failed',
      message: 'Back-off pulling image "ghcr.io/acme/agent:typo": not found',
    });
    assert.deepEqual(res.body, { applied: true, status: 'DEPLOY_FAILED', not_applied_reason: null });
    const revision = await revisionOf(d.id, second);
    assert.equal(revision.status, 'DEPLOY_FAILED');
    assert.equal(revision.failure_reason, 'image_pull_failed');
    assert.equal(revision.failure_message, 'Back-off pulling image "ghcr.io/acme/agent:typo": not found');
    const deployment = (await f.api.get(`/v2/deployments/${d.id}`)).body;
    assert.equal(deployment.status, 'READY');
    assert.equal(deployment.active_revision_id, d.revisionId);
    const trail = await eventTrail(f, d.id);
    assert.ok(
      trail.includes('revision.status_changed:QUEUED->AWAITING_DEPLOY') &&
        trail.includes('revision.status_changed:AWAITING_DEPLOY->DEPLOY_FAILED'),
    );
  });

  test('DEPLOY_FAILED without a reason gets deploy_failed', async () => {
    const l = await newListener(f.api);
    const d = await newDeployment(f.api, l.id);
    await agent(f, l).report({ revision_id: d.revisionId, status: 'DEPLOYING' });
    await agent(f, l).report({ revision_id: d.revisionId, status: 'DEPLOY_FAILED' });
    const revision = await revisionOf(d.id, d.revisionId);
    assert.equal(revision.failure_reason, 'deploy_failed');
    assert.match(revision.failure_message, /listener/);
  });

  test('bad reports are 422; an unknown revision is 404', async () => {
    const l = await newListener(f.api);
    const d = await newDeployment(f.api, l.id);
    const a = agent(f, l);
    for (const [body, field] of [
      [{ revision_id: d.revisionId, status: 'BUILDING' }, 'status'],
      [{ revision_id: d.revisionId, status: 'QUEUED' }, 'status'],
      [{ revision_id: 'not-a-uuid', status: 'DEPLOYED' }, 'revision_id'],
      [
        { revision_id: d.revisionId, status: 'DEPLOY_FAILED', failure_reason: 'Not Machine Readable' },
        'failure_reason',
      ],
      [{ status: 'DEPLOYED' }, 'revision_id'],
    ] as const) {
      const res = await a.report(body);
      assert.equal(res.status, 422, JSON.stringify(body));
      assert.deepEqual(res.body.detail[0].loc, ['body', field]);
    }
    const missing = '00000000-0000-4000-8000-000000000000';
    const res = await a.report({ revision_id: missing, status: 'DEPLOYED' });
    assert.equal(res.status, 404);
    assert.equal(res.body.detail, `Revision ID ${missing} not found.`);
    assert.equal((await revisionOf(d.id, d.revisionId)).status, 'QUEUED');
  });
});

describe('the walk through the state table', () => {
  test('stepsTo follows the table through the listener steps only', () => {
    assert.deepEqual(stepsTo('QUEUED', 'DEPLOYED'), ['AWAITING_DEPLOY', 'DEPLOYING', 'DEPLOYED']);
    assert.deepEqual(stepsTo('QUEUED', 'DEPLOY_FAILED'), ['AWAITING_DEPLOY', 'DEPLOY_FAILED']);
    assert.deepEqual(stepsTo('AWAITING_DEPLOY', 'DEPLOYED'), ['DEPLOYING', 'DEPLOYED']);
    assert.deepEqual(stepsTo('DEPLOYING', 'DEPLOY_FAILED'), ['DEPLOY_FAILED']);
    assert.deepEqual(stepsTo('DEPLOYING', 'DEPLOYING'), []);
    assert.equal(stepsTo('DEPLOYING', 'AWAITING_DEPLOY'), null);
    assert.equal(stepsTo('DEPLOYED', 'DEPLOYING'), null);
    assert.equal(stepsTo('AWAITING_BUILD', 'DEPLOYED'), null, 'never through the build states');
  });
});
