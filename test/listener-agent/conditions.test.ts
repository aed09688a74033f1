/**
 * What the agent's heartbeat says about the revision serving each deployment (docs/listener.md,
 * "Statuses and failure reasons"): a DEPLOYED revision is never reported again, so an in-place change
 * the cluster refuses or that does not roll out, and pods of the serving revision crash-looping, are
 * told per deployment in the heartbeat's `deployments`; a healthy deployment is left out.
 */
import assert from 'node:assert/strict';
import { afterEach, describe } from 'node:test';
import type { FakeDeployment } from './fake-slipway.ts';
import { NAMESPACE, deployment, revision, startWorld, type World } from './harness.ts';
import { test } from '../support/limited-test.ts';

describe('listener agent: the condition of a serving revision in the heartbeat', { timeout: 120_000 }, () => {
  let world: World;
  afterEach(async () => {
    await world.close();
  });

  async function deployedOn(w: World, name: string): Promise<FakeDeployment> {
    const spec = { min_scale: 1 };
    const d = deployment({ name, resource_spec: spec, revision: revision({ resource_spec: spec }) });
    w.slipway.upsert(d);
    await w.slipway.waitFor(() => w.slipway.statusesOf(d.revision!.id).includes('DEPLOYING'));
    w.kube.markAvailable(NAMESPACE, name);
    await w.slipway.waitFor(() => w.slipway.statusesOf(d.revision!.id).includes('DEPLOYED'));
    return w.slipway.deployment(d.deployment_id)!;
  }

  /** The first heartbeat from `from` on whose conditions pass `check`. */
  const heartbeatWhere = (
    from: number,
    check: (conditions: NonNullable<World['slipway']['heartbeats'][number]['deployments']>) => boolean,
  ) =>
    world.slipway.waitFor(() => {
      const found = world.slipway.heartbeats
        .slice(from)
        .find((h) => h.deployments !== undefined && check(h.deployments));
      return found;
    });

  test('a refused in-place change is update_failed for the serving revision; a change that applies clears it', async () => {
    world = await startWorld({}, { heartbeatSeconds: 1 });
    world.start();
    const d = await deployedOn(world, 'refused');
    const start = world.slipway.heartbeats.length;

    world.kube.refuseApply('Deployment', 'refused', 'spec.template.spec.containers[0].resources: Invalid value');
    world.slipway.upsert({ ...d, resource_spec: { min_scale: 1, cpu: 64 } });
    const told = await heartbeatWhere(start, (c) => c.some((x) => x.deployment_id === d.deployment_id));
    const [condition] = told.deployments!;
    assert.equal(condition!.revision_id, d.revision!.id);
    assert.equal(condition!.condition, 'update_failed');
    assert.equal(condition!.reason, 'invalid_manifest');
    assert.match(condition!.message, /Invalid value/);
    assert.ok(told.observed_at !== undefined && !Number.isNaN(Date.parse(told.observed_at)));

    world.kube.acceptApply('Deployment', 'refused');
    world.slipway.upsert({ ...d, resource_spec: { min_scale: 2 } });
    await world.kube.waitFor(() => world.kube.get('Deployment', NAMESPACE, 'refused')?.metadata.generation === 2);
    world.kube.markAvailable(NAMESPACE, 'refused');
    const healed = world.slipway.heartbeats.length;
    await heartbeatWhere(healed, (c) => c.length === 0);
  });

  test('an in-place change that makes no progress is update_failed with the rollout reason', async () => {
    world = await startWorld({}, { heartbeatSeconds: 1 });
    world.start();
    const d = await deployedOn(world, 'stuck');
    const start = world.slipway.heartbeats.length;
    world.slipway.upsert({ ...d, resource_spec: { min_scale: 3 } });
    await world.kube.waitFor(
      () => (world.kube.get('Deployment', NAMESPACE, 'stuck')?.spec as { replicas?: number })?.replicas === 3,
    );
    world.kube.exceedProgressDeadline(NAMESPACE, 'stuck');
    const told = await heartbeatWhere(start, (c) => c.length > 0);
    assert.deepEqual(
      told.deployments!.map((c) => [c.deployment_id, c.condition, c.reason]),
      [[d.deployment_id, 'update_failed', 'progress_deadline_exceeded']],
    );
  });

  test('pods of the serving revision crash-looping are crash_loop; healthy again, the deployment is left out', async () => {
    world = await startWorld({}, { heartbeatSeconds: 1 });
    world.start();
    const d = await deployedOn(world, 'crashing');
    const start = world.slipway.heartbeats.length;

    // One crash (an OOM kill, say) is not a crash loop yet: the heartbeat after it says nothing.
    world.kube.failPods(NAMESPACE, 'crashing', 'CrashLoopBackOff', 'back-off 10s', 'Deployment', 1);
    const once = world.slipway.heartbeats.length;
    const quiet = await heartbeatWhere(once + 1, () => true);
    assert.deepEqual(quiet.deployments, []);

    world.kube.failPods(NAMESPACE, 'crashing', 'CrashLoopBackOff', 'back-off 40s restarting failed container');
    const told = await heartbeatWhere(start, (c) => c.length > 0);
    assert.deepEqual(
      told.deployments!.map((c) => [c.deployment_id, c.revision_id, c.condition, c.reason]),
      [[d.deployment_id, d.revision!.id, 'crash_loop', 'crash_loop']],
    );
    assert.match(told.deployments![0]!.message, /CrashLoopBackOff/);

    world.kube.markAvailable(NAMESPACE, 'crashing');
    await heartbeatWhere(world.slipway.heartbeats.length, (c) => c.length === 0);
    assert.deepEqual(
      world.slipway.statusesOf(d.revision!.id),
      ['AWAITING_DEPLOY', 'DEPLOYING', 'DEPLOYED'],
      'nothing is reported for the DEPLOYED revision',
    );
  });

  test('a new revision that fails is reported DEPLOY_FAILED, not put in the heartbeat', async () => {
    world = await startWorld({}, { heartbeatSeconds: 1 });
    world.start();
    const d = deployment({ name: 'new-crash' });
    world.slipway.upsert(d);
    await world.slipway.waitFor(() => world.slipway.statusesOf(d.revision!.id).includes('AWAITING_DEPLOY'));
    world.kube.failPods(NAMESPACE, 'new-crash', 'CrashLoopBackOff', 'back-off 10s restarting failed container');
    await world.slipway.waitFor(() => world.slipway.statusesOf(d.revision!.id).includes('DEPLOY_FAILED'));
    const after = world.slipway.heartbeats.length;
    const next = await heartbeatWhere(after, () => true);
    assert.deepEqual(next.deployments, []);
  });
});
