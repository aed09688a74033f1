/**
 * What a real Kubernetes API server does that surprised the agent (issue 25), through the real
 * service: a cluster of Kubernetes 1.26 that restarts mid-rollout (and denies everything until its
 * authorization cache has synced) and that refuses a native sidecar with a 500. The rollout in flight
 * ends DEPLOYED; a new deployment with a sidecar fails with the API server's words instead of staying
 * QUEUED; an in-place change adding one is a `deployment.update_failed` event while the deployment
 * stays READY. The agent warns at start that the version is older than it supports.
 */
import assert from 'node:assert/strict';
import { after, before, describe } from 'node:test';
import { NAMESPACE, startE2eWorld, type AgentProcess, type E2eWorld } from './e2e-world.ts';
import { eventually } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';

const SIDECAR = { name: 'proxy', image: 'envoyproxy/envoy:v1.30' };

describe('a listener on a Kubernetes 1.26 cluster', { timeout: 300_000 }, () => {
  let world: E2eWorld;
  let agent: AgentProcess;
  let listener: { id: string; credential: string };

  before(async () => {
    world = await startE2eWorld({ minor: 26 });
    listener = await world.registerListener();
    agent = world.startAgent(listener, [NAMESPACE], { SLIPWAY_LISTENER_HEARTBEAT_SECONDS: '5' });
  });
  after(async () => {
    await world?.close();
  });

  const deploy = async (name: string, resourceSpec: Record<string, unknown> = {}) => {
    const created = await world.api('POST', '/v2/deployments', {
      name,
      source: 'external_container',
      source_config: {
        listener_id: listener.id,
        listener_config: { k8s_namespace: NAMESPACE },
        resource_spec: resourceSpec,
      },
      source_revision_config: { image_uri: 'ghcr.io/acme/support-agent:1.4.2' },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    return { id: created.body.id as string, revisionId: created.body.latest_revision_id as string };
  };
  /** The revision once it is in one of `statuses`. */
  const revisionIn = (d: { id: string; revisionId: string }, ...statuses: string[]) =>
    eventually(
      `revision ${d.revisionId} ${statuses.join(' or ')}`,
      async () => {
        const r = await world.api('GET', `/v2/deployments/${d.id}/revisions/${d.revisionId}`);
        return statuses.includes(r.body?.status) && r.body;
      },
      { describe: () => `agent output:\n${agent.output()}` },
    );

  test('the agent says at start that Kubernetes 1.26 is older than it supports, and what does not work there', async () => {
    const warned = await eventually(
      'the version warning',
      () => Promise.resolve(/Kubernetes 1\.26 \(v1\.26\.4\) is older than this listener supports/.test(agent.output())),
      { describe: () => agent.output() },
    );
    assert.ok(warned);
    assert.match(agent.output(), /sidecars need native sidecars \(1\.29\)/);
  });

  test('a rollout in flight when the API server restarts ends DEPLOYED', async () => {
    const d = await deploy('restarted');
    await revisionIn(d, 'DEPLOYING');
    const before = world.kube.forbiddenAnswers.length;
    world.kube.restart();
    // The agent lists every kind again and is denied a few times over.
    await eventually('the agent denied a few times', async () => world.kube.forbiddenAnswers.length >= before + 21);
    world.kube.syncAuthorization();
    world.kube.markAvailable(NAMESPACE, 'restarted');
    const final = await revisionIn(d, 'DEPLOYED', 'DEPLOY_FAILED');
    assert.equal(final.status, 'DEPLOYED', `${final.failure_reason}: ${final.failure_message}`);
  });

  test('a new deployment with a sidecar fails with the API server words instead of staying QUEUED', async () => {
    const d = await deploy('with-sidecar', { sidecars: [SIDECAR] });
    const failed = await revisionIn(d, 'DEPLOY_FAILED');
    assert.equal(failed.failure_reason, 'invalid_manifest');
    assert.match(failed.failure_message, /restartPolicy: field not declared in schema/);
  });

  test('a sidecar added in place is deployment.update_failed; the deployment stays READY', async () => {
    const d = await deploy('grows-a-sidecar');
    await revisionIn(d, 'DEPLOYING');
    world.kube.markAvailable(NAMESPACE, 'grows-a-sidecar');
    await revisionIn(d, 'DEPLOYED');
    const patched = await world.api('PATCH', `/v2/deployments/${d.id}`, {
      source_config: { resource_spec: { sidecars: [SIDECAR] } },
    });
    assert.equal(patched.status, 200, JSON.stringify(patched.body));
    type Event = { type: string; data: Record<string, unknown> };
    const failed = await eventually(
      'deployment.update_failed',
      async () =>
        (
          await world.api<{ resources: Event[] }>('GET', `/v2/deployments/${d.id}/events?limit=100`)
        ).body.resources.find((e) => e.type === 'deployment.update_failed'),
      { describe: () => `agent output:\n${agent.output()}` },
    );
    assert.equal(failed.data.reason, 'invalid_manifest');
    assert.match(String(failed.data.message), /field not declared in schema/);
    assert.equal((await world.api('GET', `/v2/deployments/${d.id}`)).body.status, 'READY');
  });
});
