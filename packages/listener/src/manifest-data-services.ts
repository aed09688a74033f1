/**
 * The database and the cache a deployment gets beside its app on a listener's cluster (docs/listener.md):
 * - `<name>-db` StatefulSet, Service and Secret (PostgreSQL) when any `db_*` field is set; its volume
 *   and Secret carry the keep-until-delete label, so a new revision never loses the data;
 * - `<name>-cache` Deployment and Service (Redis, no persistence) when any `cache_*` field is set.
 * buildManifests (manifest-builder.ts) adds them to the app's manifests and hashes them all.
 */
import type { V1Container, V1EnvVar, V1StatefulSetSpec } from '@kubernetes/client-node';
import type { Manifest } from './kube-objects.ts';
import type { BuildContext, BuildInput } from './manifest-builder.ts';
import { KEEP_UNTIL_DELETE_LABEL, selectorLabels, type Component } from './manifest-names.ts';
import { resources, secretData } from './manifest-values.ts';
import type { ResourceSpec } from './resource-spec.ts';

export const POSTGRES_PORT = 5432;
export const REDIS_PORT = 6379;
const DB_USER = 'app';
const DB_NAME = 'app';
const DB_DATA = '/var/lib/postgresql/data';

/** What the manifests of one deployment share: its id, its spec, and its objects' names and labels. */
export interface ManifestScope {
  readonly id: string;
  readonly spec: ResourceSpec;
  name: (component: Component) => string;
  labels: (component: Component, extra?: Record<string, string>) => Record<string, string>;
  metadata: (
    component: Component,
    extra?: { labels?: Record<string, string>; annotations?: Record<string, string> },
  ) => Manifest['metadata'];
}

export function databaseUrl(host: string, password: string): string {
  return `postgres://${DB_USER}:${encodeURIComponent(password)}@${host}:${POSTGRES_PORT}/${DB_NAME}`;
}

/** The database's Secret, Service and StatefulSet. */
export function databaseManifests(
  { id, spec, name, labels, metadata }: ManifestScope,
  input: Pick<BuildInput, 'dbPassword' | 'existingDbStorage'>,
  ctx: Pick<BuildContext, 'postgresImage'>,
): Manifest[] {
  const out: Manifest[] = [];
  const dbName = name('db');
  const keep = { [KEEP_UNTIL_DELETE_LABEL]: 'true' };
  out.push({
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: metadata('db', { labels: keep }),
    type: 'Opaque',
    data: secretData({
      POSTGRES_USER: DB_USER,
      POSTGRES_DB: DB_NAME,
      POSTGRES_PASSWORD: input.dbPassword,
      DATABASE_URL: databaseUrl(dbName, input.dbPassword),
    }),
  });
  out.push({
    apiVersion: 'v1',
    kind: 'Service',
    metadata: metadata('db'),
    spec: {
      type: 'ClusterIP',
      selector: selectorLabels(id, 'db'),
      ports: [{ name: 'postgres', port: POSTGRES_PORT, targetPort: 'postgres', protocol: 'TCP' }],
    },
  });
  const dbResources = resources(spec.db_cpu, spec.db_memory_mb, spec.db_cpu_limit, spec.db_memory_limit_mb);
  const fromSecret = (key: string): V1EnvVar => ({ name: key, valueFrom: { secretKeyRef: { name: dbName, key } } });
  const postgres: V1Container = {
    name: 'postgres',
    image: ctx.postgresImage,
    ...(spec.db_max_connections !== undefined ? { args: ['-c', `max_connections=${spec.db_max_connections}`] } : {}),
    // A subdirectory: a fresh volume's root holds lost+found, and initdb wants an empty directory.
    env: [
      fromSecret('POSTGRES_USER'),
      fromSecret('POSTGRES_PASSWORD'),
      fromSecret('POSTGRES_DB'),
      { name: 'PGDATA', value: `${DB_DATA}/pgdata` },
    ],
    ports: [{ name: 'postgres', containerPort: POSTGRES_PORT, protocol: 'TCP' }],
    ...(dbResources ? { resources: dbResources } : {}),
    volumeMounts: [{ name: 'data', mountPath: DB_DATA }],
    readinessProbe: {
      exec: { command: ['pg_isready', '-U', DB_USER, '-d', DB_NAME] },
      periodSeconds: 5,
      failureThreshold: 6,
    },
    livenessProbe: {
      tcpSocket: { port: 'postgres' },
      initialDelaySeconds: 30,
      periodSeconds: 10,
      failureThreshold: 6,
    },
  };
  const statefulSpec: V1StatefulSetSpec = {
    serviceName: dbName,
    replicas: 1,
    selector: { matchLabels: selectorLabels(id, 'db') },
    template: { metadata: { labels: labels('db') }, spec: { containers: [postgres], enableServiceLinks: false } },
    volumeClaimTemplates: [
      {
        metadata: { name: 'data', labels: labels('db', keep) },
        spec: {
          accessModes: ['ReadWriteOnce'],
          resources: { requests: { storage: input.existingDbStorage ?? `${spec.db_storage_gi ?? 1}Gi` } },
        },
      },
    ],
    persistentVolumeClaimRetentionPolicy: { whenDeleted: 'Delete', whenScaled: 'Retain' },
  };
  out.push({ apiVersion: 'apps/v1', kind: 'StatefulSet', metadata: metadata('db'), spec: statefulSpec });
  return out;
}

/** The cache's Deployment and Service. */
export function cacheManifests(
  { id, spec, labels, metadata }: ManifestScope,
  ctx: Pick<BuildContext, 'progressDeadlineSeconds' | 'redisImage'>,
): Manifest[] {
  const out: Manifest[] = [];
  const cacheResources = resources(
    spec.cache_cpu,
    spec.cache_memory_mb,
    spec.cache_cpu_limit,
    spec.cache_memory_limit_mb,
  );
  // A cache, not a store: no persistence, and evict the least recently used keys before the memory limit kills it.
  const maxMemory = spec.cache_memory_limit_mb ?? spec.cache_memory_mb;
  const args = [
    '--save',
    '',
    '--appendonly',
    'no',
    ...(maxMemory !== undefined
      ? ['--maxmemory', `${Math.max(1, Math.floor(maxMemory * 0.9))}mb`, '--maxmemory-policy', 'allkeys-lru']
      : []),
  ];
  out.push({
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: metadata('cache'),
    spec: {
      replicas: 1,
      selector: { matchLabels: selectorLabels(id, 'cache') },
      progressDeadlineSeconds: ctx.progressDeadlineSeconds,
      revisionHistoryLimit: 3,
      template: {
        metadata: { labels: labels('cache') },
        spec: {
          enableServiceLinks: false,
          containers: [
            {
              name: 'redis',
              image: ctx.redisImage,
              args,
              ports: [{ name: 'redis', containerPort: REDIS_PORT, protocol: 'TCP' }],
              ...(cacheResources ? { resources: cacheResources } : {}),
              readinessProbe: { tcpSocket: { port: 'redis' }, periodSeconds: 5, failureThreshold: 3 },
            },
          ],
        },
      },
    },
  });
  out.push({
    apiVersion: 'v1',
    kind: 'Service',
    metadata: metadata('cache'),
    spec: {
      type: 'ClusterIP',
      selector: selectorLabels(id, 'cache'),
      ports: [{ name: 'redis', port: REDIS_PORT, targetPort: 'redis', protocol: 'TCP' }],
    },
  });
  return out;
}
