/**
 * In-place changes on the agent: the service sends a deployment's current `resource_spec` and
 * `secret_references` for the revision that runs, so a patch of them reaches the cluster without a
 * revision. The agent applies the new manifests for the same revision and reports nothing for it
 * (the service has it DEPLOYED); a change the API server refuses is logged and put in the heartbeat,
 * and the next change is tried again.
 */
import assert from 'node:assert/strict';
import { afterEach, describe } from 'node:test';
import type { KubeObject } from './fake-kube.ts';
import type { FakeDeployment } from './fake-slipway.ts';
import { NAMESPACE, deployment, revision, startWorld, type World } from './harness.ts';
import { test } from '../support/limited-test.ts';

type Container = { env?: { name: string; valueFrom?: { secretKeyRef?: { name: string; key: string } } }[] };
const replicasOf = (o: KubeObject | undefined) => (o?.spec as { replicas?: number } | undefined)?.replicas;
const containerOf = (o: KubeObject | undefined) =>
  (o?.spec as { template: { spec: { containers: Container[] } } } | undefined)?.template.spec.containers[0];

describe('listener agent: in-place changes of a deployed revision', { timeout: 120_000 }, () => {
  let world: World;
  afterEach(async () => {
    await world.close();
  });

  /** A deployment the agent rolled out and reported DEPLOYED, as the service now sends it. */
  async function deployedOn(w: World, name: string, minScale: number): Promise<FakeDeployment> {
    const spec = { min_scale: minScale };
    const d = deployment({ name, resource_spec: spec, revision: revision({ resource_spec: spec }) });
    w.slipway.upsert(d);
    await w.slipway.waitFor(() => w.slipway.statusesOf(d.revision!.id).includes('DEPLOYING'));
    w.kube.markAvailable(NAMESPACE, name);
    await w.slipway.waitFor(() => w.slipway.statusesOf(d.revision!.id).includes('DEPLOYED'));
    return w.slipway.deployment(d.deployment_id)!;
  }

  const replicasBecome = (name: string, n: number) =>
    world.kube.waitFor(() => {
      const app = world.kube.get('Deployment', NAMESPACE, name);
      return replicasOf(app) === n && app;
    });

  test('a new min_scale for the same revision scales the Deployment; nothing more is reported', async () => {
    world = await startWorld();
    const agent = world.start();
    const d = await deployedOn(world, 'scaled', 1);
    assert.equal(replicasOf(world.kube.get('Deployment', NAMESPACE, 'scaled')), 1);

    // The deployment's spec changes; the revision (its snapshot included) stays as it is.
    world.slipway.upsert({ ...d, resource_spec: { min_scale: 3 } });
    const scaled = await replicasBecome('scaled', 3);
    assert.equal(
      (scaled.spec as { template: { metadata: { labels: Record<string, string> } } }).template.metadata.labels[
        'slipway.dev/revision-id'
      ],
      d.revision!.id,
    );
    world.kube.markAvailable(NAMESPACE, 'scaled');

    world.slipway.upsert({
      ...d,
      resource_spec: { min_scale: 3 },
      secret_references: [{ name: 'DB_PASSWORD', secret_name: 'db', secret_key: 'password' }],
    });
    const referenced = await world.kube.waitFor(() => {
      const app = world.kube.get('Deployment', NAMESPACE, 'scaled');
      return containerOf(app)?.env?.some((e) => e.valueFrom?.secretKeyRef?.name === 'db') && app;
    });
    assert.equal(replicasOf(referenced), 3);
    await agent.stop();
    assert.deepEqual(
      world.slipway.statusesOf(d.revision!.id),
      ['AWAITING_DEPLOY', 'DEPLOYING', 'DEPLOYED'],
      'no report for a revision the service has as DEPLOYED',
    );
  });

  test('a redeploy of an older revision brings its min_scale back', async () => {
    world = await startWorld();
    const agent = world.start();
    const d = await deployedOn(world, 'rolled', 2);
    const next = revision({ image_uri: 'ghcr.io/acme/rolled:2', resource_spec: { min_scale: 5 } });
    world.slipway.upsert({ ...d, resource_spec: { min_scale: 5 }, revision: next });
    await replicasBecome('rolled', 5);
    await world.slipway.waitFor(() => world.slipway.statusesOf(next.id).includes('DEPLOYING'));
    world.kube.markAvailable(NAMESPACE, 'rolled');
    await world.slipway.waitFor(() => world.slipway.statusesOf(next.id).includes('DEPLOYED'));

    // A redeploy is a new revision with the old one's snapshot, which the deployment shows again.
    const redeployed = revision({ image_uri: d.revision!.image_uri, resource_spec: { min_scale: 2 } });
    world.slipway.upsert({ ...d, resource_spec: { min_scale: 2 }, revision: redeployed });
    await replicasBecome('rolled', 2);
    await agent.stop();
  });

  test('a refused in-place change is logged and in the heartbeat, not reported; a fixed spec is applied', async () => {
    world = await startWorld({}, { heartbeatSeconds: 1 });
    const agent = world.start();
    const d = await deployedOn(world, 'refused-change', 1);
    const applies = () => world.kube.applies().filter((r) => r.path.endsWith('/deployments/refused-change')).length;
    const before = applies();

    world.kube.refuseApply('Deployment', 'refused-change', 'spec.template.spec.containers[0].resources: Invalid value');
    world.slipway.upsert({ ...d, resource_spec: { min_scale: 1, cpu: 64 } });
    const told = await world.slipway.waitFor(() =>
      world.slipway.heartbeats.find(
        (h) => h.message?.includes('refused-change') && h.message.includes('Invalid value'),
      ),
    );
    assert.match(told.message!, /deployed revision not rolling out/);
    assert.equal(applies(), before + 1, 'refused once, not retried while nothing changes');
    assert.equal(replicasOf(world.kube.get('Deployment', NAMESPACE, 'refused-change')), 1, 'what ran stays');

    world.kube.acceptApply('Deployment', 'refused-change');
    world.slipway.upsert({ ...d, resource_spec: { min_scale: 2 } });
    await replicasBecome('refused-change', 2);
    await agent.stop();
    assert.deepEqual(world.slipway.statusesOf(d.revision!.id), ['AWAITING_DEPLOY', 'DEPLOYING', 'DEPLOYED']);
  });
});
