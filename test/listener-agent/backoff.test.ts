/**
 * Back-off is per deployment (issue 25, defect 3): a deployment whose applies keep failing waits its
 * own back-off, while a healthy new deployment and a deletion go through at once, and a change of the
 * failing deployment (here, a new revision) is tried at once rather than after its back-off.
 *
 * The agent's back-off starts at two minutes here, so that "at once" and "after the back-off" cannot
 * be mistaken for each other: each wait below would outlast its test's deadline (which only ends a
 * hung test) if it were held up by the failing deployment's back-off.
 */
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe } from 'node:test';
import { TRANSIENT_ANSWERS } from './fake-kube.ts';
import { NAMESPACE, deployment, revision, startWorld, type World } from './harness.ts';
import { test } from '../support/limited-test.ts';

describe('listener agent: back-off per deployment', () => {
  let world: World;
  beforeEach(async () => {
    world = await startWorld({}, { heartbeatSeconds: 1 }, { backoff: { baseMs: 120_000, maxMs: 600_000 } });
  });
  afterEach(async () => {
    await world.close();
  });

  const firstOf = (revisionId: string, ...statuses: string[]) =>
    world.slipway.waitFor(() =>
      world.slipway.reports.find((r) => r.revision_id === revisionId && statuses.includes(r.status)),
    );
  const stuckApplies = () => world.kube.applies().filter((r) => r.path.endsWith('/secrets/stuck-secrets')).length;

  test('one failing deployment holds up no other; a change of it is tried at once', { timeout: 60_000 }, async () => {
    world.kube.failApplies('Secret', 'stuck-secrets', TRANSIENT_ANSWERS.unavailable!);
    const stuck = deployment({ name: 'stuck' });
    const leaving = deployment({ name: 'leaving', revision: null });
    world.slipway.upsert(stuck);
    world.slipway.upsert(leaving);
    const agent = world.start();
    await world.kube.waitFor(() => stuckApplies() >= 1);

    // The failing deployment is in back-off; a new one deploys and a deletion is confirmed meanwhile.
    const healthy = deployment({ name: 'healthy' });
    world.slipway.upsert(healthy);
    await firstOf(healthy.revision!.id, 'DEPLOYING');
    world.kube.markAvailable(NAMESPACE, 'healthy');
    await firstOf(healthy.revision!.id, 'DEPLOYED');
    world.slipway.upsert({ ...leaving, delete: true });
    await world.slipway.waitFor(() => world.slipway.deletions.includes(leaving.deployment_id));
    assert.equal(stuckApplies(), 1, 'the failing deployment waits for its own back-off');
    const told = await world.slipway.waitFor(() =>
      world.slipway.heartbeats.find((h) => h.message?.includes('stuck-secrets')),
    );
    assert.match(told.message!, /upstream connect error/, 'the heartbeat says what fails');
    assert.deepEqual(world.slipway.statusesOf(stuck.revision!.id), []);

    // The API server is healthy again and the user ships a new revision: it does not wait for the back-off.
    world.kube.acceptApply('Secret', 'stuck-secrets');
    const next = revision({ image_uri: 'ghcr.io/acme/support-agent:1.5.0' });
    world.slipway.upsert({ ...world.slipway.deployment(stuck.deployment_id)!, revision: next });
    await firstOf(next.id, 'DEPLOYING');
    world.kube.markAvailable(NAMESPACE, 'stuck');
    await firstOf(next.id, 'DEPLOYED');
    await agent.stop();
  });
});
