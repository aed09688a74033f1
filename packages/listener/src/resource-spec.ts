/**
 * A revision's resource spec, read field by field. The service validated it against its schema when
 * the revision was made; reading it again here keeps a wrong type from turning into a half-built
 * manifest: every problem is listed, and the revision fails as `invalid_manifest` naming them.
 *
 * The inner structure of volumes, mounts and containers is the Kubernetes one (the service stores
 * them as given); the API server has the last word on them when the manifests are applied.
 */
import type { V1Container, V1Volume, V1VolumeMount } from '@kubernetes/client-node';
import type { DesiredRevision } from './desired-state.ts';

export interface ResourceSpec {
  readonly min_scale?: number;
  readonly max_scale?: number;
  readonly cpu?: number;
  readonly cpu_limit?: number;
  readonly memory_mb?: number;
  readonly memory_limit_mb?: number;
  readonly queue_min_scale?: number;
  readonly queue_max_scale?: number;
  readonly queue_cpu?: number;
  readonly queue_cpu_limit?: number;
  readonly queue_memory_mb?: number;
  readonly queue_memory_limit_mb?: number;
  readonly cache_cpu?: number;
  readonly cache_cpu_limit?: number;
  readonly cache_memory_mb?: number;
  readonly cache_memory_limit_mb?: number;
  readonly db_cpu?: number;
  readonly db_cpu_limit?: number;
  readonly db_memory_mb?: number;
  readonly db_memory_limit_mb?: number;
  readonly db_storage_gi?: number;
  readonly db_max_connections?: number;
  readonly labels?: Readonly<Record<string, string>>;
  readonly annotations?: Readonly<Record<string, string>>;
  readonly service_account_name?: string;
  readonly image_pull_secrets?: readonly { name: string }[];
  readonly volumes?: readonly V1Volume[];
  readonly volume_mounts?: readonly V1VolumeMount[];
  readonly init_containers?: readonly V1Container[];
  readonly sidecars?: readonly V1Container[];
}

/** The resource spec as the service's schema has it (src/domain/resource-spec.ts, through the protocol's generated types). */
type WireResourceSpec = NonNullable<DesiredRevision['resource_spec']>;
type WireField = keyof WireResourceSpec;

/** What the agent makes of a field: how it reads it into the manifests, or `ignored`. */
type FieldReading = 'integer' | 'number' | 'string-map' | 'string' | 'named-list' | 'volume-mounts' | 'ignored';

/**
 * Every field of the service's resource spec and what the agent makes of it (docs/listener.md): the
 * one list of them here. Keyed by every field of the schema, so a field added to the service fails the
 * type check until it is placed; test/listener-agent/resource-spec-contract.test.ts holds each mapped
 * field to changing the manifests and each ignored one to changing nothing.
 */
const FIELDS: Readonly<Record<WireField, FieldReading>> = {
  min_scale: 'integer',
  max_scale: 'integer',
  cpu: 'number',
  cpu_limit: 'number',
  memory_mb: 'integer',
  memory_limit_mb: 'integer',
  queue_min_scale: 'integer',
  queue_max_scale: 'integer',
  queue_cpu: 'number',
  queue_cpu_limit: 'number',
  queue_memory_mb: 'integer',
  queue_memory_limit_mb: 'integer',
  cache_cpu: 'number',
  cache_cpu_limit: 'number',
  cache_memory_mb: 'integer',
  cache_memory_limit_mb: 'integer',
  db_cpu: 'number',
  db_cpu_limit: 'number',
  db_memory_mb: 'integer',
  db_memory_limit_mb: 'integer',
  db_storage_gi: 'integer',
  db_max_connections: 'integer',
  labels: 'string-map',
  annotations: 'string-map',
  service_account_name: 'string',
  image_pull_secrets: 'named-list',
  volumes: 'named-list',
  volume_mounts: 'volume-mounts',
  init_containers: 'named-list',
  sidecars: 'named-list',
  // No part of a container deployment corresponds to these.
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
};

const fieldsRead = (...readings: FieldReading[]): WireField[] =>
  (Object.keys(FIELDS) as WireField[]).filter((field) => readings.includes(FIELDS[field]));

/** Fields of the service's resource spec that no part of a container deployment corresponds to. */
export const UNSUPPORTED_FIELDS: readonly string[] = fieldsRead('ignored');
const NUMBERS = fieldsRead('integer', 'number');
const INTEGERS: ReadonlySet<string> = new Set(fieldsRead('integer'));
const STRING_MAPS = fieldsRead('string-map');
const NAMED_LISTS = fieldsRead('named-list');

