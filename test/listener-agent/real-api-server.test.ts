/**
 * What a real API server does that the agent got wrong (issue 25, defects 4 to 8 and the version), each
 * against the fake API server taught to do the same:
 * - server-side apply removes a field its only manager leaves out: adding an autoscaler must hand
 *   `spec.replicas` over (the documented pattern: apply it alone under another field manager first) so
 *   that the app keeps its replicas, and a new autoscaled app is DEPLOYED only with `min_scale` ready;
 * - the API server, not the client library, says which fields are unknown: what the user wrote is
 *   applied as written (`emptyDir.sizelimit` is not silently dropped) with fieldValidation=Strict, and
 *   the server's refusal fails the revision with its words;
 * - an in-place change that failed is rolled out only when its rollout has finished;
 * - a pod that runs but never becomes ready is named, with what it waits for;
 * - an object is applied once, even when the next pass comes before the watch has seen the apply;
 * - the agent reads the server's version at start and says what an older one cannot do.
 */
import assert from 'node:assert/strict';
import { afterEach, describe } from 'node:test';
import pino from 'pino';
import { statusAnswer, type KubeObject } from './fake-kube.ts';
import type { FakeDeployment } from './fake-slipway.ts';
import { NAMESPACE, deployment, revision, startWorld, type World } from './harness.ts';
import { eventually } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';

const replicasOf = (o: KubeObject | undefined) => (o?.spec as { replicas?: number } | undefined)?.replicas;

