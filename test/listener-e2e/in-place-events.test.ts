/**
 * The events of a serving revision's in-place changes on a listener, through the real service and a
 * real agent process (docs/listener-protocol.md, "Heartbeat"; issue 34, item 3): each refused in-place
 * change is a `deployment.update_failed` of its own, even a second one refused while the first is
 * still told with the same reason; and a failed new revision that rolls back to the serving one tells
 * nothing about the serving revision, which nobody changed (the Deployment controller's Progressing
 * condition still names the failed revision's ReplicaSet for a while after the rollback).
 */
import assert from 'node:assert/strict';
import { after, before, describe } from 'node:test';
import { NAMESPACE, startE2eWorld, type AgentProcess, type E2eWorld } from './e2e-world.ts';
import { eventually } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';

type Event = { type: string; data: Record<string, unknown> };
type Listener = { id: string; credential: string };

describe('events of in-place changes on a listener', { timeout: 300_000 }, () => {
  let world: E2eWorld;
  let agent: AgentProcess;
  let listener: Listener;

  const output = () => `agent output:\n${agent.output()}`;
  const events = async (deploymentId: string) =>
    (await world.api<{ resources: Event[] }>('GET', `/v2/deployments/${deploymentId}/events?limit=100`)).body.resources;
  const ofType = async (deploymentId: string, type: string) =>
    (await events(deploymentId)).filter((e) => e.type === type);
  const imageOf = (name: string) =>
    (
      world.kube.get('Deployment', NAMESPACE, name)?.spec as
        { template: { spec: { containers: { image: string }[] } } } | undefined
    )?.template.spec.containers[0]?.image;
  const revisionStatus = async (deploymentId: string, revisionId: string) =>
    (await world.api('GET', `/v2/deployments/${deploymentId}/revisions/${revisionId}`)).body.status as string;
  /** Two heartbeats from now on: whatever the agent saw before them has been told. */
  async function twoHeartbeats(): Promise<void> {
    for (let i = 0; i < 2; i += 1) {
      const seen = (await world.api('GET', `/v2/listeners/${listener.id}`)).body.last_seen_at as string;
      await eventually(
        'the next heartbeat',
        async () => (await world.api('GET', `/v2/listeners/${listener.id}`)).body.last_seen_at !== seen,
        { describe: output },
      );
    }
  }

  /** A deployment on the listener whose first revision is DEPLOYED (READY). */
  async function serving(name: string): Promise<{ id: string; revisionId: string }> {
    const created = await world.api('POST', '/v2/deployments', {
      name,
      source: 'external_container',
      source_config: { listener_id: listener.id, listener_config: { k8s_namespace: NAMESPACE } },
      source_revision_config: { image_uri: `ghcr.io/acme/${name}:1` },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    await eventually('the Deployment in the cluster', async () => world.kube.get('Deployment', NAMESPACE, name), {
      describe: output,
    });
    world.kube.startRollout(NAMESPACE, name);
    world.kube.markAvailable(NAMESPACE, name);
    await eventually(
      'the deployment READY',
      async () => (await world.api('GET', `/v2/deployments/${created.body.id}`)).body.status === 'READY',
      { describe: output },
    );
    return { id: created.body.id, revisionId: created.body.latest_revision_id };
  }

  before(async () => {
    world = await startE2eWorld();
    listener = await world.registerListener();
    agent = world.startAgent(listener, [NAMESPACE], { SLIPWAY_LISTENER_HEARTBEAT_SECONDS: '5' });
  });
  after(async () => {
    await world?.close();
  });

  test('a second refused in-place change, while the first is still told, is an update_failed of its own', async () => {
    const d = await serving('twice-refused');
    world.kube.refuseApply(
      'Deployment',
      'twice-refused',
      'spec.template.spec.containers[0].resources: Invalid value: "64"',
    );
    const first = await world.api('PATCH', `/v2/deployments/${d.id}`, {
      source_config: { resource_spec: { min_scale: 1, cpu: 64 } },
    });
    assert.equal(first.status, 200, JSON.stringify(first.body));
    await eventually(
      'the first update_failed',
      async () => (await ofType(d.id, 'deployment.update_failed')).length === 1,
      { describe: output },
    );

    // Another change, refused for the same reason in other words: the first is still what the agent tells.
    world.kube.acceptApply('Deployment', 'twice-refused');
    world.kube.refuseApply(
      'Deployment',
      'twice-refused',
      'spec.template.spec.containers[0].resources: Invalid value: "48"',
    );
    const second = await world.api('PATCH', `/v2/deployments/${d.id}`, {
      source_config: { resource_spec: { min_scale: 1, cpu: 48 } },
    });
    assert.equal(second.status, 200, JSON.stringify(second.body));
    const failed = await eventually(
      'a second update_failed',
      async () => {
        const found = await ofType(d.id, 'deployment.update_failed');
        return found.length === 2 && found;
      },
      { describe: output },
    );
    const messages = failed.map((e) => String(e.data.message));
    assert.ok(
      messages.some((m) => m.includes('"64"')) && messages.some((m) => m.includes('"48"')),
      messages.join(' | '),
    );
    await twoHeartbeats();
    assert.equal((await ofType(d.id, 'deployment.update_failed')).length, 2, 'each change is told once');
    assert.equal((await world.api('GET', `/v2/deployments/${d.id}`)).body.status, 'READY');
  });

  test('a failed new revision that rolls back tells nothing about the serving revision', async () => {
    const name = 'rolled-back';
    const d = await serving(name);
    const patched = await world.api('PATCH', `/v2/deployments/${d.id}`, {
      source_revision_config: { image_uri: `ghcr.io/acme/${name}:2` },
    });
    assert.equal(patched.status, 200, JSON.stringify(patched.body));
    const failing = patched.body.latest_revision_id as string;
    await eventually('the new image applied', async () => imageOf(name) === `ghcr.io/acme/${name}:2`, {
      describe: output,
    });
    // From here on, whatever the agent says of the serving revision is about going back to it. Marked
    // before the failure: the agent may go back and judge the serving revision (said once, not again
    // while that judgement holds) before the test has seen the failure at the API.
    const mark = agent.output().length;
    world.kube.startRollout(NAMESPACE, name);
    world.kube.failPods(NAMESPACE, name, 'ContainerCreating', 'pulling a large image');
    world.kube.exceedProgressDeadline(NAMESPACE, name);
    await eventually(
      'the new revision DEPLOY_FAILED',
      async () => (await revisionStatus(d.id, failing)) === 'DEPLOY_FAILED',
      { describe: output },
    );

    // The agent goes back to the serving revision; the controller still says the failed ReplicaSet timed out.
    await eventually('the serving image applied again', async () => imageOf(name) === `ghcr.io/acme/${name}:1`, {
      describe: output,
    });
    world.kube.rollBackTo(NAMESPACE, name);
    await eventually(
      'the agent judging the rollback',
      async () =>
        new RegExp(`revision ${d.revisionId} (is rolling out: Deployment|failed)`).test(agent.output().slice(mark)),
      { describe: output },
    );
    await twoHeartbeats();
    world.kube.markAvailable(NAMESPACE, name);
    await twoHeartbeats();

    const told = (await events(d.id)).filter(
      (e) => e.type === 'deployment.update_failed' || e.type === 'deployment.update_rolled_out',
    );
    assert.deepEqual(told, [], 'nobody changed the serving revision');
    const deployment = (await world.api('GET', `/v2/deployments/${d.id}`)).body;
    assert.equal(deployment.status, 'READY');
    assert.equal(deployment.active_revision_id, d.revisionId);
  });
});
