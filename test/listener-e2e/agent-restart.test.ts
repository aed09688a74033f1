/**
 * The agent killed mid-rollout (SIGKILL: a crash, an OOM kill, a lost node) and started again: the new
 * process finds its objects in the cluster, applies nothing again (no second rollout), and the
 * rollout still ends DEPLOYED in the API, whether it finished while no agent ran or after the restart.
 */
import assert from 'node:assert/strict';
import { after, before, describe } from 'node:test';
import { NAMESPACE, startE2eWorld, type AgentProcess, type E2eWorld } from './e2e-world.ts';
import { eventually } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';

const NAME = 'restart-agent';

describe('an agent killed mid-rollout', { timeout: 300_000 }, () => {
  let world: E2eWorld;
  let listener: { id: string; credential: string };
  let agent: AgentProcess;
  let deploymentId: string;

  const untilRevision = (revisionId: string, status: string) =>
    eventually(
      `revision ${revisionId} ${status}`,
      async () => {
        const r = await world.api('GET', `/v2/deployments/${deploymentId}/revisions/${revisionId}`);
        return r.body?.status === status && r.body;
      },
      { describe: () => `agent output:\n${agent.output()}` },
    );
  const generation = () => world.kube.get('Deployment', NAMESPACE, NAME)!.metadata.generation;

  before(async () => {
    world = await startE2eWorld();
    listener = await world.registerListener();
    agent = world.startAgent(listener);
  });
  after(async () => {
    await world?.close();
  });

  test('restarted before the rollout ends: the new agent sees it through to DEPLOYED', async () => {
    const created = await world.api('POST', '/v2/deployments', {
      name: NAME,
      source: 'external_container',
      source_config: { listener_id: listener.id },
      source_revision_config: { image_uri: 'ghcr.io/acme/restart-agent:1.0.0' },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    deploymentId = created.body.id;
    const revisionId: string = created.body.latest_revision_id;
    await untilRevision(revisionId, 'DEPLOYING');
    const rolledTo = generation();

    await agent.kill();
    agent = world.startAgent(listener);
    // The new process has read the desired state and the cluster, and waits for the rollout.
    await eventually(
      'the restarted agent to pick the rollout up',
      () => Promise.resolve(/is rolling out/.test(agent.output())),
      { describe: () => agent.output() },
    );
    world.kube.markAvailable(NAMESPACE, NAME);

    await untilRevision(revisionId, 'DEPLOYED');
    const deployment = await world.api('GET', `/v2/deployments/${deploymentId}`);
    assert.equal(deployment.body.active_revision_id, revisionId);
    assert.equal(deployment.body.status, 'READY');
    assert.equal(generation(), rolledTo, 'the restarted agent applied nothing again: no second rollout');
  });

  test('the rollout finished while no agent ran: the next agent reports it DEPLOYED', async () => {
    const patched = await world.api('PATCH', `/v2/deployments/${deploymentId}`, {
      source_revision_config: { image_uri: 'ghcr.io/acme/restart-agent:1.1.0' },
    });
    assert.equal(patched.status, 200, JSON.stringify(patched.body));
    const revisionId: string = patched.body.latest_revision_id;
    await untilRevision(revisionId, 'DEPLOYING');
    const rolledTo = generation();

    await agent.kill();
    world.kube.markAvailable(NAMESPACE, NAME);
    // Nobody reports while the agent is down: the API still says DEPLOYING.
    assert.equal(
      (await world.api('GET', `/v2/deployments/${deploymentId}/revisions/${revisionId}`)).body.status,
      'DEPLOYING',
    );

    agent = world.startAgent(listener);
    await untilRevision(revisionId, 'DEPLOYED');
    const deployment = await world.api('GET', `/v2/deployments/${deploymentId}`);
    assert.equal(deployment.body.active_revision_id, revisionId);
    assert.equal(generation(), rolledTo, 'the restarted agent applied nothing again');
    assert.equal(
      (world.kube.get('Deployment', NAMESPACE, NAME)!.spec as any).template.spec.containers[0].image,
      'ghcr.io/acme/restart-agent:1.1.0',
    );
  });
});
