/**
 * From a revision and its resource spec to Kubernetes manifests, with no I/O. docs/listener.md has
 * the table of which resource spec field goes where; this module is that table in code.
 *
 * What a deployment becomes (names from `manifest-names.ts`):
 * - `<name>-secrets` Secret: the revision's secrets, read by the containers as env (secretKeyRef);
 * - `<name>` Deployment (the app) and `<name>` Service (port 80 to the app's port);
 * - `<name>` HorizontalPodAutoscaler when `max_scale` > `min_scale`;
 * - `<name>-queue` Deployment (and its autoscaler) when any `queue_*` field is set;
 * - `<name>-db` StatefulSet, Service and Secret (PostgreSQL) when any `db_*` field is set;
 * - `<name>-cache` Deployment and Service (Redis) when any `cache_*` field is set.
 * The database's and the cache's manifests are manifest-data-services.ts; quantities and Secret data
 * manifest-values.ts.
 * Each manifest carries the hash of its own content, so that the agent applies only what changed.
 */
import { createHash } from 'node:crypto';
import type {
  V1Container,
  V1EnvVar,
  V1PodSpec,
  V1PodTemplateSpec,
  V2HorizontalPodAutoscalerSpec,
} from '@kubernetes/client-node';
import type { DesiredDeployment, DesiredRevision } from './desired-state.ts';
import type { Manifest } from './kube-objects.ts';
import {
  COMPONENT_LABEL,
  CUSTOM_URL_ANNOTATION,
  REVISION_ID_ANNOTATION,
  REVISION_ID_LABEL,
  SPEC_HASH_ANNOTATION,
  objectName,
  ownerLabels,
  selectorLabels,
  type Component,
} from './manifest-names.ts';
import { wants, type ResourceSpec } from './resource-spec.ts';
import { cacheManifests, databaseManifests, REDIS_PORT, type ManifestScope } from './manifest-data-services.ts';
import { resources, secretData } from './manifest-values.ts';

export { POSTGRES_PORT, REDIS_PORT, databaseUrl } from './manifest-data-services.ts';
export { resources } from './manifest-values.ts';

export interface BuildContext {
  readonly listenerId: string;
  readonly appPort: number;
  readonly progressDeadlineSeconds: number;
  readonly postgresImage: string;
  readonly redisImage: string;
}

export interface BuildInput {
  readonly deployment: DesiredDeployment;
  readonly revision: DesiredRevision & { readonly image_uri: string };
  readonly namespace: string;
  readonly spec: ResourceSpec;
  /** The database's password: the one already in the cluster, or a new one. Used when `db_*` is set. */
  readonly dbPassword: string;
  /**
   * The database volume's size as created: a StatefulSet's volume claim templates cannot change, so
   * once it exists its size is kept (null: not created yet, `db_storage_gi` applies).
   */
  readonly existingDbStorage: string | null;
}

/** Service port of the app: the cluster-internal address is http://<name>.<namespace>/ */
export const SERVICE_PORT = 80;
/** What an autoscaler aims at: the pods' average CPU use as a share of their request. */
export const TARGET_CPU_UTILIZATION = 80;
/** CPU requested per pod when autoscaling and `cpu` is not set: utilization needs a request to measure against. */
export const AUTOSCALE_DEFAULT_CPU = 0.25;
/** Kinds in the order they are applied. */
const APPLY_ORDER = ['Secret', 'Service', 'StatefulSet', 'Deployment', 'HorizontalPodAutoscaler'];
/** JSON with sorted keys: the same manifest always hashes the same. */
function stableJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(stableJson).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${stableJson(v)}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

export function specHash(manifest: Manifest): string {
  const annotations = { ...manifest.metadata.annotations };
  delete annotations[SPEC_HASH_ANNOTATION];
  const unhashed = { ...manifest, metadata: { ...manifest.metadata, annotations } };
  return createHash('sha256').update(stableJson(unhashed)).digest('hex').slice(0, 20);
}

function withHash(manifest: Manifest): Manifest {
  const hash = specHash(manifest);
  return {
    ...manifest,
    metadata: { ...manifest.metadata, annotations: { ...manifest.metadata.annotations, [SPEC_HASH_ANNOTATION]: hash } },
  };
}

/** Later entries win, as layers do on the service's own data plane (platform variables last). */
function dedupeEnv(env: V1EnvVar[]): V1EnvVar[] {
  const byName = new Map<string, V1EnvVar>();
  for (const e of env) {
    byName.delete(e.name);
    byName.set(e.name, e);
  }
  return [...byName.values()];
}

