/**
 * What the service's own data plane makes of each field of a deployment's resource_spec
 * (docs/data-plane.md, "What the own data plane makes of resource_spec"): `honoured`, or `ignored`
 * (the API takes the field for a listener's Kubernetes cluster and the own data plane has nothing it
 * corresponds to; it is stored, not refused, so a spec deploys unchanged on either plane).
 *
 * Keyed by every field of the schema (src/domain/resource-spec.ts), so a field added to it fails the
 * type check here until it is placed; test/dataplane/resource-spec-contract.test.ts holds each honoured
 * field to changing what the data plane runs and each ignored one to changing nothing. The listener
 * agent's counterpart is packages/listener/src/resource-spec.ts.
 */
import type { ResourceSpecField } from '../domain/resource-spec.ts';

export type LocalFieldUse = 'honoured' | 'ignored';

export const LOCAL_RESOURCE_SPEC_FIELDS: Readonly<Record<ResourceSpecField, LocalFieldUse>> = {
  // Instances (src/dataplane/app-scaling.ts).
  min_scale: 'honoured',
  queue_min_scale: 'honoured',
  // Limits of a web instance, and of a worker instance when a queue_ field is set
  // (src/dataplane/resource-limits.ts, src/dataplane/app-host-access.ts queueResourceSpec).
  cpu: 'honoured',
  cpu_limit: 'honoured',
  memory_mb: 'honoured',
  memory_limit_mb: 'honoured',
  queue_cpu: 'honoured',
  queue_cpu_limit: 'honoured',
  queue_memory_mb: 'honoured',
  queue_memory_limit_mb: 'honoured',
  // The app database's storage limit (src/dataplane/app-database-storage.ts).
  db_storage_gi: 'honoured',
  // No autoscaler: the instance counts are the minimums.
  max_scale: 'ignored',
  queue_max_scale: 'ignored',
  // No separate orchestrator, executor or cache processes; the app database is a database of the
  // service's PostgreSQL, with the connection limit of every app role.
  orchestrator_cpu: 'ignored',
  orchestrator_cpu_limit: 'ignored',
  orchestrator_memory_mb: 'ignored',
  orchestrator_memory_limit_mb: 'ignored',
  orchestrator_min_scale: 'ignored',
  orchestrator_max_scale: 'ignored',
  executor_cpu: 'ignored',
  executor_cpu_limit: 'ignored',
  executor_memory_mb: 'ignored',
  executor_memory_limit_mb: 'ignored',
  cache_cpu: 'ignored',
  cache_cpu_limit: 'ignored',
  cache_memory_mb: 'ignored',
  cache_memory_limit_mb: 'ignored',
  db_cpu: 'ignored',
  db_cpu_limit: 'ignored',
  db_memory_mb: 'ignored',
  db_memory_limit_mb: 'ignored',
  db_max_connections: 'ignored',
  // Kubernetes objects: no pods, service accounts, registries' pull secrets or volumes here.
  labels: 'ignored',
  annotations: 'ignored',
  service_account_name: 'ignored',
  image_pull_secrets: 'ignored',
  volumes: 'ignored',
  volume_mounts: 'ignored',
  init_containers: 'ignored',
  sidecars: 'ignored',
};
