/**
 * The agent against a fake cluster and a fake service: what a user sees of a deploy (the statuses
 * reported for the revision, with a reason when it fails) for each way a rollout can go.
 */
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe } from 'node:test';
import { NAMESPACE, deployment, revision, startWorld, type World } from './harness.ts';
import { schemaProblem } from './k8s-schemas.ts';
import { test } from '../support/limited-test.ts';

describe('listener agent rollouts', { timeout: 120_000 }, () => {
  let world: World;
  beforeEach(async () => {
    world = await startWorld();
  });
  afterEach(async () => {
    await world.close();
  });

  const reportsOf = (revisionId: string) => world.slipway.reports.filter((r) => r.revision_id === revisionId);
  const finalReport = (revisionId: string) =>
    world.slipway.waitFor(() =>
      reportsOf(revisionId).find((r) => r.status === 'DEPLOYED' || r.status === 'DEPLOY_FAILED'),
    );

  test('a revision that rolls out is reported AWAITING_DEPLOY, DEPLOYING, then DEPLOYED', async () => {
    const d = deployment({ name: 'happy' });
    world.slipway.upsert(d);
    const agent = world.start();
    const app = await world.kube.waitFor(() => world.kube.get('Deployment', NAMESPACE, 'happy'));
    await world.slipway.waitFor(() => reportsOf(d.revision!.id).some((r) => r.status === 'DEPLOYING'));
    assert.deepEqual(world.slipway.statusesOf(d.revision!.id), ['AWAITING_DEPLOY', 'DEPLOYING']);

    const container = (app.spec as { template: { spec: { containers: { image: string; env: { name: string }[] }[] } } })
      .template.spec.containers[0]!;
    assert.equal(container.image, 'ghcr.io/acme/support-agent:1.4.2');
    assert.ok(container.env.some((e) => e.name === 'OPENAI_API_KEY'));
    assert.ok(container.env.some((e) => e.name === 'PORT'));
    const secret = world.kube.get('Secret', NAMESPACE, 'happy-secrets');
    assert.equal(Buffer.from(secret!.data!.OPENAI_API_KEY!, 'base64').toString(), 'sk-test');
    assert.ok(world.kube.get('Service', NAMESPACE, 'happy'));

    world.kube.markAvailable(NAMESPACE, 'happy');
    await finalReport(d.revision!.id);
    assert.deepEqual(world.slipway.statusesOf(d.revision!.id), ['AWAITING_DEPLOY', 'DEPLOYING', 'DEPLOYED']);
    assert.equal(world.slipway.deployment(d.deployment_id)!.revision!.status, 'DEPLOYED');

    // Every write was a server-side apply by the listener's field manager, forced.
    for (const r of world.kube.applies()) {
      assert.equal(r.contentType, 'application/apply-patch+yaml');
      assert.equal(r.query.get('fieldManager'), 'slipway-listener');
      assert.equal(r.query.get('force'), 'true');
    }
    for (const object of world.kube.list({ selector: `slipway.dev/deployment-id=${d.deployment_id}` })) {
      assert.equal(schemaProblem(object), null, `${object.kind} ${object.metadata.name}`);
      assert.equal(object.metadata.labels?.['app.kubernetes.io/managed-by'], 'slipway-listener');
    }
    await agent.stop();
  });

  test('an image that cannot be pulled fails the revision with image_pull_failed', async () => {
    const d = deployment({ name: 'no-image', revision: revision({ image_uri: 'ghcr.io/acme/missing:0.0.0' }) });
    world.slipway.upsert(d);
    const agent = world.start();
    await world.slipway.waitFor(() => reportsOf(d.revision!.id).some((r) => r.status === 'DEPLOYING'));
    world.kube.failPods(
      NAMESPACE,
      'no-image',
      'ImagePullBackOff',
      'Back-off pulling image "ghcr.io/acme/missing:0.0.0"',
    );
    const failed = await finalReport(d.revision!.id);
    assert.equal(failed.status, 'DEPLOY_FAILED');
    assert.equal(failed.failure_reason, 'image_pull_failed');
    assert.match(failed.message ?? '', /ImagePullBackOff.*missing:0\.0\.0/);
    assert.deepEqual(world.slipway.statusesOf(d.revision!.id), ['AWAITING_DEPLOY', 'DEPLOYING', 'DEPLOY_FAILED']);
    await agent.stop();
  });

  test('an app that keeps crashing fails the revision with crash_loop', async () => {
    const d = deployment({ name: 'crashy' });
    world.slipway.upsert(d);
    const agent = world.start();
    await world.slipway.waitFor(() => reportsOf(d.revision!.id).some((r) => r.status === 'DEPLOYING'));
    world.kube.failPods(NAMESPACE, 'crashy', 'CrashLoopBackOff', 'back-off 40s restarting failed container=app');
    const failed = await finalReport(d.revision!.id);
    assert.equal(failed.status, 'DEPLOY_FAILED');
    assert.equal(failed.failure_reason, 'crash_loop');
    // What the user reads as the revision's failure_message: which container of which pod, and the kubelet's words.
    assert.match(
      failed.message ?? '',
      /^container app of pod crashy-g1-0 is CrashLoopBackOff: back-off 40s restarting/,
    );
    assert.deepEqual(world.slipway.statusesOf(d.revision!.id), ['AWAITING_DEPLOY', 'DEPLOYING', 'DEPLOY_FAILED']);
    await agent.stop();
  });

  test('a rollout that never finishes fails with progress_deadline_exceeded', async () => {
    const d = deployment({ name: 'stuck' });
    world.slipway.upsert(d);
    const agent = world.start();
    await world.slipway.waitFor(() => reportsOf(d.revision!.id).some((r) => r.status === 'DEPLOYING'));
    world.kube.startRollout(NAMESPACE, 'stuck');
    world.kube.exceedProgressDeadline(NAMESPACE, 'stuck');
    const failed = await finalReport(d.revision!.id);
    assert.equal(failed.status, 'DEPLOY_FAILED');
    assert.equal(failed.failure_reason, 'progress_deadline_exceeded');
    assert.match(failed.message ?? '', /timed out progressing/);
    await agent.stop();
  });

  test('a database that never becomes ready fails at the progress deadline, saying what its pod waits for', async () => {
    const d = deployment({ name: 'slow-db', revision: revision({ resource_spec: { db_storage_gi: 1 } }) });
    world.slipway.upsert(d);
    const agent = world.start();
    await world.slipway.waitFor(() => reportsOf(d.revision!.id).some((r) => r.status === 'AWAITING_DEPLOY'));
    world.kube.markAvailable(NAMESPACE, 'slow-db');
    // The database pod waits (a claim that does not bind, say): not a failure in itself.
    world.kube.failPods(NAMESPACE, 'slow-db-db', 'ContainerCreating', 'waiting for volume', 'StatefulSet');
    await world.slipway.waitFor(() => reportsOf(d.revision!.id).some((r) => r.status === 'DEPLOYING'));
    assert.equal(reportsOf(d.revision!.id).length, 2, 'still rolling out while within its deadline');
    // Older than the deadline (600 s here): the agent gives up on it, as the Deployment controller would.
    world.kube.agePods(NAMESPACE, 'slow-db-db', 601, 'StatefulSet');
    const failed = await finalReport(d.revision!.id);
    assert.equal(failed.status, 'DEPLOY_FAILED');
    assert.equal(failed.failure_reason, 'progress_deadline_exceeded');
    assert.match(failed.message ?? '', /^StatefulSet slow-db-db made no progress within its deadline/);
    assert.match(
      failed.message ?? '',
      /container postgres of pod slow-db-db-0 is ContainerCreating: waiting for volume/,
    );
    await agent.stop();
  });

  test('a manifest the API server refuses fails the revision with invalid_manifest and its message', async () => {
    // A mount of a volume the spec does not define: the API server's own check refuses the Deployment.
    const d = deployment({
      name: 'bad-mount',
      revision: revision({ resource_spec: { volume_mounts: [{ name: 'cache', mountPath: '/cache' }] } }),
    });
    world.slipway.upsert(d);
    const agent = world.start();
    const failed = await finalReport(d.revision!.id);
    assert.equal(failed.status, 'DEPLOY_FAILED');
    assert.equal(failed.failure_reason, 'invalid_manifest');
    assert.match(failed.message ?? '', /volumeMounts\[0\]\.name: Not found: "cache"/);
    // Never accepted, so never AWAITING_DEPLOY from the agent: the service walks the steps to DEPLOY_FAILED.
    assert.deepEqual(world.slipway.statusesOf(d.revision!.id), ['DEPLOY_FAILED']);
    // Refused once, not retried in a loop.
    const attempts = world.kube.applies().filter((r) => r.path.endsWith('/deployments/bad-mount')).length;
    assert.equal(attempts, 1);
    await agent.stop();
  });

  test('a refusal of any object the API server answers 422 is invalid_manifest too', async () => {
    world.kube.refuseApply(
      'Service',
      'refused',
      'spec.ports[0].port: Invalid value: 80: provided port is already allocated',
    );
    const d = deployment({ name: 'refused' });
    world.slipway.upsert(d);
    const agent = world.start();
    const failed = await finalReport(d.revision!.id);
    assert.equal(failed.failure_reason, 'invalid_manifest');
    assert.match(failed.message ?? '', /already allocated/);
    await agent.stop();
  });
});