describe('listener agent against what a real API server does', { timeout: 120_000 }, () => {
  let world: World;
  afterEach(async () => {
    await world.close();
  });

  const reportsOf = (revisionId: string) => world.slipway.reports.filter((r) => r.revision_id === revisionId);
  const finalReport = (revisionId: string) =>
    world.slipway.waitFor(() =>
      reportsOf(revisionId).find((r) => r.status === 'DEPLOYED' || r.status === 'DEPLOY_FAILED'),
    );

  async function deployedOn(w: World, name: string, spec: Record<string, unknown>): Promise<FakeDeployment> {
    const d = deployment({ name, resource_spec: spec, revision: revision({ resource_spec: spec }) });
    w.slipway.upsert(d);
    await w.slipway.waitFor(() => w.slipway.statusesOf(d.revision!.id).includes('DEPLOYING'));
    w.kube.markAvailable(NAMESPACE, name);
    await w.slipway.waitFor(() => w.slipway.statusesOf(d.revision!.id).includes('DEPLOYED'));
    return w.slipway.deployment(d.deployment_id)!;
  }

  test('adding an autoscaler keeps the replicas: spec.replicas is handed over, never dropped to 1', async () => {
    world = await startWorld();
    world.start();
    const d = await deployedOn(world, 'growing', { min_scale: 3 });
    assert.deepEqual(world.kube.replicasHistory(NAMESPACE, 'growing'), [3]);

    world.slipway.upsert({ ...d, resource_spec: { min_scale: 2, max_scale: 6 } });
    await world.kube.waitFor(() => world.kube.get('HorizontalPodAutoscaler', NAMESPACE, 'growing'));
    // The listener applied replicas alone under its hand-over manager, then the app without them.
    assert.deepEqual(world.kube.replicasHistory(NAMESPACE, 'growing'), [3], 'no dip while the autoscaler comes');
    assert.ok(world.kube.managersOf('Deployment', NAMESPACE, 'growing').includes('slipway-listener-handover'));

    // The autoscaler scales; the next apply of the app (an in-place change) leaves its choice alone.
    world.kube.scaleAsAutoscaler(NAMESPACE, 'growing', 5);
    world.slipway.upsert({ ...d, resource_spec: { min_scale: 2, max_scale: 6, memory_mb: 256 } });
    await world.kube.waitFor(() =>
      JSON.stringify(world.kube.get('Deployment', NAMESPACE, 'growing')?.spec).includes('256Mi'),
    );
    assert.equal(replicasOf(world.kube.get('Deployment', NAMESPACE, 'growing')), 5);
    assert.deepEqual(world.kube.replicasHistory(NAMESPACE, 'growing'), [3, 5]);
    // Handed over once: the listener no longer held the field the second time.
    const handovers = world.kube.applies().filter((r) => r.query.get('fieldManager') === 'slipway-listener-handover');
    assert.equal(handovers.length, 1);
    assert.equal(handovers[0]!.query.get('force'), null, 'the hand-over never forces');
  });

  test('a hand-over that conflicts (the autoscaler holds replicas already) is left at that, not retried', async () => {
    world = await startWorld();
    world.start();
    const d = await deployedOn(world, 'raced', { min_scale: 2 });
    world.kube.answerNextApplies(
      statusAnswer(
        409,
        'Conflict',
        'Apply failed with 1 conflict: conflict with "kube-controller-manager": .spec.replicas',
      ),
    );
    world.slipway.upsert({ ...d, resource_spec: { min_scale: 2, max_scale: 4 } });
    await world.kube.waitFor(() => world.kube.get('HorizontalPodAutoscaler', NAMESPACE, 'raced'));
    const handovers = world.kube.applies().filter((r) => r.query.get('fieldManager') === 'slipway-listener-handover');
    assert.equal(handovers.length, 1);
  });

  test('a new autoscaled app starts at min_scale and is DEPLOYED only with min_scale replicas ready', async () => {
    world = await startWorld();
    world.start();
    const spec = { min_scale: 2, max_scale: 5 };
    const d = deployment({ name: 'scaled-new', resource_spec: spec, revision: revision({ resource_spec: spec }) });
    world.slipway.upsert(d);
    await world.slipway.waitFor(() => world.slipway.statusesOf(d.revision!.id).includes('DEPLOYING'));
    await world.kube.waitFor(() => replicasOf(world.kube.get('Deployment', NAMESPACE, 'scaled-new')) === 2);
    world.kube.markAvailable(NAMESPACE, 'scaled-new');
    await finalReport(d.revision!.id);
    assert.deepEqual(world.slipway.statusesOf(d.revision!.id), ['AWAITING_DEPLOY', 'DEPLOYING', 'DEPLOYED']);
    assert.equal(world.kube.list({ kind: 'Pod', selector: 'slipway.dev/component=web' }).length, 2);
  });

  test('an autoscaled app whose Deployment has fewer replicas than min_scale is not DEPLOYED yet', async () => {
    world = await startWorld({}, { heartbeatSeconds: 1 });
    world.start();
    const spec = { min_scale: 3, max_scale: 5 };
    const d = deployment({ name: 'short', resource_spec: spec, revision: revision({ resource_spec: spec }) });
    world.slipway.upsert(d);
    await world.kube.waitFor(() => replicasOf(world.kube.get('Deployment', NAMESPACE, 'short')) === 3);
    await world.slipway.waitFor(() => world.slipway.statusesOf(d.revision!.id).includes('DEPLOYING'));
    // Scaled down to one (kubectl scale) before the autoscaler acts: one ready replica is not min_scale.
    world.kube.scaleAsAutoscaler(NAMESPACE, 'short', 1);
    world.kube.markAvailable(NAMESPACE, 'short');
    const seenAt = Date.now();
    await world.slipway.waitFor(() =>
      world.slipway.heartbeats.find((h) => h.observed_at !== undefined && Date.parse(h.observed_at) > seenAt),
    );
    assert.deepEqual(world.slipway.statusesOf(d.revision!.id), ['AWAITING_DEPLOY', 'DEPLOYING']);
    world.kube.scaleAsAutoscaler(NAMESPACE, 'short', 3);
    world.kube.markAvailable(NAMESPACE, 'short');
    assert.equal((await finalReport(d.revision!.id)).status, 'DEPLOYED');
  });

  test('what the user wrote is applied as written, with the API server asked to refuse unknown fields', async () => {
    world = await startWorld();
    world.start();
    const spec = {
      volumes: [{ name: 'scratch', emptyDir: { sizeLimit: '1Gi', medium: 'Memory' } }],
      volume_mounts: [{ name: 'scratch', mountPath: '/scratch' }],
      sidecars: [{ name: 'proxy', image: 'envoyproxy/envoy:v1.30', startupProbe: { tcpSocket: { port: 9901 } } }],
    };
    const d = deployment({ name: 'as-written', resource_spec: spec, revision: revision({ resource_spec: spec }) });
    world.slipway.upsert(d);
    const app = await world.kube.waitFor(() => world.kube.get('Deployment', NAMESPACE, 'as-written'));
    const pod = (app.spec as { template: { spec: Record<string, unknown> } }).template.spec;
    assert.deepEqual(pod.volumes, [{ name: 'scratch', emptyDir: { sizeLimit: '1Gi', medium: 'Memory' } }]);
    // Every apply asks the API server to refuse what its schema does not declare.
    assert.ok(world.kube.fieldValidations.length > 0);
    assert.ok(world.kube.fieldValidations.every((v) => v === 'Strict'));
  });

  test('a field the API server does not know fails the revision with its words, not applied without it', async () => {
    world = await startWorld();
    world.start();
    const spec = {
      volumes: [{ name: 'scratch', emptyDir: { sizelimit: '1Gi' } }],
      volume_mounts: [{ name: 'scratch', mountPath: '/scratch' }],
    };
    const d = deployment({ name: 'misspelt', resource_spec: spec, revision: revision({ resource_spec: spec }) });
    world.slipway.upsert(d);
    const failed = await finalReport(d.revision!.id);
    assert.equal(failed.status, 'DEPLOY_FAILED');
    assert.equal(failed.failure_reason, 'invalid_manifest');
    assert.match(
      failed.message ?? '',
      /\.spec\.template\.spec\.volumes\[0\]\.emptyDir\.sizelimit: field not declared in schema/,
    );
    assert.match(failed.message ?? '', /HTTP 400/);
    assert.equal(world.kube.get('Deployment', NAMESPACE, 'misspelt'), undefined, 'nothing applied without the field');
  });

  test('an in-place change that failed is rolled out only once its rollout has finished', async () => {
    world = await startWorld({}, { heartbeatSeconds: 1 });
    world.start();
    const d = await deployedOn(world, 'slow-change', { min_scale: 1 });
    world.slipway.upsert({ ...d, resource_spec: { min_scale: 3 } });
    await world.kube.waitFor(() => replicasOf(world.kube.get('Deployment', NAMESPACE, 'slow-change')) === 3);
    world.kube.exceedProgressDeadline(NAMESPACE, 'slow-change');
    await world.slipway.waitFor(() =>
      world.slipway.heartbeats.find((h) => h.deployments?.some((c) => c.condition === 'update_failed')),
    );

    // Patched again: the Deployment controller starts progressing, which is not rolled out yet.
    world.slipway.upsert({ ...d, resource_spec: { min_scale: 2 } });
    await world.kube.waitFor(() => replicasOf(world.kube.get('Deployment', NAMESPACE, 'slow-change')) === 2);
    const progressingAt = Date.now();
    world.kube.startRollout(NAMESPACE, 'slow-change');
    const whileProgressing = await world.slipway.waitFor(() =>
      world.slipway.heartbeats.find(
        (h) => h.observed_at !== undefined && Date.parse(h.observed_at) > progressingAt && h.deployments !== undefined,
      ),
    );
    assert.deepEqual(
      whileProgressing.deployments!.map((c) => [c.deployment_id, c.condition]),
      [[d.deployment_id, 'update_failed']],
      'still failed while the change rolls out',
    );

    world.kube.markAvailable(NAMESPACE, 'slow-change');
    const doneAt = Date.now();
    const rolledOut = await world.slipway.waitFor(() =>
      world.slipway.heartbeats.find(
        (h) => h.observed_at !== undefined && Date.parse(h.observed_at) > doneAt && h.deployments !== undefined,
      ),
    );
    assert.deepEqual(rolledOut.deployments, []);
  });

  test('a pod that runs but never becomes ready fails naming the pod, the container and its readiness probe', async () => {
    world = await startWorld();
    world.start();
    const d = deployment({ name: 'never-ready' });
    world.slipway.upsert(d);
    await world.slipway.waitFor(() => world.slipway.statusesOf(d.revision!.id).includes('DEPLOYING'));
    world.kube.podsNotReady(NAMESPACE, 'never-ready');
    world.kube.exceedProgressDeadline(NAMESPACE, 'never-ready');
    const failed = await finalReport(d.revision!.id);
    assert.equal(failed.failure_reason, 'progress_deadline_exceeded');
    assert.match(failed.message ?? '', /timed out progressing/);
    assert.match(
      failed.message ?? '',
      /container app of pod never-ready-g1-0 runs but is not ready: its readiness probe \(TCP port http\) does not pass/,
    );
  });

  test('an object is applied once when the next pass comes before the watch has seen the apply', async () => {
    world = await startWorld();
    world.start();
    const first = deployment({ name: 'first' });
    world.slipway.upsert(first);
    await world.slipway.waitFor(() => world.slipway.statusesOf(first.revision!.id).includes('DEPLOYING'));

    world.kube.holdWatchEvents();
    const d = deployment({ name: 'slow-watch' });
    world.slipway.upsert(d);
    await world.kube.waitFor(() => world.kube.get('Deployment', NAMESPACE, 'slow-watch'));
    await world.slipway.waitFor(() => world.slipway.statusesOf(d.revision!.id).includes('AWAITING_DEPLOY'));
    // More passes while the watch is behind: a change of another deployment, then another.
    world.slipway.upsert({ ...first, resource_spec: { min_scale: 2 } });
    await world.kube.waitFor(() => replicasOf(world.kube.get('Deployment', NAMESPACE, 'first')) === 2);
    world.slipway.upsert({ ...first, resource_spec: { min_scale: 3 } });
    await world.kube.waitFor(() => replicasOf(world.kube.get('Deployment', NAMESPACE, 'first')) === 3);
    world.kube.releaseWatchEvents();
    world.kube.markAvailable(NAMESPACE, 'slow-watch');
    await finalReport(d.revision!.id);

    const applied = (kind: string, name: string) =>
      world.kube.applies().filter((r) => r.path.endsWith(`/${kind}/${name}`)).length;
    assert.equal(applied('deployments', 'slow-watch'), 1);
    assert.equal(applied('services', 'slow-watch'), 1);
    assert.equal(applied('secrets', 'slow-watch-secrets'), 1);
    assert.deepEqual(world.slipway.statusesOf(d.revision!.id), ['AWAITING_DEPLOY', 'DEPLOYING', 'DEPLOYED']);
  });

  test('the agent reads the API server version at start and warns about one older than 1.29', async () => {
    const lines: { level: number; msg: string; [k: string]: unknown }[] = [];
    const logger = pino({ level: 'info' }, { write: (line: string) => lines.push(JSON.parse(line) as never) });
    world = await startWorld({ minor: 26 }, {}, { logger });
    world.start();
    await world.kube.waitFor(() => world.kube.requests.some((r) => r.path === '/version'));
    const warned = await eventually(
      'the warning about Kubernetes 1.26',
      () => lines.find((l) => l.msg.includes('Kubernetes 1.26')),
      { everyMs: 10 },
    );
    assert.equal(warned.level, 40);
    assert.match(warned.msg, /1\.29 or newer/);
    assert.match(warned.msg, /sidecars/);
  });

  test('an API server of a supported version is logged, without a warning', async () => {
    const lines: { level: number; msg: string; [k: string]: unknown }[] = [];
    const logger = pino({ level: 'info' }, { write: (line: string) => lines.push(JSON.parse(line) as never) });
    world = await startWorld({ minor: 31 }, {}, { logger });
    world.start();
    const seen = await eventually(
      'a log line about the Kubernetes API server',
      () => lines.find((l) => l.msg.includes('Kubernetes API server')),
      { everyMs: 10 },
    );
    assert.equal(seen.level, 30);
    assert.equal(seen.kubernetes_version, 'v1.31.4');
  });
});
