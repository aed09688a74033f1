/**
 * Endpoints of a deployment on a listener, end to end (docs/listener.md, "Endpoints"): an endpoint set
 * through the real API reaches the agent in the desired state, the agent applies its own Deployment and
 * Service in the (fake) cluster, and once it has rolled out `served_revision_id` follows, with a
 * `deployment.endpoint_served` event; moved to another revision, it follows again; deleted, its objects go.
 */
import assert from 'node:assert/strict';
import { after, before, describe } from 'node:test';
import { NAMESPACE, startE2eWorld, type AgentProcess, type E2eWorld } from './e2e-world.ts';
import { eventually } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';

const NAME = 'promoted-agent';

describe('endpoints on a listener', { timeout: 300_000 }, () => {
  let world: E2eWorld;
  let agent: AgentProcess;
  let deploymentId: string;
  const revisions: string[] = [];

  const untilRevisionDeployed = (id: string) =>
    eventually(
      `revision ${id} DEPLOYED`,
      async () =>
        (await world.api('GET', `/v2/deployments/${deploymentId}/revisions/${id}`)).body?.status === 'DEPLOYED',
      { describe: () => agent.output() },
    );
  const image = (deployment: string) =>
    (world.kube.get('Deployment', NAMESPACE, deployment)?.spec as any)?.template.spec.containers[0].image as
      string | undefined;

  before(async () => {
    world = await startE2eWorld();
    const listener = await world.registerListener();
    agent = world.startAgent(listener, [NAMESPACE], { SLIPWAY_LISTENER_HEARTBEAT_SECONDS: '5' });
    const created = await world.api('POST', '/v2/deployments', {
      name: NAME,
      source: 'external_container',
      source_config: { listener_id: listener.id, listener_config: { k8s_namespace: NAMESPACE } },
      source_revision_config: { image_uri: 'ghcr.io/acme/promoted-agent:1.0.0' },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    deploymentId = created.body.id;
    for (const version of ['1.0.0', '2.0.0']) {
      if (version !== '1.0.0') {
        const patched = await world.api('PATCH', `/v2/deployments/${deploymentId}`, {
          source_revision_config: { image_uri: `ghcr.io/acme/promoted-agent:${version}` },
        });
        assert.equal(patched.status, 200, JSON.stringify(patched.body));
      }
      await eventually(`${version} applied`, async () => image(NAME) === `ghcr.io/acme/promoted-agent:${version}`, {
        describe: () => agent.output(),
      });
      world.kube.startRollout(NAMESPACE, NAME);
      world.kube.markAvailable(NAMESPACE, NAME);
      const latest = (await world.api('GET', `/v2/deployments/${deploymentId}`)).body.latest_revision_id as string;
      await untilRevisionDeployed(latest);
      revisions.push(latest);
    }
  });
  after(async () => {
    await world?.close();
  });

  test('an endpoint set through the API is applied by the listener, and served_revision_id follows its rollout and its move', async () => {
    const [first, second] = revisions as [string, string];
    const put = await world.api('PUT', `/v2/deployments/${deploymentId}/endpoints/stable`, { revision_id: first });
    assert.equal(put.status, 201, JSON.stringify(put.body));
    await eventually(
      'the endpoint Deployment',
      async () => image(`${NAME}--stable`) === 'ghcr.io/acme/promoted-agent:1.0.0',
      {
        describe: () => agent.output(),
      },
    );
    assert.ok(world.kube.get('Service', NAMESPACE, `${NAME}--stable`), 'and its Service');
    assert.equal(
      (await world.api('GET', `/v2/deployments/${deploymentId}/endpoints/stable`)).body.served_revision_id,
      null,
      'not served before its rollout',
    );
    world.kube.startRollout(NAMESPACE, `${NAME}--stable`);
    world.kube.markAvailable(NAMESPACE, `${NAME}--stable`);
    const servedAt = (revision: string) =>
      eventually(
        `endpoint served at ${revision}`,
        async () =>
          (await world.api('GET', `/v2/deployments/${deploymentId}/endpoints/stable`)).body.served_revision_id ===
          revision,
        { describe: () => agent.output() },
      );
    await servedAt(first);

    const moved = await world.api('PUT', `/v2/deployments/${deploymentId}/endpoints/stable`, { revision_id: second });
    assert.equal(moved.status, 200, JSON.stringify(moved.body));
    await eventually(
      'the endpoint moved',
      async () => image(`${NAME}--stable`) === 'ghcr.io/acme/promoted-agent:2.0.0',
      {
        describe: () => agent.output(),
      },
    );
    world.kube.startRollout(NAMESPACE, `${NAME}--stable`);
    world.kube.markAvailable(NAMESPACE, `${NAME}--stable`);
    await servedAt(second);
    const events = (await world.api('GET', `/v2/deployments/${deploymentId}/events?limit=100`)).body.resources as {
      type: string;
      data: Record<string, unknown>;
    }[];
    const served = events.filter((e) => e.type === 'deployment.endpoint_served').map((e) => e.data.revision_id);
    assert.deepEqual(served.sort(), [first, second].sort(), 'one deployment.endpoint_served per move');

    assert.equal((await world.api('DELETE', `/v2/deployments/${deploymentId}/endpoints/stable`)).status, 204);
    await eventually(
      "the endpoint's objects gone",
      async () => world.kube.list({ selector: 'slipway.dev/endpoint=stable' }).length === 0,
      { describe: () => agent.output() },
    );
    assert.ok(world.kube.get('Deployment', NAMESPACE, NAME), "the deployment's own Deployment stays");
  });
});
