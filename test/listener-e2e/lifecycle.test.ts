/**
 * docs/listener.md's walk-through, end to end: a listener registered through the API with its
 * credential, the agent running as a process with a kubeconfig, an external_container deployment
 * applied to the (fake) cluster and DEPLOYED, a new image rolled out as a new revision, a min_scale
 * patched in place (no revision) scaling the cluster, a redeploy bringing the first revision's spec
 * back, a resource_spec patch replacing the whole spec (an autoscaler added keeps the replicas), and a
 * delete that leaves nothing in the cluster and removes the deployment from the API.
 */
import assert from 'node:assert/strict';
import { after, before, describe } from 'node:test';
import { NAMESPACE, firstHeartbeat, startE2eWorld, type AgentProcess, type E2eWorld } from './e2e-world.ts';
import { eventually } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';

const NAME = 'support-agent';

describe('a listener deployment from create to delete', { timeout: 300_000 }, () => {
  let world: E2eWorld;
  let agent: AgentProcess;
  let listener: { id: string; credential: string };
  let deploymentId: string;
  let firstRevisionId: string;

  const revision = (revisionId: string) => world.api('GET', `/v2/deployments/${deploymentId}/revisions/${revisionId}`);
  const untilRevision = (revisionId: string, status: string) =>
    eventually(
      `revision ${revisionId} ${status}`,
      async () => {
        const r = await revision(revisionId);
        return r.body?.status === status && r.body;
      },
      { describe: () => `agent output:\n${agent.output()}` },
    );
  const ownedObjects = () =>
    world.kube.list({ namespace: NAMESPACE, selector: `slipway.dev/deployment-id=${deploymentId}` });

  before(async () => {
    world = await startE2eWorld();
    listener = await world.registerListener();
    agent = world.startAgent(listener);
  });
  after(async () => {
    await world?.close();
  });

  test('the agent connects: the listener is connected and watches its namespace', async () => {
    const seen = await firstHeartbeat(world, listener.id, agent);
    assert.equal(seen.state, 'connected');
    assert.deepEqual(seen.watched_namespaces, [NAMESPACE]);
    assert.deepEqual(seen.namespaces_not_watched, []);
  });

  test('a new external_container deployment is applied to the cluster and reaches DEPLOYED', async () => {
    const created = await world.api('POST', '/v2/deployments', {
      name: NAME,
      source: 'external_container',
      source_config: {
        listener_id: listener.id,
        listener_config: { k8s_namespace: NAMESPACE },
        resource_spec: { min_scale: 2, cpu: 0.5, memory_mb: 512 },
      },
      source_revision_config: { image_uri: 'ghcr.io/acme/support-agent:1.4.2' },
      secrets: [{ name: 'OPENAI_API_KEY', value: 'sk-e2e-secret' }],
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    assert.equal(created.body.remote_reconciled, true);
    deploymentId = created.body.id;
    firstRevisionId = created.body.latest_revision_id;

    // The cluster's Deployment controller took the new generation up: the agent reports DEPLOYING.
    await untilRevision(firstRevisionId, 'DEPLOYING');
    const app = world.kube.get('Deployment', NAMESPACE, NAME);
    assert.ok(app, 'the Deployment is in the cluster');
    const container = (app.spec as any).template.spec.containers[0];
    assert.equal(container.image, 'ghcr.io/acme/support-agent:1.4.2');
    assert.equal((app.spec as any).replicas, 2);
    assert.equal(container.resources.requests.cpu, '500m');
    assert.ok(world.kube.get('Service', NAMESPACE, NAME), 'the Service is in the cluster');
    const secret = world.kube.get('Secret', NAMESPACE, `${NAME}-secrets`);
    assert.ok(secret, 'the Secret is in the cluster');
    const secretValue =
      secret.data?.OPENAI_API_KEY ?? (secret as { stringData?: Record<string, string> }).stringData?.OPENAI_API_KEY;
    assert.ok(
      secretValue === 'sk-e2e-secret' ||
        (secretValue !== undefined && Buffer.from(secretValue, 'base64').toString() === 'sk-e2e-secret'),
      'the secret value reached the cluster',
    );
    for (const object of ownedObjects()) {
      assert.equal(
        object.metadata.labels?.['slipway.dev/listener-id'],
        listener.id,
        `${object.kind} ${object.metadata.name} carries its listener`,
      );
    }

    // The rollout finishes (every replica updated and available): DEPLOYED, the revision active.
    world.kube.markAvailable(NAMESPACE, NAME);
    const deployed = await untilRevision(firstRevisionId, 'DEPLOYED');
    assert.equal(deployed.remote_reconciled, true);
    const deployment = await world.api('GET', `/v2/deployments/${deploymentId}`);
    assert.equal(deployment.body.status, 'READY');
    assert.equal(deployment.body.active_revision_id, firstRevisionId);
    assert.equal(deployment.body.remote_reconciled, true);
    assert.doesNotMatch(agent.output(), /sk-e2e-secret/, 'the secret never reaches the agent log');
    assert.doesNotMatch(agent.output(), new RegExp(listener.credential), 'nor does the credential');
  });

  test('a new image is a new revision that replaces the first in the cluster', async () => {
    const generationBefore = world.kube.get('Deployment', NAMESPACE, NAME)!.metadata.generation!;
    const patched = await world.api('PATCH', `/v2/deployments/${deploymentId}`, {
      source_revision_config: { image_uri: 'ghcr.io/acme/support-agent:1.5.0' },
    });
    assert.equal(patched.status, 200, JSON.stringify(patched.body));
    const secondRevisionId: string = patched.body.latest_revision_id;
    assert.notEqual(secondRevisionId, firstRevisionId);

    await untilRevision(secondRevisionId, 'DEPLOYING');
    const app = world.kube.get('Deployment', NAMESPACE, NAME)!;
    assert.equal((app.spec as any).template.spec.containers[0].image, 'ghcr.io/acme/support-agent:1.5.0');
    assert.ok(app.metadata.generation! > generationBefore, 'the same Deployment, rolled to a new generation');
    // Until the new pods are available the first revision still serves.
    assert.equal((await world.api('GET', `/v2/deployments/${deploymentId}`)).body.active_revision_id, firstRevisionId);

    world.kube.markAvailable(NAMESPACE, NAME);
    await untilRevision(secondRevisionId, 'DEPLOYED');
    const deployment = await world.api('GET', `/v2/deployments/${deploymentId}`);
    assert.equal(deployment.body.active_revision_id, secondRevisionId);
    assert.equal(deployment.body.latest_revision_id, secondRevisionId);
    assert.equal(
      (await revision(firstRevisionId)).body.status,
      'DEPLOYED',
      'the revision that served before stays DEPLOYED',
    );
    const pods = world.kube.list({
      kind: 'Pod',
      namespace: NAMESPACE,
      selector: `slipway.dev/deployment-id=${deploymentId}`,
    });
    assert.equal(pods.length, 2);
    assert.ok(
      pods.every((p) => p.metadata.labels?.['slipway.dev/revision-id'] === secondRevisionId),
      'the pods run the new revision',
    );
  });

  test('a min_scale patched in place scales the cluster, without a revision', async () => {
    const before = (await world.api('GET', `/v2/deployments/${deploymentId}`)).body;
    const patched = await world.api('PATCH', `/v2/deployments/${deploymentId}`, {
      source_config: { resource_spec: { min_scale: 3, cpu: 0.5, memory_mb: 512 } },
    });
    assert.equal(patched.status, 200, JSON.stringify(patched.body));
    assert.equal(patched.body.latest_revision_id, before.latest_revision_id, 'no new revision');

    const app = await world.kube.waitFor(() => {
      const found = world.kube.get('Deployment', NAMESPACE, NAME);
      return (found?.spec as any)?.replicas === 3 && found;
    });
    assert.equal((app.spec as any).template.metadata.labels['slipway.dev/revision-id'], before.latest_revision_id);
    world.kube.markAvailable(NAMESPACE, NAME);
    const after = (await world.api('GET', `/v2/deployments/${deploymentId}`)).body;
    assert.equal(after.status, 'READY');
    assert.equal(after.active_revision_id, before.active_revision_id);
    assert.equal((await revision(before.latest_revision_id)).body.status, 'DEPLOYED');
  });

  test("a redeploy of the first revision brings back its image and keeps the deployment's scale", async () => {
    const redeployed = await world.api('POST', `/v2/deployments/${deploymentId}/revisions/${firstRevisionId}/redeploy`);
    assert.equal(redeployed.status, 201, JSON.stringify(redeployed.body));
    const revisionId: string = redeployed.body.latest_revision_id;
    // Scale is the deployment's (docs/lifecycle.md, "What a redeploy restores"): the 3 set in place stays.
    assert.equal(redeployed.body.source_config.resource_spec.min_scale, 3);

    await untilRevision(revisionId, 'DEPLOYING');
    const app = world.kube.get('Deployment', NAMESPACE, NAME)!;
    assert.equal((app.spec as any).replicas, 3);
    assert.equal((app.spec as any).template.spec.containers[0].image, 'ghcr.io/acme/support-agent:1.4.2');
    world.kube.markAvailable(NAMESPACE, NAME);
    await untilRevision(revisionId, 'DEPLOYED');
  });

  test('a resource_spec patch replaces the whole spec; an autoscaler added takes over the replicas without a dip', async () => {
    // What was set before and is not sent again is unset: cpu and memory_mb go, the requests with them.
    const patched = await world.api('PATCH', `/v2/deployments/${deploymentId}`, {
      source_config: { resource_spec: { min_scale: 2, max_scale: 5 } },
    });
    assert.equal(patched.status, 200, JSON.stringify(patched.body));
    assert.deepEqual(patched.body.source_config.resource_spec, { min_scale: 2, max_scale: 5 });
    const hpa = await world.kube.waitFor(() => world.kube.get('HorizontalPodAutoscaler', NAMESPACE, NAME));
    assert.equal((hpa.spec as any).minReplicas, 2);
    const app = await world.kube.waitFor(() => {
      const found = world.kube.get('Deployment', NAMESPACE, NAME);
      return (found?.spec as any)?.template.spec.containers[0].resources?.requests?.memory === undefined && found;
    });
    // Autoscaled without `cpu`: the 250m request utilization is measured against, and nothing else.
    assert.deepEqual((app.spec as any).template.spec.containers[0].resources, { requests: { cpu: '250m' } });
    // The 3 replicas of before stay until the autoscaler decides: handed over, never dropped to 1.
    assert.equal((app.spec as any).replicas, 3);
    assert.ok(world.kube.replicasHistory(NAMESPACE, NAME).every((n) => n >= 2));
    world.kube.markAvailable(NAMESPACE, NAME);
  });

  test('a deleted deployment leaves nothing in the cluster and is gone from the API', async () => {
    assert.ok(ownedObjects().length > 0);
    const removed = await world.api('DELETE', `/v2/deployments/${deploymentId}`);
    assert.equal(removed.status, 204, JSON.stringify(removed.body));

    await eventually(
      'the deployment to be gone',
      async () => (await world.api('GET', `/v2/deployments/${deploymentId}`)).status === 404,
      { describe: () => `agent output:\n${agent.output()}` },
    );
    assert.deepEqual(
      ownedObjects().map((o) => `${o.kind}/${o.metadata.name}`),
      [],
      'every object of the deployment is gone from the cluster',
    );
    const gone = await world.api('GET', `/v2/deployments/${deploymentId}`);
    assert.equal(gone.body.detail, `Deployment ID ${deploymentId} not found.`);
    const list = await world.api('GET', `/v2/deployments?name=${NAME}`);
    assert.deepEqual(list.body.resources, []);
  });

  test('the agent stops cleanly on SIGTERM', async () => {
    assert.equal(await agent.stop(), 0, agent.output());
  });
});
