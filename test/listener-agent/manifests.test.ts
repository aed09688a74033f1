/**
 * The manifests built from a revision: every one valid against the Kubernetes schemas, and every
 * resource_spec field landing where docs/listener.md says it does.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { V1Container, V1Deployment, V1HorizontalPodAutoscaler, V1StatefulSet } from '@kubernetes/client-node';
import type { DesiredRevision } from '@slipway/listener/desired-state';
import type { Manifest } from '@slipway/listener/kube-objects';
import { buildManifests, type BuildContext } from '@slipway/listener/manifest-builder';
import { objectName } from '@slipway/listener/manifest-names';
import { readResourceSpec, UNSUPPORTED_FIELDS } from '@slipway/listener/resource-spec';
import { labelProblems, schemaProblem } from './k8s-schemas.ts';

const ctx: BuildContext = {
  listenerId: 'listener-1',
  appPort: 8080,
  progressDeadlineSeconds: 600,
  postgresImage: 'postgres:17-alpine',
  redisImage: 'redis:7-alpine',
};
const ID = '0b9e1c2d-0000-4000-8000-000000000001';

function build(
  resourceSpec: Record<string, unknown> | null,
  revision: Partial<DesiredRevision> = {},
  name = 'support-agent',
): Manifest[] {
  const read = readResourceSpec(resourceSpec);
  assert.deepEqual(read.problems, []);
  return buildManifests(
    {
      deployment: { deployment_id: ID, name, namespace: 'agents', delete: false, custom_url: null, revision: null },
      revision: {
        id: 'rev-1',
        number: 1,
        status: 'QUEUED',
        secrets: [{ name: 'OPENAI_API_KEY', value: 'sk' }],
        secret_references: null,
        resource_spec: resourceSpec,
        ...revision,
        image_uri: 'ghcr.io/acme/app:1',
      },
      namespace: 'agents',
      spec: read.spec,
      dbPassword: 'pw',
      existingDbStorage: null,
    },
    ctx,
  );
}

const find = <T>(manifests: Manifest[], kind: string, name: string): T => {
  const found = manifests.find((m) => m.kind === kind && m.metadata.name === name);
  assert.ok(found, `${kind} ${name}`);
  return found as unknown as T;
};

function assertValid(manifests: Manifest[]) {
  for (const m of manifests) {
    assert.equal(schemaProblem(m), null, `${m.kind} ${m.metadata.name}`);
    assert.deepEqual(labelProblems(m.metadata.labels, `${m.kind} ${m.metadata.name}`), []);
    assert.ok(m.metadata.name.length <= 63, m.metadata.name);
  }
}

const FULL = {
  min_scale: 2,
  max_scale: 6,
  cpu: 0.5,
  cpu_limit: 2,
  memory_mb: 512,
  memory_limit_mb: 2048,
  queue_min_scale: 1,
  queue_max_scale: 3,
  queue_cpu: 0.25,
  queue_cpu_limit: 1,
  queue_memory_mb: 256,
  queue_memory_limit_mb: 512,
  orchestrator_cpu: 1,
  executor_memory_mb: 128,
  cache_cpu: 0.1,
  cache_cpu_limit: 0.5,
  cache_memory_mb: 64,
  cache_memory_limit_mb: 128,
  db_cpu: 0.5,
  db_cpu_limit: 1,
  db_memory_mb: 512,
  db_memory_limit_mb: 1024,
  db_storage_gi: 20,
  db_max_connections: 150,
  labels: { team: 'support', 'app.kubernetes.io/managed-by': 'me' },
  annotations: { 'prometheus.io/scrape': 'true' },
  service_account_name: 'support-agent',
  image_pull_secrets: [{ name: 'ghcr' }],
  volumes: [
    { name: 'config', configMap: { name: 'agent-config' } },
    { name: 'scratch', emptyDir: { sizeLimit: '1Gi' } },
  ],
  volume_mounts: [
    { name: 'config', mountPath: '/etc/agent', readOnly: true },
    { name: 'scratch', mountPath: '/scratch' },
  ],
  init_containers: [
    {
      name: 'migrate',
      image: 'ghcr.io/acme/app:1',
      command: ['npm', 'run', 'migrate'],
      env: [{ name: 'MODE', value: 'migrate' }],
    },
  ],
  sidecars: [
    {
      name: 'proxy',
      image: 'ghcr.io/acme/proxy:2',
      args: ['--port', '9000'],
      resources: { requests: { cpu: '50m' } },
      securityContext: { runAsNonRoot: true },
    },
  ],
};

describe('manifests', () => {
  test('a revision without a resource spec: a Secret, a Deployment of one replica with probes, and a Service, all valid', () => {
    const manifests = build(null);
    assertValid(manifests);
    assert.deepEqual(
      manifests.map((m) => `${m.kind} ${m.metadata.name}`),
      ['Secret support-agent-secrets', 'Service support-agent', 'Deployment support-agent'],
    );
    const app = find<V1Deployment>(manifests, 'Deployment', 'support-agent');
    assert.equal(app.spec!.replicas, 1);
    const container = app.spec!.template.spec!.containers[0]!;
    assert.equal(container.image, 'ghcr.io/acme/app:1');
    assert.deepEqual(container.ports, [{ name: 'http', containerPort: 8080, protocol: 'TCP' }]);
    assert.deepEqual(container.readinessProbe?.tcpSocket, { port: 'http' });
    assert.deepEqual(container.livenessProbe?.tcpSocket, { port: 'http' });
    assert.equal(container.resources, undefined);
    const env = Object.fromEntries((container.env ?? []).map((e) => [e.name, e.value ?? e.valueFrom]));
    assert.equal(env.PORT, '8080');
    assert.deepEqual(env.OPENAI_API_KEY, { secretKeyRef: { name: 'support-agent-secrets', key: 'OPENAI_API_KEY' } });
    assert.equal(env.SLIPWAY_REVISION_ID, 'rev-1');
  });

  test('every resource_spec field lands where docs/listener.md says', () => {
    const manifests = build(FULL, {
      secret_references: [{ name: 'STRIPE_KEY', secret_name: 'stripe', secret_key: 'api-key' }],
    });
    assertValid(manifests);
    assert.deepEqual(manifests.map((m) => `${m.kind} ${m.metadata.name}`).sort(), [
      'Deployment support-agent',
      'Deployment support-agent-cache',
      'Deployment support-agent-queue',
      'HorizontalPodAutoscaler support-agent',
      'HorizontalPodAutoscaler support-agent-queue',
      'Secret support-agent-db',
      'Secret support-agent-secrets',
      'Service support-agent',
      'Service support-agent-cache',
      'Service support-agent-db',
      'StatefulSet support-agent-db',
    ]);

    const app = find<V1Deployment>(manifests, 'Deployment', 'support-agent');
    assert.equal(app.spec!.replicas, undefined, 'the autoscaler owns replicas');
    const pod = app.spec!.template.spec!;
    const container = pod.containers[0]!;
    assert.deepEqual(container.resources, {
      requests: { cpu: '500m', memory: '512Mi' },
      limits: { cpu: '2000m', memory: '2048Mi' },
    });
    assert.deepEqual(container.volumeMounts, FULL.volume_mounts);
    assert.equal(pod.serviceAccountName, 'support-agent');
    assert.deepEqual(pod.imagePullSecrets, [{ name: 'ghcr' }]);
    assert.deepEqual(pod.volumes, FULL.volumes);
    assert.deepEqual(
      pod.initContainers!.map((c: V1Container) => [c.name, c.restartPolicy]),
      [
        ['migrate', undefined],
        ['proxy', 'Always'],
      ],
    );
    assert.equal(app.metadata!.labels!.team, 'support');
    assert.equal(
      app.metadata!.labels!['app.kubernetes.io/managed-by'],
      'slipway-listener',
      'a user label cannot take the object away from the listener',
    );
    assert.equal(app.spec!.template.metadata!.labels!.team, 'support');
    assert.equal(app.spec!.template.metadata!.annotations!['prometheus.io/scrape'], 'true');
    const envNames = (container.env ?? []).map((e) => e.name);
    for (const name of [
      'OPENAI_API_KEY',
      'STRIPE_KEY',
      'DATABASE_URL',
      'REDIS_URL',
      'PORT',
      'HOST',
      'SLIPWAY_DEPLOYMENT_ID',
      'SLIPWAY_PROCESS_TYPE',
    ])
      assert.ok(envNames.includes(name), name);
    assert.deepEqual(container.env!.find((e) => e.name === 'STRIPE_KEY')!.valueFrom, {
      secretKeyRef: { name: 'stripe', key: 'api-key' },
    });

    const hpa = find<V1HorizontalPodAutoscaler & { spec: { metrics: unknown[] } }>(
      manifests,
      'HorizontalPodAutoscaler',
      'support-agent',
    );
    assert.equal(hpa.spec.minReplicas, 2);
    assert.equal(hpa.spec.maxReplicas, 6);
    assert.deepEqual(hpa.spec.scaleTargetRef, { apiVersion: 'apps/v1', kind: 'Deployment', name: 'support-agent' });

    const queue = find<V1Deployment>(manifests, 'Deployment', 'support-agent-queue');
    const worker = queue.spec!.template.spec!.containers[0]!;
    assert.equal(worker.image, 'ghcr.io/acme/app:1');
    assert.deepEqual(worker.resources, {
      requests: { cpu: '250m', memory: '256Mi' },
      limits: { cpu: '1000m', memory: '512Mi' },
    });
    assert.ok(!(worker.env ?? []).some((e) => e.name === 'PORT'), 'the worker serves nothing');
    assert.equal(worker.env!.find((e) => e.name === 'SLIPWAY_PROCESS_TYPE')!.value, 'queue');
    assert.equal(worker.readinessProbe, undefined);
    const queueHpa = find<V1HorizontalPodAutoscaler>(manifests, 'HorizontalPodAutoscaler', 'support-agent-queue');
    assert.equal(queueHpa.spec!.minReplicas, 1);
    assert.equal(queueHpa.spec!.maxReplicas, 3);

    const db = find<V1StatefulSet>(manifests, 'StatefulSet', 'support-agent-db');
    const postgres = db.spec!.template.spec!.containers[0]!;
    assert.deepEqual(postgres.resources, {
      requests: { cpu: '500m', memory: '512Mi' },
      limits: { cpu: '1000m', memory: '1024Mi' },
    });
    assert.deepEqual(postgres.args, ['-c', 'max_connections=150']);
    assert.equal(db.spec!.volumeClaimTemplates![0]!.spec!.resources!.requests!.storage, '20Gi');
    assert.equal(
      db.spec!.volumeClaimTemplates![0]!.metadata!.labels!['slipway.dev/deployment-id'],
      ID,
      'the volume claims carry the owner labels too',
    );
    const dbSecret = find<{ data: Record<string, string> }>(manifests, 'Secret', 'support-agent-db');
    assert.equal(
      Buffer.from(dbSecret.data.DATABASE_URL!, 'base64').toString(),
      'postgres://app:pw@support-agent-db:5432/app',
    );

    const cache = find<V1Deployment>(manifests, 'Deployment', 'support-agent-cache');
    const redis = cache.spec!.template.spec!.containers[0]!;
    assert.deepEqual(redis.resources, {
      requests: { cpu: '100m', memory: '64Mi' },
      limits: { cpu: '500m', memory: '128Mi' },
    });
    assert.ok(redis.args!.includes('--maxmemory'));
  });

  test('every object carries the owner labels, and selectors select only their own pods', () => {
    for (const m of build(FULL)) {
      assert.equal(m.metadata.labels['app.kubernetes.io/managed-by'], 'slipway-listener');
      assert.equal(m.metadata.labels['slipway.dev/deployment-id'], ID);
      const spec = m.spec as
        | {
            selector?: { matchLabels?: Record<string, string> };
            template?: { metadata: { labels: Record<string, string> } };
          }
        | undefined;
      if (spec?.selector?.matchLabels) {
        for (const [k, v] of Object.entries(spec.selector.matchLabels))
          assert.equal(spec.template!.metadata.labels[k], v);
      }
    }
  });

  test('the fields with no container counterpart are reported as ignored, not silently dropped', () => {
    const read = readResourceSpec(FULL);
    assert.deepEqual(read.ignored, ['orchestrator_cpu', 'executor_memory_mb']);
    assert.ok(UNSUPPORTED_FIELDS.every((f) => f.startsWith('orchestrator_') || f.startsWith('executor_')));
  });

  test('scale: min_scale replicas without an autoscaler; zero is zero; autoscaling without cpu requests some', () => {
    assert.equal(find<V1Deployment>(build({ min_scale: 3 }), 'Deployment', 'support-agent').spec!.replicas, 3);
    assert.equal(
      find<V1Deployment>(build({ min_scale: 0, max_scale: 0 }), 'Deployment', 'support-agent').spec!.replicas,
      0,
    );
    const scaled = build({ min_scale: 0, max_scale: 2 });
    assertValid(scaled);
    assert.equal(
      find<V1HorizontalPodAutoscaler>(scaled, 'HorizontalPodAutoscaler', 'support-agent').spec!.minReplicas,
      1,
    );
    assert.equal(
      find<V1Deployment>(scaled, 'Deployment', 'support-agent').spec!.template.spec!.containers[0]!.resources!.requests!
        .cpu,
      '250m',
    );
    assert.equal(
      build({ min_scale: 3, max_scale: 3 }).some((m) => m.kind === 'HorizontalPodAutoscaler'),
      false,
    );
  });

  test('no secrets: no Secret, and nothing refers to one', () => {
    const manifests = build(null, { secrets: [] });
    assertValid(manifests);
    assert.equal(
      manifests.some((m) => m.kind === 'Secret'),
      false,
    );
  });

  test('a later layer of env wins, as on the own data plane: a secret named PORT does not move the port', () => {
    const container = find<V1Deployment>(
      build(null, { secrets: [{ name: 'PORT', value: '1' }] }),
      'Deployment',
      'support-agent',
    ).spec!.template.spec!.containers[0]!;
    const ports = (container.env ?? []).filter((e) => e.name === 'PORT');
    assert.deepEqual(ports, [{ name: 'PORT', value: '8080' }]);
  });

  test('names derive from the deployment name and stay DNS labels however long it is', () => {
    const long = `a${'b'.repeat(61)}c`;
    const manifests = build(FULL, {}, long);
    assertValid(manifests);
    assert.equal(objectName(long, ID, 'web'), long);
    const dbName = objectName(long, ID, 'db');
    assert.ok(dbName.length <= 63 && dbName.endsWith('-db') && /^[a-z0-9-]+$/.test(dbName), dbName);
    assert.notEqual(
      objectName(long, ID, 'db'),
      objectName(long, 'another-id', 'db'),
      'two long names with one beginning do not collide',
    );
  });

  test('the same revision builds the same manifests (the hash is stable); another revision rolls the pods', () => {
    const a = build(FULL);
    const b = build(FULL);
    assert.deepEqual(a, b);
    const next = build(FULL, { id: 'rev-2' });
    const hash = (ms: Manifest[], kind: string, name: string) =>
      find<Manifest>(ms, kind, name).metadata.annotations?.['slipway.dev/spec-hash'];
    assert.notEqual(hash(a, 'Deployment', 'support-agent'), hash(next, 'Deployment', 'support-agent'));
    const dbTemplate = (ms: Manifest[]) =>
      JSON.stringify(find<V1StatefulSet>(ms, 'StatefulSet', 'support-agent-db').spec!.template);
    assert.equal(dbTemplate(a), dbTemplate(next), 'a new revision does not restart the database');
  });
});
