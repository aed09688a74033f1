/**
 * A deployment's life on a listener, as a user sees it: a new revision replaces the old one, a delete
 * leaves nothing behind before it is confirmed, a restarted agent finishes what the previous one
 * started, and a full resource spec becomes a database, a cache, a queue worker and autoscalers.
 */
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe } from 'node:test';
import { NAMESPACE, deployment, revision, startWorld, type World } from './harness.ts';
import { schemaProblem } from './k8s-schemas.ts';
import type { KubeObject } from './fake-kube.ts';
import { test } from '../support/limited-test.ts';

type PodTemplate = {
  metadata: { labels: Record<string, string> };
  spec: { containers: { name: string; image: string; env?: { name: string }[] }[] };
};
const templateOf = (o: KubeObject | undefined) => (o?.spec as { template: PodTemplate } | undefined)?.template;

describe('listener agent: a deployment over its life', { timeout: 120_000 }, () => {
  let world: World;
  beforeEach(async () => {
    world = await startWorld();
  });
  afterEach(async () => {
    await world.close();
  });

  const reported = (revisionId: string, status: string) =>
    world.slipway.waitFor(() => world.slipway.reports.find((r) => r.revision_id === revisionId && r.status === status));
  const owned = (deploymentId: string) => world.kube.list({ selector: `slipway.dev/deployment-id=${deploymentId}` });

  test('a new revision (a new image) replaces the old one and is DEPLOYED in its turn', async () => {
    const d = deployment({ name: 'support-agent' });
    world.slipway.upsert(d);
    const agent = world.start();
    await reported(d.revision!.id, 'DEPLOYING');
    world.kube.markAvailable(NAMESPACE, 'support-agent');
    await reported(d.revision!.id, 'DEPLOYED');
    const first = world.kube.get('Deployment', NAMESPACE, 'support-agent')!;

    const next = revision({
      image_uri: 'ghcr.io/acme/support-agent:1.5.0',
      secrets: [{ name: 'OPENAI_API_KEY', value: 'sk-rotated' }],
    });
    world.slipway.upsert({ ...world.slipway.deployment(d.deployment_id)!, revision: next });
    const updated = await world.kube.waitFor(() => {
      const app = world.kube.get('Deployment', NAMESPACE, 'support-agent');
      return templateOf(app)?.spec.containers[0]!.image === 'ghcr.io/acme/support-agent:1.5.0' && app;
    });
    assert.equal(
      updated.metadata.generation,
      (first.metadata.generation ?? 1) + 1,
      'the same Deployment, rolled to a new generation',
    );
    assert.equal(templateOf(updated)!.metadata.labels['slipway.dev/revision-id'], next.id);
    assert.equal(
      Buffer.from(
        world.kube.get('Secret', NAMESPACE, 'support-agent-secrets')!.data!.OPENAI_API_KEY!,
        'base64',
      ).toString(),
      'sk-rotated',
    );

    await reported(next.id, 'DEPLOYING');
    world.kube.markAvailable(NAMESPACE, 'support-agent');
    await reported(next.id, 'DEPLOYED');
    assert.deepEqual(world.slipway.statusesOf(next.id), ['AWAITING_DEPLOY', 'DEPLOYING', 'DEPLOYED']);
    assert.deepEqual(
      world.slipway.statusesOf(d.revision!.id),
      ['AWAITING_DEPLOY', 'DEPLOYING', 'DEPLOYED'],
      'nothing more said about the old one',
    );
    assert.equal(world.kube.list({ kind: 'Deployment' }).length, 1);
    await agent.stop();
  });

  test('a failed new revision leaves the old pods serving, and the failure does not stick to the next one', async () => {
    const d = deployment({ name: 'steady' });
    world.slipway.upsert(d);
    const agent = world.start();
    await reported(d.revision!.id, 'DEPLOYING');
    world.kube.markAvailable(NAMESPACE, 'steady');
    await reported(d.revision!.id, 'DEPLOYED');

    const broken = revision({ image_uri: 'ghcr.io/acme/steady:typo' });
    world.slipway.upsert({ ...world.slipway.deployment(d.deployment_id)!, revision: broken });
    await reported(broken.id, 'DEPLOYING');
    world.kube.failPods(NAMESPACE, 'steady', 'ErrImagePull', 'manifest unknown');
    const failed = await reported(broken.id, 'DEPLOY_FAILED');
    assert.equal(failed.failure_reason, 'image_pull_failed');

    // The service goes back to the revision that works; the agent rolls it back and says nothing new about it.
    world.slipway.upsert({
      ...world.slipway.deployment(d.deployment_id)!,
      revision: { ...d.revision!, status: 'DEPLOYED' },
    });
    const back = await world.kube.waitFor(() => {
      const app = world.kube.get('Deployment', NAMESPACE, 'steady');
      return templateOf(app)?.spec.containers[0]!.image === d.revision!.image_uri && app;
    });
    assert.equal(templateOf(back)!.metadata.labels['slipway.dev/revision-id'], d.revision!.id);
    await agent.stop();
    assert.deepEqual(world.slipway.statusesOf(d.revision!.id), ['AWAITING_DEPLOY', 'DEPLOYING', 'DEPLOYED']);
  });

  test('delete removes every labelled object, then confirms the deletion', async () => {
    world.kube.autoRollout = true;
    const d = deployment({
      name: 'doomed',
      revision: revision({
        resource_spec: { min_scale: 1, max_scale: 3, queue_min_scale: 1, db_storage_gi: 2, cache_memory_mb: 64 },
      }),
    });
    world.slipway.upsert(d);
    const agent = world.start();
    await reported(d.revision!.id, 'DEPLOYED');
    const kinds = new Set(owned(d.deployment_id).map((o) => o.kind));
    assert.deepEqual([...kinds].sort(), [
      'Deployment',
      'HorizontalPodAutoscaler',
      'PersistentVolumeClaim',
      'Pod',
      'Secret',
      'Service',
      'StatefulSet',
    ]);
    // Someone else's object in the same namespace must survive.
    world.kube.put({
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: 'not-ours', namespace: NAMESPACE, labels: { team: 'x' } },
      data: {},
    });

    world.slipway.upsert({ ...world.slipway.deployment(d.deployment_id)!, delete: true });
    await world.slipway.waitFor(() => world.slipway.deletions.includes(d.deployment_id));
    assert.deepEqual(owned(d.deployment_id), [], 'nothing of the deployment is left when the deletion is confirmed');
    assert.equal(world.kube.list({ selector: 'app.kubernetes.io/managed-by=slipway-listener' }).length, 0);
    assert.ok(world.kube.get('Secret', NAMESPACE, 'not-ours'));
    assert.equal(world.slipway.deployment(d.deployment_id), undefined);
    const deletes = world.kube.requests.filter((r) => r.method === 'DELETE');
    assert.ok(deletes.every((r) => r.query.get('propagationPolicy') === 'Foreground'));
    await agent.stop();
    assert.equal(world.slipway.deletions.filter((id) => id === d.deployment_id).length, 1);
  });

  test('an agent killed mid-rollout and started again reports DEPLOYED once', async () => {
    const d = deployment({ name: 'restarted' });
    world.slipway.upsert(d);
    const first = world.start();
    await reported(d.revision!.id, 'DEPLOYING');
    await first.stop();
    const appliesBefore = world.kube.applies().length;

    // The rollout finishes while no agent runs.
    world.kube.markAvailable(NAMESPACE, 'restarted');
    const second = world.start();
    await reported(d.revision!.id, 'DEPLOYED');
    await second.stop();
    assert.deepEqual(world.slipway.statusesOf(d.revision!.id), ['AWAITING_DEPLOY', 'DEPLOYING', 'DEPLOYED']);
    assert.equal(
      world.kube.applies().length,
      appliesBefore,
      'the new agent found everything applied and applied nothing again',
    );
  });

  test('an agent restarted before the service saw its report reports the missing steps once', async () => {
    const d = deployment({ name: 'half-told' });
    world.slipway.upsert(d);
    const first = world.start();
    await reported(d.revision!.id, 'AWAITING_DEPLOY');
    await world.kube.waitFor(() => world.kube.get('Deployment', NAMESPACE, 'half-told'));
    await first.stop();
    world.kube.markAvailable(NAMESPACE, 'half-told');
    const second = world.start();
    await reported(d.revision!.id, 'DEPLOYED');
    await second.stop();
    const applied = world.slipway.reports
      .filter((r) => r.revision_id === d.revision!.id && r.applied)
      .map((r) => r.status);
    assert.deepEqual(applied, ['AWAITING_DEPLOY', 'DEPLOYING', 'DEPLOYED']);
  });

  test('a full resource spec becomes app, autoscaler, queue worker, database and cache, all valid', async () => {
    world.kube.autoRollout = true;
    const spec = {
      min_scale: 2,
      max_scale: 5,
      cpu: 0.5,
      cpu_limit: 1,
      memory_mb: 512,
      memory_limit_mb: 1024,
      queue_min_scale: 1,
      queue_max_scale: 4,
      queue_cpu: 0.25,
      queue_memory_mb: 256,
      db_cpu: 0.5,
      db_memory_mb: 512,
      db_memory_limit_mb: 1024,
      db_storage_gi: 10,
      db_max_connections: 200,
      cache_memory_mb: 128,
      cache_memory_limit_mb: 256,
      labels: { team: 'support' },
      annotations: { 'prometheus.io/scrape': 'true' },
      service_account_name: 'support-agent',
      image_pull_secrets: [{ name: 'ghcr' }],
      volumes: [{ name: 'scratch', emptyDir: {} }],
      volume_mounts: [{ name: 'scratch', mountPath: '/scratch' }],
      init_containers: [
        { name: 'migrate', image: 'ghcr.io/acme/support-agent:1.4.2', command: ['npm', 'run', 'migrate'] },
      ],
      sidecars: [{ name: 'proxy', image: 'ghcr.io/acme/proxy:2', args: ['--port', '9000'] }],
    };
    const d = deployment({
      name: 'full',
      custom_url: 'https://support.acme.example/',
      revision: revision({
        resource_spec: spec,
        secret_references: [{ name: 'STRIPE_KEY', secret_name: 'stripe', secret_key: 'api-key' }],
      }),
    });
    world.slipway.upsert(d);
    const agent = world.start();
    await reported(d.revision!.id, 'DEPLOYED');
    await agent.stop();

    const objects = owned(d.deployment_id).filter((o) => o.kind !== 'Pod');
    for (const o of objects) assert.equal(schemaProblem(o), null, `${o.kind} ${o.metadata.name}`);
    const names = objects.map((o) => `${o.kind} ${o.metadata.name}`).sort();
    assert.deepEqual(names, [
      'Deployment full',
      'Deployment full-cache',
      'Deployment full-queue',
      'HorizontalPodAutoscaler full',
      'HorizontalPodAutoscaler full-queue',
      'PersistentVolumeClaim data-full-db-0',
      'Secret full-db',
      'Secret full-secrets',
      'Service full',
      'Service full-cache',
      'Service full-db',
      'StatefulSet full-db',
    ]);
    const app = world.kube.get('Deployment', NAMESPACE, 'full')!;
    const env = templateOf(app)!.spec.containers[0]!.env!.map((e) => e.name);
    for (const name of ['OPENAI_API_KEY', 'STRIPE_KEY', 'DATABASE_URL', 'REDIS_URL', 'PORT'])
      assert.ok(env.includes(name), name);
    assert.equal(app.metadata.labels?.team, 'support');
    assert.equal(
      world.kube.get('Service', NAMESPACE, 'full')!.metadata.annotations?.['slipway.dev/custom-url'],
      'https://support.acme.example/',
    );
    const dbUrl = Buffer.from(world.kube.get('Secret', NAMESPACE, 'full-db')!.data!.DATABASE_URL!, 'base64').toString();
    assert.match(dbUrl, /^postgres:\/\/app:[^@]+@full-db:5432\/app$/);
  });

  test('the database keeps its password and volume size when later revisions change its fields', async () => {
    world.kube.autoRollout = true;
    const d = deployment({ name: 'keeper', revision: revision({ resource_spec: { db_storage_gi: 5 } }) });
    world.slipway.upsert(d);
    const agent = world.start();
    await reported(d.revision!.id, 'DEPLOYED');
    const password = world.kube.get('Secret', NAMESPACE, 'keeper-db')!.data!.POSTGRES_PASSWORD;

    // A bigger volume cannot be had by editing a StatefulSet (its claim templates are immutable).
    const next = revision({ resource_spec: { db_storage_gi: 50, db_memory_mb: 1024 } });
    world.slipway.upsert({ ...world.slipway.deployment(d.deployment_id)!, revision: next });
    await reported(next.id, 'DEPLOYED');
    await agent.stop();
    assert.equal(world.kube.get('Secret', NAMESPACE, 'keeper-db')!.data!.POSTGRES_PASSWORD, password);
    const set = world.kube.get('StatefulSet', NAMESPACE, 'keeper-db')!;
    const claim = (set.spec as { volumeClaimTemplates: { spec: { resources: { requests: { storage: string } } } }[] })
      .volumeClaimTemplates[0]!;
    assert.equal(claim.spec.resources.requests.storage, '5Gi');
    const postgres = (
      set.spec as { template: { spec: { containers: { resources?: { requests?: Record<string, string> } }[] } } }
    ).template.spec.containers[0]!;
    assert.equal(postgres.resources?.requests?.memory, '1024Mi');
  });

  test('a revision that drops the queue and the autoscaler has them removed, and keeps the database data', async () => {
    world.kube.autoRollout = true;
    const d = deployment({
      name: 'shrink',
      revision: revision({ resource_spec: { max_scale: 3, queue_min_scale: 1, db_storage_gi: 1 } }),
    });
    world.slipway.upsert(d);
    const agent = world.start();
    await reported(d.revision!.id, 'DEPLOYED');
    const next = revision({ resource_spec: { min_scale: 1 } });
    world.slipway.upsert({ ...world.slipway.deployment(d.deployment_id)!, revision: next });
    await reported(next.id, 'DEPLOYED');
    await world.kube.waitFor(
      () =>
        !world.kube.get('Deployment', NAMESPACE, 'shrink-queue') &&
        !world.kube.get('HorizontalPodAutoscaler', NAMESPACE, 'shrink') &&
        !world.kube.get('StatefulSet', NAMESPACE, 'shrink-db'),
    );
    await agent.stop();
    assert.ok(
      world.kube.get('PersistentVolumeClaim', NAMESPACE, 'data-shrink-db-0'),
      'the data stays until the deployment is deleted',
    );
    assert.ok(world.kube.get('Secret', NAMESPACE, 'shrink-db'), 'and so does the password it was made with');
  });

  test('a deployment in a namespace the listener does not watch fails with a message saying so', async () => {
    const d = deployment({ name: 'elsewhere', namespace: 'billing' });
    world.slipway.upsert(d);
    const agent = world.start();
    const failed = await reported(d.revision!.id, 'DEPLOY_FAILED');
    await agent.stop();
    assert.equal(failed.failure_reason, 'namespace_not_watched');
    assert.match(failed.message ?? '', /namespace billing is not watched/);
    assert.equal(world.kube.applies().length, 0);
  });

  test('the agent sends heartbeats with its version and namespaces, and recovers from ended watches', async () => {
    const d = deployment({ name: 'beat' });
    world.slipway.upsert(d);
    const agent = world.start();
    const beat = await world.slipway.waitFor(() => world.slipway.heartbeats[0]);
    assert.deepEqual(beat.namespaces, [NAMESPACE]);
    assert.match(beat.version, /^\d+\.\d+\.\d+/);
    await reported(d.revision!.id, 'DEPLOYING');
    world.kube.endWatches();
    world.kube.markAvailable(NAMESPACE, 'beat');
    await reported(d.revision!.id, 'DEPLOYED');
    await agent.stop();
  });

  test('a watch whose history is gone (410) is listed again, and nothing is missed', async () => {
    const d = deployment({ name: 'compacted' });
    world.slipway.upsert(d);
    const agent = world.start();
    await reported(d.revision!.id, 'DEPLOYING');
    const lists = () =>
      world.kube.requests.filter(
        (r) => r.method === 'GET' && r.path.endsWith('/deployments') && r.query.get('watch') !== 'true',
      ).length;
    const before = lists();
    world.kube.compact();
    world.kube.markAvailable(NAMESPACE, 'compacted');
    await reported(d.revision!.id, 'DEPLOYED');
    await agent.stop();
    assert.ok(lists() > before, 'the Deployments were listed again');
  });
});
