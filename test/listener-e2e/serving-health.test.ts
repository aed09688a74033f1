/**
 * A DEPLOYED revision that stops being healthy on the listener's cluster, through the real service
 * (docs/listener.md, "Statuses and failure reasons"): its pods crash-looping make the deployment
 * UNKNOWN (`crash_loop`) and READY again (`recovered`) once they are healthy; an in-place change the
 * cluster refuses is a `deployment.update_failed` event while the deployment stays READY.
 */
import assert from 'node:assert/strict';
import { after, before, describe } from 'node:test';
import { NAMESPACE, startE2eWorld, type AgentProcess, type E2eWorld } from './e2e-world.ts';
import { eventually } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';

const NAME = 'flaky-agent';

describe('the health of a serving revision on a listener', { timeout: 300_000 }, () => {
  let world: E2eWorld;
  let agent: AgentProcess;
  let deploymentId: string;

  type Event = { type: string; from_status: string | null; to_status: string | null; data: Record<string, unknown> };
  const events = async () =>
    (await world.api<{ resources: Event[] }>('GET', `/v2/deployments/${deploymentId}/events?limit=100`)).body.resources;
  const untilStatus = (status: string) =>
    eventually(
      `deployment ${status}`,
      async () => {
        const d = await world.api('GET', `/v2/deployments/${deploymentId}`);
        return d.body?.status === status && d.body;
      },
      { describe: () => `agent output:\n${agent.output()}` },
    );

  before(async () => {
    world = await startE2eWorld();
    const listener = await world.registerListener();
    agent = world.startAgent(listener, [NAMESPACE], { SLIPWAY_LISTENER_HEARTBEAT_SECONDS: '5' });
    const created = await world.api('POST', '/v2/deployments', {
      name: NAME,
      source: 'external_container',
      source_config: { listener_id: listener.id, listener_config: { k8s_namespace: NAMESPACE } },
      source_revision_config: { image_uri: 'ghcr.io/acme/flaky-agent:1.0.0' },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    deploymentId = created.body.id;
    await eventually('the Deployment in the cluster', async () => world.kube.get('Deployment', NAMESPACE, NAME), {
      describe: () => agent.output(),
    });
    world.kube.startRollout(NAMESPACE, NAME);
    world.kube.markAvailable(NAMESPACE, NAME);
    await untilStatus('READY');
  });
  after(async () => {
    await world?.close();
  });

  test('its pods crash-looping make the deployment UNKNOWN; healthy again, READY with recovered', async () => {
    world.kube.failPods(NAMESPACE, NAME, 'CrashLoopBackOff', 'back-off 40s restarting failed container app');
    await untilStatus('UNKNOWN');
    const down = (await events()).filter((e) => e.type === 'deployment.status_changed').at(-1)!;
    assert.deepEqual([down.from_status, down.to_status, down.data.reason], ['READY', 'UNKNOWN', 'crash_loop']);
    assert.match(String(down.data.message), /CrashLoopBackOff/);

    world.kube.markAvailable(NAMESPACE, NAME);
    await untilStatus('READY');
    const up = (await events()).filter((e) => e.type === 'deployment.status_changed').at(-1)!;
    assert.deepEqual([up.from_status, up.to_status, up.data.reason], ['UNKNOWN', 'READY', 'recovered']);
  });

  test('an in-place change the cluster refuses is deployment.update_failed; the deployment stays READY', async () => {
    world.kube.refuseApply('Deployment', NAME, 'spec.template.spec.containers[0].resources.requests: Invalid value');
    const patched = await world.api('PATCH', `/v2/deployments/${deploymentId}`, {
      source_config: { resource_spec: { min_scale: 1, cpu: 64 } },
    });
    assert.equal(patched.status, 200, JSON.stringify(patched.body));
    const failed = await eventually(
      'deployment.update_failed',
      async () => (await events()).find((e) => e.type === 'deployment.update_failed'),
      { describe: () => `agent output:\n${agent.output()}` },
    );
    assert.equal(failed.data.reason, 'invalid_manifest');
    assert.match(String(failed.data.message), /Invalid value/);
    assert.equal((await world.api('GET', `/v2/deployments/${deploymentId}`)).body.status, 'READY');
  });
});
