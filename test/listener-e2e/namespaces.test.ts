/**
 * A listener registered with two namespaces whose agent may not read one of them (no Role there: the
 * cluster answers 403), through the real service: the listener resource shows which namespace is not
 * watched and why, a deployment there fails with a reason, and a deployment in the other one is DEPLOYED.
 */
import assert from 'node:assert/strict';
import { after, before, describe } from 'node:test';
import { NAMESPACE, firstHeartbeat, startE2eWorld, type AgentProcess, type E2eWorld } from './e2e-world.ts';
import { eventually } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';

const FORBIDDEN = 'billing';

describe('a listener with a namespace it may not read', { timeout: 300_000 }, () => {
  let world: E2eWorld;
  let agent: AgentProcess;
  let listener: { id: string; credential: string };

  before(async () => {
    world = await startE2eWorld();
    world.kube.addNamespace(FORBIDDEN);
    world.kube.forbid(FORBIDDEN);
    listener = await world.registerListener([NAMESPACE, FORBIDDEN]);
    agent = world.startAgent(listener, [NAMESPACE, FORBIDDEN]);
  });
  after(async () => {
    await world?.close();
  });

  const deploy = async (name: string, namespace: string) => {
    const created = await world.api('POST', '/v2/deployments', {
      name,
      source: 'external_container',
      source_config: { listener_id: listener.id, listener_config: { k8s_namespace: namespace } },
      source_revision_config: { image_uri: 'ghcr.io/acme/support-agent:1.4.2' },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    return { id: created.body.id as string, revisionId: created.body.latest_revision_id as string };
  };
  const untilRevision = (d: { id: string; revisionId: string }, status: string) =>
    eventually(
      `revision ${d.revisionId} ${status}`,
      async () => {
        const r = await world.api('GET', `/v2/deployments/${d.id}/revisions/${d.revisionId}`);
        return r.body?.status === status && r.body;
      },
      { describe: () => `agent output:\n${agent.output()}` },
    );

  test('the listener resource shows the forbidden namespace as not watched, with the reason', async () => {
    const seen = await firstHeartbeat(world, listener.id, agent);
    assert.equal(seen.state, 'connected');
    assert.deepEqual(seen.watched_namespaces, [NAMESPACE]);
    assert.deepEqual(seen.namespaces_not_watched, [FORBIDDEN]);
    assert.match(seen.agent_message, /namespace billing is not watched: the Kubernetes API server forbids it/);
    assert.match(seen.agent_message, /cannot list resource/);
  });

  test('a deployment in the forbidden namespace fails with namespace_not_watched; the other is DEPLOYED', async () => {
    const blocked = await deploy('blocked', FORBIDDEN);
    const healthy = await deploy('healthy', NAMESPACE);

    const failed = await untilRevision(blocked, 'DEPLOY_FAILED');
    assert.equal(failed.failure_reason, 'namespace_not_watched');
    assert.match(failed.failure_message, /namespace billing is not watched/);

    await untilRevision(healthy, 'DEPLOYING');
    world.kube.markAvailable(NAMESPACE, 'healthy');
    await untilRevision(healthy, 'DEPLOYED');
    assert.equal(world.kube.list({ namespace: FORBIDDEN }).length, 0);
  });
});
