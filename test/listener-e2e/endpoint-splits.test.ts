/**
 * A traffic split of an endpoint on a listener, end to end (docs/listener.md, "Endpoints"): set through
 * the real API, written by the agent (a child process) as a weighted HTTPRoute on the operator's Gateway
 * in the fake cluster, whose Gateway controller first refuses the route and then accepts it. The API's
 * endpoint says what the cluster does: `split.served` false with the gateway's words while refused, true
 * once accepted; `split.sticky` false (the Gateway weighs each request), and no automatic rollback taken.
 */
import assert from 'node:assert/strict';
import { after, before, describe } from 'node:test';
import { NAMESPACE, startE2eWorld, type AgentProcess, type E2eWorld } from './e2e-world.ts';
import { eventually } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';

const NAME = 'split-agent';

describe('a split on a listener', { timeout: 300_000 }, () => {
  let world: E2eWorld;
  let agent: AgentProcess;
  let deploymentId: string;
  const revisions: string[] = [];

  before(async () => {
    world = await startE2eWorld({ gatewayApi: true, autoRollout: true });
    world.kube.setGatewayController({ refuses: 'No listener of Gateway gateways/public allows routes from namespace' });
    const listener = await world.registerListener();
    agent = world.startAgent(listener, [NAMESPACE], { SLIPWAY_LISTENER_GATEWAY: 'gateways/public' });
    const created = await world.api('POST', '/v2/deployments', {
      name: NAME,
      source: 'external_container',
      source_config: { listener_id: listener.id, listener_config: { k8s_namespace: NAMESPACE } },
      source_revision_config: { image_uri: 'ghcr.io/acme/split-agent:1.0.0' },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    deploymentId = created.body.id;
    for (const version of ['1.0.0', '2.0.0']) {
      if (version !== '1.0.0') {
        const patched = await world.api('PATCH', `/v2/deployments/${deploymentId}`, {
          source_revision_config: { image_uri: `ghcr.io/acme/split-agent:${version}` },
        });
        assert.equal(patched.status, 200, JSON.stringify(patched.body));
      }
      const latest = (await world.api('GET', `/v2/deployments/${deploymentId}`)).body.latest_revision_id as string;
      await eventually(
        `revision ${version} DEPLOYED`,
        async () =>
          (await world.api('GET', `/v2/deployments/${deploymentId}/revisions/${latest}`)).body?.status === 'DEPLOYED',
        { describe: () => agent.output() },
      );
      revisions.push(latest);
    }
  });
  after(async () => {
    await world?.close();
  });

  test("the endpoint's split says whether the cluster's Gateway serves it, and why not", async () => {
    const [first, second] = revisions as [string, string];
    const base = `/v2/deployments/${deploymentId}/endpoints/production`;
    assert.equal((await world.api('PUT', base, { revision_id: first })).status, 201);
    const set = await world.api('PUT', `${base}/split`, { revision_id: second, weight: 25 });
    assert.equal(set.status, 200, JSON.stringify(set.body));
    assert.equal(set.body.split.sticky, false);
    assert.equal(set.body.split.served, false);

    const refused = await eventually(
      'the split said not served, with the gateway refusing',
      async () => {
        const split = (await world.api('GET', base)).body.split;
        return split?.not_served_reason?.startsWith('the gateway refused the route: No listener') && split;
      },
      { describe: () => agent.output() },
    );
    assert.equal(refused.served, false);

    world.kube.setGatewayController({ accepts: true });
    const served = await eventually(
      'the split served',
      async () => {
        const split = (await world.api('GET', base)).body.split;
        return split?.served === true && split;
      },
      { describe: () => agent.output() },
    );
    assert.equal(served.not_served_reason, null);
    const route = world.kube.get('HTTPRoute', NAMESPACE, `${NAME}--production`);
    assert.deepEqual(
      (route?.spec as any).rules[0].backendRefs.map((b: { weight: number }) => b.weight),
      [75, 25],
    );
    const events = (await world.api('GET', `/v2/deployments/${deploymentId}/events?limit=100`)).body.resources as {
      type: string;
    }[];
    assert.ok(events.some((e) => e.type === 'deployment.endpoint_split_failed'));
    assert.ok(events.some((e) => e.type === 'deployment.endpoint_split_served'));

    const rollback = await world.api('PUT', `${base}/split`, {
      revision_id: second,
      weight: 25,
      rollback: { window_seconds: 60 },
    });
    assert.equal(rollback.status, 400, 'no automatic rollback is taken that would never happen');
  });
});
