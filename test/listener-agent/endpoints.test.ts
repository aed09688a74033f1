/**
 * Endpoints on a listener's cluster (docs/listener.md, "Endpoints"), against the fake API server: each
 * endpoint runs as a Deployment, Service and Secret of its own (schema-valid, labelled for its deployment
 * and endpoint), is reported SERVED once rolled out and moved by a new revision, and goes with the
 * endpoint or the deployment. Where the cluster serves the Gateway API and a Gateway is configured, an
 * HTTPRoute sends the endpoint's requests to its Service, by weight with a split, and the split is
 * reported served once the gateway's controller has accepted the route (its status, as a controller
 * writes it) and the split's revision rolled out; a gateway's refusal, no Gateway API or no Gateway is
 * reported as a split not served, in plain words, and told in the heartbeat. A cluster that gets the
 * Gateway API's CRDs while the agent runs is seen without a restart.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { afterEach, describe } from 'node:test';
import { NAMESPACE, deployment, startWorld, type World } from './harness.ts';
import { labelProblems, schemaProblem } from './k8s-schemas.ts';
import type { FakeDeployment, FakeEndpoint, FakeEndpointRevision } from './fake-slipway.ts';
import type { KubeObject } from './fake-kube.ts';
import { test } from '../support/limited-test.ts';

const endpointRevision = (image: string, secret = 'sk-endpoint'): FakeEndpointRevision => ({
  id: randomUUID(),
  number: 1,
  image_uri: image,
  secrets: [{ name: 'OPENAI_API_KEY', value: secret }],
});

const endpoint = (name: string, revision: FakeEndpointRevision, split: FakeEndpoint['split'] = null): FakeEndpoint => ({
  name,
  revision,
  served_revision_id: null,
  split,
});

type PodTemplate = {
  metadata: { labels: Record<string, string> };
  spec: { containers: { image: string; env?: { name: string; valueFrom?: { secretKeyRef?: { name: string } } }[] }[] };
};
const templateOf = (o: KubeObject | undefined) => (o?.spec as { template: PodTemplate } | undefined)?.template;

describe('listener agent: endpoints', { timeout: 120_000 }, () => {
  let world: World;
  afterEach(async () => {
    await world.close();
  });

  /** A DEPLOYED deployment with `endpoints`, its own Deployment available. */
  async function running(endpoints: FakeEndpoint[], name = 'support-agent'): Promise<FakeDeployment> {
    const d = deployment({ name, endpoints });
    d.revision!.status = 'DEPLOYED';
    world.slipway.upsert(d);
    world.start();
    await world.kube.waitFor(() => world.kube.get('Deployment', NAMESPACE, name));
    world.kube.markAvailable(NAMESPACE, name);
    return d;
  }
  const splitReport = (revisionId: string, status: 'SERVED' | 'FAILED') =>
    world.slipway.waitFor(
      () =>
        world.slipway.endpointReports.find(
          (r) => r.split !== undefined && r.revision_id === revisionId && r.status === status,
        ),
      `a split report ${status}`,
    );
  const servedReport = (endpointName: string, revisionId: string) =>
    world.slipway.waitFor(() =>
      world.slipway.endpointReports.find(
        (r) => r.endpoint === endpointName && r.revision_id === revisionId && r.status === 'SERVED',
      ),
    );

  test('an endpoint is a Deployment, Service and Secret of its own, schema-valid, served once rolled out, moved by a new revision, and deleted with the endpoint', async () => {
    world = await startWorld({ autoRollout: false });
    const first = endpointRevision('ghcr.io/acme/support-agent:1.4.0', 'sk-old');
    const d = await running([endpoint('staging', first)]);

    const app = await world.kube.waitFor(() => world.kube.get('Deployment', NAMESPACE, 'support-agent--staging'));
    const service = world.kube.get('Service', NAMESPACE, 'support-agent--staging')!;
    const secret = world.kube.get('Secret', NAMESPACE, 'support-agent--staging')!;
    for (const object of [app, service, secret]) {
      assert.equal(schemaProblem(object), null, `${object.kind} is valid`);
      assert.deepEqual(labelProblems(object.metadata.labels, object.kind), []);
      assert.equal(object.metadata.labels!['slipway.dev/deployment-id'], d.deployment_id);
      assert.equal(object.metadata.labels!['slipway.dev/endpoint'], 'staging');
    }
    const template = templateOf(app)!;
    assert.equal(template.spec.containers[0]!.image, 'ghcr.io/acme/support-agent:1.4.0');
    assert.equal(template.metadata.labels['slipway.dev/revision-id'], first.id);
    assert.equal(
      template.spec.containers[0]!.env!.find((e) => e.name === 'OPENAI_API_KEY')!.valueFrom!.secretKeyRef!.name,
      'support-agent--staging',
      "the endpoint revision's own secrets",
    );
    assert.equal(Buffer.from(secret.data!.OPENAI_API_KEY!, 'base64').toString(), 'sk-old');
    assert.deepEqual((service.spec as { selector: Record<string, string> }).selector, {
      'slipway.dev/deployment-id': d.deployment_id,
      'slipway.dev/component': 'endpoint',
      'slipway.dev/endpoint': 'staging',
      'slipway.dev/endpoint-role': 'main',
    });
    // The deployment's own objects are untouched by it: its Deployment still selects only its web pods.
    assert.equal(
      (world.kube.get('Deployment', NAMESPACE, 'support-agent')!.spec as any).selector.matchLabels[
        'slipway.dev/component'
      ],
      'web',
    );
    assert.equal(world.slipway.endpointReports.length, 0, 'nothing reported before the rollout');

    world.kube.markAvailable(NAMESPACE, 'support-agent--staging');
    await servedReport('staging', first.id);
    assert.equal(world.slipway.deployment(d.deployment_id)!.endpoints![0]!.served_revision_id, first.id);

    // Moved: the same Deployment rolls to the new revision, and the move is reported once rolled out.
    const second = endpointRevision('ghcr.io/acme/support-agent:1.5.0', 'sk-new');
    world.slipway.upsert({
      ...world.slipway.deployment(d.deployment_id)!,
      endpoints: [{ ...endpoint('staging', second), served_revision_id: first.id }],
    });
    await world.kube.waitFor(
      () =>
        templateOf(world.kube.get('Deployment', NAMESPACE, 'support-agent--staging'))?.spec.containers[0]!.image ===
        'ghcr.io/acme/support-agent:1.5.0',
    );
    assert.equal(
      world.slipway.endpointReports.filter((r) => r.revision_id === second.id).length,
      0,
      'not served before its rollout',
    );
    world.kube.markAvailable(NAMESPACE, 'support-agent--staging');
    await servedReport('staging', second.id);
    assert.equal(
      Buffer.from(
        world.kube.get('Secret', NAMESPACE, 'support-agent--staging')!.data!.OPENAI_API_KEY!,
        'base64',
      ).toString(),
      'sk-new',
    );

    // Deleted: everything of the endpoint goes, the deployment's own objects stay.
    world.slipway.upsert({ ...world.slipway.deployment(d.deployment_id)!, endpoints: [] });
    await world.kube.waitFor(() => world.kube.list({ selector: 'slipway.dev/endpoint=staging' }).length === 0);
    assert.ok(world.kube.get('Deployment', NAMESPACE, 'support-agent'), "the deployment's own Deployment stays");
    assert.ok(world.kube.get('Service', NAMESPACE, 'support-agent'));
  });

  test("a deployment's delete takes its endpoints' objects with it", async () => {
    world = await startWorld({ autoRollout: true });
    const d = await running([endpoint('production', endpointRevision('ghcr.io/acme/support-agent:1.4.0'))]);
    await servedReport('production', d.endpoints![0]!.revision.id);
    world.slipway.upsert({ ...world.slipway.deployment(d.deployment_id)!, delete: true, endpoints: [] });
    await world.slipway.waitFor(() => world.slipway.deletions.includes(d.deployment_id));
    assert.deepEqual(
      world.kube
        .list({ selector: `slipway.dev/deployment-id=${d.deployment_id}` })
        .map((o) => `${o.kind} ${o.metadata.name}`),
      [],
      'nothing of the deployment or its endpoint is left',
    );
  });

  test('with the Gateway API and a Gateway: an HTTPRoute to the endpoint, weighted over two Services with a split', async () => {
    world = await startWorld(
      { autoRollout: true, gatewayApi: true },
      { gateway: { namespace: 'gateways', name: 'public' }, gatewayDomain: 'apps.example.com' },
    );
    const main = endpointRevision('ghcr.io/acme/support-agent:1.4.0');
    const d = await running([endpoint('production', main)]);
    const route = await world.kube.waitFor(() => world.kube.get('HTTPRoute', NAMESPACE, 'support-agent--production'));
    assert.equal(schemaProblem(route), null, 'valid against the Gateway API CRD schema');
    assert.deepEqual(route.spec, {
      parentRefs: [{ group: 'gateway.networking.k8s.io', kind: 'Gateway', namespace: 'gateways', name: 'public' }],
      hostnames: ['support-agent--production.apps.example.com'],
      rules: [{ backendRefs: [{ name: 'support-agent--production', port: 80 }] }],
    });
    await servedReport('production', main.id);

    const canary = endpointRevision('ghcr.io/acme/support-agent:1.5.0');
    world.slipway.upsert({
      ...world.slipway.deployment(d.deployment_id)!,
      endpoints: [
        {
          ...endpoint('production', main, { revision_id: canary.id, weight: 20, revision: canary }),
          served_revision_id: main.id,
        },
      ],
    });
    const weighted = await world.kube.waitFor(() => {
      const r = world.kube.get('HTTPRoute', NAMESPACE, 'support-agent--production');
      return (r?.spec as any)?.rules[0].backendRefs.length === 2 && r;
    });
    assert.deepEqual((weighted.spec as any).rules[0].backendRefs, [
      { name: 'support-agent--production', port: 80, weight: 80 },
      { name: 'support-agent--production--split', port: 80, weight: 20 },
    ]);
    assert.equal(schemaProblem(weighted), null);
    const split = world.kube.get('Deployment', NAMESPACE, 'support-agent--production--split')!;
    assert.equal(templateOf(split)!.spec.containers[0]!.image, 'ghcr.io/acme/support-agent:1.5.0');
    assert.equal(schemaProblem(split), null);
    assert.equal(schemaProblem(world.kube.get('Service', NAMESPACE, 'support-agent--production--split')!), null);
    assert.equal(
      world.slipway.endpointReports.filter((r) => r.split !== undefined).length,
      0,
      'no gateway controller has accepted the route yet: the split is not said to be served',
    );
    // The Gateway's controller accepts the route (its status.parents, as a controller writes them).
    world.kube.setGatewayController({ accepts: true });
    const servedSplit = await splitReport(canary.id, 'SERVED');
    assert.deepEqual(servedSplit.split, { weight: 20 });
    assert.equal(servedSplit.applied, true);

    // The split ends: its objects go, the route goes back to one backend.
    world.slipway.upsert({
      ...world.slipway.deployment(d.deployment_id)!,
      endpoints: [{ ...endpoint('production', main), served_revision_id: main.id }],
    });
    await world.kube.waitFor(
      () => world.kube.get('Deployment', NAMESPACE, 'support-agent--production--split') === undefined,
    );
    await world.kube.waitFor(
      () =>
        (world.kube.get('HTTPRoute', NAMESPACE, 'support-agent--production')?.spec as any)?.rules[0].backendRefs
          .length === 1,
    );
  });

  for (const [what, options, configured, why] of [
    [
      'without the Gateway API',
      { gatewayApi: false },
      { gateway: { namespace: 'gateways', name: 'public' }, heartbeatSeconds: 5 },
      /^no Gateway API in this cluster/,
    ],
    [
      'without a Gateway configured',
      { gatewayApi: true },
      { heartbeatSeconds: 5 },
      /^SLIPWAY_LISTENER_GATEWAY not set/,
    ],
  ] as const) {
    test(`${what}: no HTTPRoute, the split is refused in plain words, and the endpoint's revision serves`, async () => {
      world = await startWorld({ autoRollout: true, ...options }, configured);
      const main = endpointRevision('ghcr.io/acme/support-agent:1.4.0');
      const canary = endpointRevision('ghcr.io/acme/support-agent:1.5.0');
      await running([endpoint('production', main, { revision_id: canary.id, weight: 50, revision: canary })]);
      const refusal = await splitReport(canary.id, 'FAILED');
      assert.deepEqual(refusal.split, { weight: 50 });
      assert.match(refusal.message!, why);
      await servedReport('production', main.id);
      const heartbeat = await world.slipway.waitFor(
        () =>
          world.slipway.heartbeats.find(
            (h) => h.message !== undefined && /split of endpoint production .* is not served/.test(h.message),
          ),
        'a heartbeat that says why',
      );
      assert.match(heartbeat.message!, new RegExp(why.source.slice(1)));
      assert.equal(world.kube.list({ kind: 'HTTPRoute' }).length, 0);
      assert.equal(world.kube.get('Deployment', NAMESPACE, 'support-agent--production--split'), undefined);
      assert.equal(
        world.slipway.endpointReports.filter((r) => r.status === 'FAILED').length,
        1,
        'said once, not at every pass',
      );
    });
  }

  test("a gateway that refuses the route: the split is reported not served with the gateway's words", async () => {
    world = await startWorld(
      { autoRollout: true, gatewayApi: true },
      { gateway: { namespace: 'gateways', name: 'public' }, heartbeatSeconds: 5 },
    );
    world.kube.setGatewayController({
      refuses: 'No listener of Gateway gateways/public allows routes from namespace agents',
    });
    const main = endpointRevision('ghcr.io/acme/support-agent:1.4.0');
    const canary = endpointRevision('ghcr.io/acme/support-agent:1.5.0');
    await running([endpoint('production', main, { revision_id: canary.id, weight: 30, revision: canary })]);
    const refusal = await splitReport(canary.id, 'FAILED');
    assert.match(
      refusal.message!,
      /^the gateway refused the route: No listener of Gateway gateways\/public allows routes from namespace agents \(Accepted NotAllowedByListeners\)$/,
    );
    assert.deepEqual(refusal.split, { weight: 30 });
    await servedReport('production', main.id);
    const heartbeat = await world.slipway.waitFor(() =>
      world.slipway.heartbeats.find((h) => h.message !== undefined && /the gateway refused the route/.test(h.message)),
    );
    assert.match(heartbeat.message!, /No listener of Gateway gateways\/public/);

    // The operator fixes the Gateway's allowedRoutes: the controller accepts, the split is served.
    world.kube.setGatewayController({ accepts: true });
    const served = await splitReport(canary.id, 'SERVED');
    assert.deepEqual(served.split, { weight: 30 });
  });

  test('a cluster that gets the Gateway API while the agent runs: its routes are written and the split served, no restart', async () => {
    world = await startWorld(
      { autoRollout: true, gatewayApi: false },
      { gateway: { namespace: 'gateways', name: 'public' } },
      { resyncMs: 100, gatewayRediscoverMs: 0 },
    );
    world.kube.setGatewayController({ accepts: true });
    const main = endpointRevision('ghcr.io/acme/support-agent:1.4.0');
    const canary = endpointRevision('ghcr.io/acme/support-agent:1.5.0');
    await running([endpoint('production', main, { revision_id: canary.id, weight: 10, revision: canary })]);
    const refusal = await splitReport(canary.id, 'FAILED');
    assert.match(refusal.message!, /^no Gateway API in this cluster/);

    world.kube.installGatewayApi();
    const route = await world.kube.waitFor(() => {
      const r = world.kube.get('HTTPRoute', NAMESPACE, 'support-agent--production');
      return (r?.spec as any)?.rules[0].backendRefs.length === 2 && r;
    }, 'the weighted route, once the Gateway API is seen');
    assert.equal(schemaProblem(route), null);
    const served = await splitReport(canary.id, 'SERVED');
    assert.deepEqual(served.split, { weight: 10 });
  });

  test("a cluster whose Gateway API is removed: the route's 404 makes the agent look again, and the split is reported not served", async () => {
    world = await startWorld(
      { autoRollout: true, gatewayApi: true },
      { gateway: { namespace: 'gateways', name: 'public' } },
    );
    world.kube.setGatewayController({ accepts: true });
    const main = endpointRevision('ghcr.io/acme/support-agent:1.4.0');
    const canary = endpointRevision('ghcr.io/acme/support-agent:1.5.0');
    const d = await running([endpoint('production', main, { revision_id: canary.id, weight: 10, revision: canary })]);
    await splitReport(canary.id, 'SERVED');

    world.kube.uninstallGatewayApi();
    // The split widens: its route's apply is answered 404 now.
    world.slipway.upsert({
      ...world.slipway.deployment(d.deployment_id)!,
      endpoints: [
        {
          ...endpoint('production', main, { revision_id: canary.id, weight: 40, revision: canary }),
          served_revision_id: main.id,
        },
      ],
    });
    const refusal = await world.slipway.waitFor(() =>
      world.slipway.endpointReports.find((r) => r.split?.weight === 40 && r.status === 'FAILED'),
    );
    assert.match(refusal.message!, /^no Gateway API in this cluster/);
  });
});