/** An app container's environment: its secrets, the platform's services and variables (later entries win). */
function containerEnv(
  { deployment, revision }: BuildInput,
  ctx: BuildContext,
  name: (component: Component) => string,
  { withDb, withCache }: { withDb: boolean; withCache: boolean },
  processType: 'web' | 'queue',
): V1EnvVar[] {
  const id = deployment.deployment_id;
  return dedupeEnv([
    ...revision.secrets.map((s) => ({
      name: s.name,
      valueFrom: { secretKeyRef: { name: name('secrets'), key: s.name } },
    })),
    ...(revision.secret_references ?? []).map((r) => ({
      name: r.name,
      valueFrom: { secretKeyRef: { name: r.secret_name, key: r.secret_key } },
    })),
    ...(withDb
      ? [{ name: 'DATABASE_URL', valueFrom: { secretKeyRef: { name: name('db'), key: 'DATABASE_URL' } } }]
      : []),
    ...(withCache ? [{ name: 'REDIS_URL', value: `redis://${name('cache')}:${REDIS_PORT}` }] : []),
    { name: 'SLIPWAY_DEPLOYMENT_ID', value: id },
    { name: 'SLIPWAY_REVISION_ID', value: revision.id },
    { name: 'SLIPWAY_PROCESS_TYPE', value: processType },
    ...(processType === 'web'
      ? [
          { name: 'PORT', value: String(ctx.appPort) },
          // Reachable from the Service: the own data plane's 127.0.0.1 would not be.
          { name: 'HOST', value: '0.0.0.0' },
        ]
      : []),
  ]);
}

/** The pod of a revision's Deployment: the user's service account, pull secrets, volumes, init containers and sidecars. */
function podSpecOf(spec: BuildInput['spec'], containers: V1Container[]): V1PodSpec {
  // Init containers first, in order; then the sidecars, as native sidecars (init containers that keep
  // running: restartPolicy Always), so that they are up before the app starts and stop after it.
  const initContainers: V1Container[] = [
    ...(spec.init_containers ?? []),
    ...(spec.sidecars ?? []).map((c) => ({ ...c, restartPolicy: 'Always' })),
  ];

  return {
    ...(spec.service_account_name !== undefined ? { serviceAccountName: spec.service_account_name } : {}),
    ...(spec.image_pull_secrets !== undefined && spec.image_pull_secrets.length > 0
      ? { imagePullSecrets: spec.image_pull_secrets.map((s) => ({ name: s.name })) }
      : {}),
    ...(spec.volumes !== undefined && spec.volumes.length > 0 ? { volumes: [...spec.volumes] } : {}),
    ...(initContainers.length > 0 ? { initContainers } : {}),
    containers,
    // Service links add a variable per Service in the namespace; an app should not depend on them.
    enableServiceLinks: false,
  };
}