/** Every field of the service's resource spec that the listener maps to the manifests (docs/listener.md). */
export const MAPPED_FIELDS: readonly string[] = (Object.keys(FIELDS) as WireField[]).filter(
  (field) => FIELDS[field] !== 'ignored',
);

type Json = Record<string, unknown>;
const isObject = (value: unknown): value is Json =>
  value !== null && typeof value === 'object' && !Array.isArray(value);

export interface ReadSpec {
  readonly spec: ResourceSpec;
  /** Why the spec cannot be built; empty when it can. */
  readonly problems: readonly string[];
  /** Fields given that the listener does not map (UNSUPPORTED_FIELDS), to log. */
  readonly ignored: readonly string[];
}

function stringMap(value: unknown, key: string, problems: string[]): Record<string, string> | undefined {
  if (!isObject(value)) {
    problems.push(`resource_spec.${key} must be an object of strings`);
    return undefined;
  }
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(value)) {
    if (typeof v !== 'string') problems.push(`resource_spec.${key}.${k} must be a string`);
    else out[k] = v;
  }
  return out;
}

/** A list of objects that each have a string `name`; the rest of each is passed on as given. */
function namedList<T>(value: unknown, key: string, problems: string[]): T[] | undefined {
  if (!Array.isArray(value)) {
    problems.push(`resource_spec.${key} must be an array`);
    return undefined;
  }
  const out: T[] = [];
  value.forEach((item, i) => {
    if (!isObject(item) || typeof item.name !== 'string' || item.name === '')
      problems.push(`resource_spec.${key}[${i}] must be an object with a name`);
    else out.push(item as T);
  });
  return out;
}

export function readResourceSpec(raw: Readonly<Record<string, unknown>> | null): ReadSpec {
  const problems: string[] = [];
  const spec: Record<string, unknown> = {};
  const ignored: string[] = [];
  if (raw === null) return { spec, problems, ignored };
  for (const key of NUMBERS) {
    const value = raw[key];
    if (value === undefined || value === null) continue;
    if (
      typeof value !== 'number' ||
      !Number.isFinite(value) ||
      value < 0 ||
      (INTEGERS.has(key) && !Number.isInteger(value))
    ) {
      problems.push(
        `resource_spec.${key} must be a ${INTEGERS.has(key) ? 'non-negative integer' : 'non-negative number'}, got ${JSON.stringify(value)}`,
      );
    } else spec[key] = value;
  }
  for (const key of STRING_MAPS) {
    if (raw[key] !== undefined && raw[key] !== null) spec[key] = stringMap(raw[key], key, problems);
  }
  const account = raw.service_account_name;
  if (account !== undefined && account !== null) {
    if (typeof account !== 'string') problems.push('resource_spec.service_account_name must be a string');
    else spec.service_account_name = account;
  }
  for (const key of NAMED_LISTS) {
    if (raw[key] !== undefined && raw[key] !== null) spec[key] = namedList(raw[key], key, problems);
  }
  const mounts = raw.volume_mounts;
  if (mounts !== undefined && mounts !== null) {
    if (!Array.isArray(mounts)) problems.push('resource_spec.volume_mounts must be an array');
    else {
      mounts.forEach((m, i) => {
        if (!isObject(m) || typeof m.name !== 'string' || typeof m.mountPath !== 'string')
          problems.push(`resource_spec.volume_mounts[${i}] must be an object with a name and a mountPath`);
      });
      spec.volume_mounts = mounts;
    }
  }
  for (const key of UNSUPPORTED_FIELDS) if (raw[key] !== undefined && raw[key] !== null) ignored.push(key);
  const pairs: [string, string][] = [
    ['min_scale', 'max_scale'],
    ['queue_min_scale', 'queue_max_scale'],
    ...['', 'queue_', 'cache_', 'db_'].flatMap((p): [string, string][] => [
      [`${p}cpu`, `${p}cpu_limit`],
      [`${p}memory_mb`, `${p}memory_limit_mb`],
    ]),
  ];
  for (const [low, high] of pairs) {
    const a = spec[low];
    const b = spec[high];
    if (typeof a === 'number' && typeof b === 'number' && a > b)
      problems.push(`resource_spec.${low} (${a}) must not exceed ${high} (${b})`);
  }
  return { spec, problems, ignored };
}

/** Whether any field with this prefix is set: `db_` asks for a database, `cache_` for a cache, `queue_` for a worker. */
export function wants(spec: ResourceSpec, prefix: 'db_' | 'cache_' | 'queue_'): boolean {
  return Object.entries(spec).some(([key, value]) => key.startsWith(prefix) && value !== undefined);
}
