/**
 * An API server that has just started answers 403 to everything until its authorization cache has
 * synced (issue 25, defect 1: seen in 2 of 4 restarts of a real control plane). The agent must not
 * take that for a missing Role: a rollout in flight, and a deployment made while the API server
 * starts, end DEPLOYED once the cache has synced, with no DEPLOY_FAILED on the way.
 */
import assert from 'node:assert/strict';
import { afterEach, describe } from 'node:test';
import { NAMESPACE, deployment, startWorld, type World } from './harness.ts';
import { test } from '../support/limited-test.ts';

describe('listener agent: an API server that restarts', { timeout: 120_000 }, () => {
  let world: World;
  afterEach(async () => {
    await world.close();
  });

  /** The first of `statuses` reported for the revision. */
  const firstOf = (revisionId: string, ...statuses: string[]) =>
    world.slipway.waitFor(() =>
      world.slipway.reports.find((r) => r.revision_id === revisionId && statuses.includes(r.status)),
    );
  /** The agent has asked again, and been refused, a few times: what it makes of it is visible by now. */
  const refusedAFewTimes = () =>
    world.kube.waitFor(() => world.kube.forbiddenAnswers.filter((a) => a.verb === 'list').length >= 21);

  test('a rollout in flight goes on through the 403s of a restart', async () => {
    world = await startWorld();
    const d = deployment({ name: 'in-flight' });
    world.slipway.upsert(d);
    const agent = world.start();
    await firstOf(d.revision!.id, 'DEPLOYING');

    world.kube.restart();
    await refusedAFewTimes();
    world.kube.syncAuthorization();
    world.kube.markAvailable(NAMESPACE, 'in-flight');

    const final = await firstOf(d.revision!.id, 'DEPLOYED', 'DEPLOY_FAILED');
    assert.equal(final.status, 'DEPLOYED', `${final.failure_reason}: ${final.message}`);
    assert.deepEqual(world.slipway.statusesOf(d.revision!.id), ['AWAITING_DEPLOY', 'DEPLOYING', 'DEPLOYED']);
    await agent.stop();
  });

  test('a deployment made while the API server starts deploys once its authorization cache has synced', async () => {
    world = await startWorld();
    world.kube.restart();
    const d = deployment({ name: 'early' });
    world.slipway.upsert(d);
    const agent = world.start();
    await refusedAFewTimes();
    world.kube.syncAuthorization();

    const applied = await firstOf(d.revision!.id, 'DEPLOYING', 'DEPLOY_FAILED');
    assert.equal(applied.status, 'DEPLOYING', `${applied.failure_reason}: ${applied.message}`);
    world.kube.markAvailable(NAMESPACE, 'early');
    await firstOf(d.revision!.id, 'DEPLOYED');
    assert.deepEqual(world.slipway.statusesOf(d.revision!.id), ['AWAITING_DEPLOY', 'DEPLOYING', 'DEPLOYED']);
    await agent.stop();
  });
});