export function buildManifests(input: BuildInput, ctx: BuildContext): Manifest[] {
  const { deployment, revision, namespace, spec } = input;
  const id = deployment.deployment_id;
  const name = (component: Component) => objectName(deployment.name, id, component);
  const owner = ownerLabels(id, deployment.name, ctx.listenerId);
  const userLabels = spec.labels ?? {};
  const userAnnotations = spec.annotations ?? {};
  // Ours come last: a user label can never take an object away from its deployment.
  const labels = (component: Component, extra: Record<string, string> = {}) => ({
    ...userLabels,
    ...owner,
    [COMPONENT_LABEL]: component,
    ...extra,
  });
  const metadata = (
    component: Component,
    extra: { labels?: Record<string, string>; annotations?: Record<string, string> } = {},
  ) => ({
    name: name(component),
    namespace,
    labels: labels(component, extra.labels),
    annotations: { ...extra.annotations, [REVISION_ID_ANNOTATION]: revision.id },
  });

  const scope: ManifestScope = { id, spec, name, labels, metadata };
  const out: Manifest[] = [];
  const withDb = wants(spec, 'db_');
  const withCache = wants(spec, 'cache_');
  const withQueue = wants(spec, 'queue_');

  // ----- the revision's secrets -----
  if (revision.secrets.length > 0) {
    out.push({
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: metadata('secrets'),
      type: 'Opaque',
      data: secretData(Object.fromEntries(revision.secrets.map((s) => [s.name, s.value]))),
    });
  }

  const env = (processType: 'web' | 'queue'): V1EnvVar[] =>
    containerEnv(input, ctx, name, { withDb, withCache }, processType);

  const podSpec = (containers: V1Container[]): V1PodSpec => podSpecOf(spec, containers);

  const template = (component: 'web' | 'queue', containers: V1Container[]): V1PodTemplateSpec => ({
    metadata: {
      labels: labels(component, { [REVISION_ID_LABEL]: revision.id }),
      // The revision id in the template: every revision rolls the pods, even one that changes only secrets.
      annotations: { ...userAnnotations, [REVISION_ID_ANNOTATION]: revision.id },
    },
    spec: podSpec(containers),
  });

  const mounts =
    spec.volume_mounts !== undefined && spec.volume_mounts.length > 0 ? { volumeMounts: [...spec.volume_mounts] } : {};

  // ----- the app -----
  const autoscaled = spec.max_scale !== undefined && spec.max_scale > (spec.min_scale ?? 1);
  const webCpu = spec.cpu ?? (autoscaled ? AUTOSCALE_DEFAULT_CPU : undefined);
  const webResources = resources(webCpu, spec.memory_mb, spec.cpu_limit, spec.memory_limit_mb);
  const app: V1Container = {
    name: 'app',
    image: revision.image_uri,
    ports: [{ name: 'http', containerPort: ctx.appPort, protocol: 'TCP' }],
    env: env('web'),
    ...(webResources ? { resources: webResources } : {}),
    ...mounts,
    // The app's health path is not known for an image: a probe of its port tells that it listens.
    readinessProbe: { tcpSocket: { port: 'http' }, periodSeconds: 5, failureThreshold: 3 },
    livenessProbe: { tcpSocket: { port: 'http' }, initialDelaySeconds: 30, periodSeconds: 10, failureThreshold: 6 },
  };
  out.push({
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: metadata('web', { annotations: userAnnotations }),
    spec: {
      // Autoscaled: the autoscaler owns replicas; applying them too would undo its every decision.
      ...(autoscaled ? {} : { replicas: spec.min_scale ?? 1 }),
      selector: { matchLabels: selectorLabels(id, 'web') },
      progressDeadlineSeconds: ctx.progressDeadlineSeconds,
      revisionHistoryLimit: 3,
      // No old pod goes before a new one is ready: a bad revision never takes the app down.
      strategy: { type: 'RollingUpdate', rollingUpdate: { maxUnavailable: 0, maxSurge: '25%' } },
      template: template('web', [app]),
    },
  });
  out.push({
    apiVersion: 'v1',
    kind: 'Service',
    metadata: metadata(
      'web',
      deployment.custom_url !== null ? { annotations: { [CUSTOM_URL_ANNOTATION]: deployment.custom_url } } : {},
    ),
    spec: {
      type: 'ClusterIP',
      selector: selectorLabels(id, 'web'),
      ports: [{ name: 'http', port: SERVICE_PORT, targetPort: 'http', protocol: 'TCP' }],
    },
  });
  if (autoscaled) out.push(autoscaler('web', name('web'), Math.max(1, spec.min_scale ?? 1), spec.max_scale ?? 1));

  // ----- the queue worker -----
  if (withQueue) {
    const queueAutoscaled = spec.queue_max_scale !== undefined && spec.queue_max_scale > (spec.queue_min_scale ?? 1);
    const queueResources = resources(
      spec.queue_cpu ?? (queueAutoscaled ? AUTOSCALE_DEFAULT_CPU : undefined),
      spec.queue_memory_mb,
      spec.queue_cpu_limit,
      spec.queue_memory_limit_mb,
    );
    const worker: V1Container = {
      name: 'worker',
      image: revision.image_uri,
      // The same image as the app: SLIPWAY_PROCESS_TYPE=queue tells it to consume the queue instead of serving.
      env: env('queue'),
      ...(queueResources ? { resources: queueResources } : {}),
      ...mounts,
    };
    out.push({
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: metadata('queue', { annotations: userAnnotations }),
      spec: {
        ...(queueAutoscaled ? {} : { replicas: spec.queue_min_scale ?? 1 }),
        selector: { matchLabels: selectorLabels(id, 'queue') },
        progressDeadlineSeconds: ctx.progressDeadlineSeconds,
        revisionHistoryLimit: 3,
        template: template('queue', [worker]),
      },
    });
    if (queueAutoscaled)
      out.push(autoscaler('queue', name('queue'), Math.max(1, spec.queue_min_scale ?? 1), spec.queue_max_scale ?? 1));
  }

  function autoscaler(component: 'web' | 'queue', target: string, min: number, max: number): Manifest {
    const hpaSpec: V2HorizontalPodAutoscalerSpec = {
      scaleTargetRef: { apiVersion: 'apps/v1', kind: 'Deployment', name: target },
      minReplicas: min,
      maxReplicas: max,
      metrics: [
        {
          type: 'Resource',
          resource: { name: 'cpu', target: { type: 'Utilization', averageUtilization: TARGET_CPU_UTILIZATION } },
        },
      ],
    };
    return {
      apiVersion: 'autoscaling/v2',
      kind: 'HorizontalPodAutoscaler',
      metadata: metadata(component),
      spec: hpaSpec,
    };
  }

  // ----- the database and the cache (manifest-data-services.ts) -----
  if (withDb) out.push(...databaseManifests(scope, input, ctx));
  if (withCache) out.push(...cacheManifests(scope, ctx));

  // What is referred to before what refers to it: a pod must never start before the Secret it reads.
  return out.sort((a, b) => APPLY_ORDER.indexOf(a.kind) - APPLY_ORDER.indexOf(b.kind)).map(withHash);
}
