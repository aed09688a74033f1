/**
 * The resource_spec of a deployment, one definition for both data planes: its schema (the API validates
 * it, the OpenAPI document shows it), its type (`ResourceSpec`, what the own data plane reads; the
 * listener agent reads the same schema through the listener protocol's types), and the
 * rules across fields that a schema cannot say (a minimum never above its maximum), and which of its
 * fields are the deployment's scale rather than part of a revision's snapshot. What each plane makes of
 * each field: src/dataplane/resource-spec-fields.ts and packages/listener/src/resource-spec.ts, each held to the
 * schema by a contract test.
 */
import { Type, type Static, type TSchema } from 'typebox';
import { AppError } from '../errors.ts';
import { Nullable } from '../http/schema-helpers.ts';

const FreeObject = (description?: string) =>
  Type.Object({}, { additionalProperties: true, ...(description ? { description } : {}) });
const ShortText = (max = 253) => Type.String({ maxLength: max });
const opt = <T extends TSchema>(schema: T) => Type.Optional(Nullable(schema));
const K8S_NAME = '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$';

const scale = () => opt(Type.Integer({ minimum: 0, maximum: 1000 }));
const cpu = () => opt(Type.Number({ minimum: 0, maximum: 512, description: 'CPU cores; fractions allowed.' }));
const memory = () => opt(Type.Integer({ minimum: 1, maximum: 4 * 1024 * 1024, description: 'Megabytes.' }));

const VolumeMount = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 253 }),
    mountPath: Type.String({ minLength: 1, maxLength: 1024 }),
    subPath: Type.Optional(ShortText(1024)),
    mountPropagation: Type.Optional(ShortText(64)),
    subPathExpr: Type.Optional(ShortText(1024)),
    readOnly: Type.Optional(Type.Boolean()),
  },
  { title: 'VolumeMount' },
);

const Volume = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 253 }),
    configMap: Type.Optional(FreeObject()),
    secret: Type.Optional(FreeObject()),
    emptyDir: Type.Optional(FreeObject()),
    persistentVolumeClaim: Type.Optional(FreeObject()),
    nfs: Type.Optional(FreeObject()),
    projected: Type.Optional(FreeObject()),
    downwardAPI: Type.Optional(FreeObject()),
    csi: Type.Optional(FreeObject()),
  },
  { title: 'Volume' },
);

const Container = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 253 }),
    image: Type.Optional(ShortText(1024)),
    imagePullPolicy: Type.Optional(ShortText(32)),
    workingDir: Type.Optional(ShortText(1024)),
    restartPolicy: Type.Optional(ShortText(32)),
    command: Type.Optional(Type.Array(Type.String({ maxLength: 4096 }), { maxItems: 256 })),
    args: Type.Optional(Type.Array(Type.String({ maxLength: 4096 }), { maxItems: 256 })),
    env: Type.Optional(
      Type.Array(
        Type.Object({
          name: Type.String({ minLength: 1, maxLength: 253 }),
          value: Type.Optional(Type.String({ maxLength: 65536 })),
          valueFrom: Type.Optional(FreeObject()),
        }),
        { maxItems: 256 },
      ),
    ),
    envFrom: Type.Optional(Type.Array(FreeObject(), { maxItems: 64 })),
    resources: Type.Optional(
      Type.Object({ limits: Type.Optional(FreeObject()), requests: Type.Optional(FreeObject()) }),
    ),
    volumeMounts: Type.Optional(Type.Array(VolumeMount, { maxItems: 64 })),
    securityContext: Type.Optional(FreeObject()),
  },
  { title: 'Container' },
);

export const ResourceSpec = Type.Object(
  {
    min_scale: scale(),
    max_scale: scale(),
    cpu: cpu(),
    cpu_limit: cpu(),
    memory_mb: memory(),
    memory_limit_mb: memory(),
    queue_min_scale: scale(),
    queue_max_scale: scale(),
    queue_cpu: cpu(),
    queue_cpu_limit: cpu(),
    queue_memory_mb: memory(),
    queue_memory_limit_mb: memory(),
    orchestrator_cpu: cpu(),
    orchestrator_cpu_limit: cpu(),
    orchestrator_memory_mb: memory(),
    orchestrator_memory_limit_mb: memory(),
    orchestrator_min_scale: scale(),
    orchestrator_max_scale: scale(),
    executor_cpu: cpu(),
    executor_cpu_limit: cpu(),
    executor_memory_mb: memory(),
    executor_memory_limit_mb: memory(),
    cache_cpu: cpu(),
    cache_cpu_limit: cpu(),
    cache_memory_mb: memory(),
    cache_memory_limit_mb: memory(),
    db_cpu: cpu(),
    db_cpu_limit: cpu(),
    db_memory_mb: memory(),
    db_memory_limit_mb: memory(),
    db_storage_gi: opt(Type.Integer({ minimum: 1, maximum: 65536 })),
    db_max_connections: opt(Type.Integer({ minimum: 1, maximum: 100000 })),
    labels: opt(Type.Record(Type.String({ maxLength: 317 }), Type.String({ maxLength: 63 }), { maxProperties: 64 })),
    annotations: opt(
      Type.Record(Type.String({ maxLength: 317 }), Type.String({ maxLength: 65536 }), { maxProperties: 64 }),
    ),
    service_account_name: opt(Type.String({ pattern: K8S_NAME, maxLength: 253 })),
    image_pull_secrets: opt(
      Type.Array(Type.Object({ name: Type.String({ minLength: 1, maxLength: 253 }) }), { maxItems: 32 }),
    ),
    volumes: opt(Type.Array(Volume, { maxItems: 64 })),
    volume_mounts: opt(Type.Array(VolumeMount, { maxItems: 64 })),
    init_containers: opt(Type.Array(Container, { maxItems: 16 })),
    sidecars: opt(Type.Array(Container, { maxItems: 16 })),
  },
  {
    title: 'ResourceSpec',
    description:
      'Resources of the running deployment. Scale counts are integers, cpu values are cores, memory in megabytes. ' +
      "On the service's own data plane each web instance is limited to `memory_limit_mb` (else `memory_mb`) of memory " +
      'and `cpu_limit` (else `cpu`) cores, each worker instance to the `queue_` fields (else the same), with the ' +
      "service's defaults when silent, through cgroups; an instance over its memory is killed (`out_of_memory`) and " +
      "restarted. Where the service may not set cgroups, the limits are stored but not enforced, and the service's start " +
      'log says so. On a listener they become the Kubernetes requests and limits. A PATCH replaces the whole ' +
      'resource_spec rather than merging it: a field left out is unset, so send every field to keep.',
  },
);

/** A resource spec as the schema takes it (stored specs were validated by it when written). */
export type ResourceSpec = Static<typeof ResourceSpec>;
/** The name of a field of the resource spec. */
export type ResourceSpecField = keyof ResourceSpec;
/** Every field of the schema. */
export const RESOURCE_SPEC_FIELDS = Object.keys(ResourceSpec.properties) as ResourceSpecField[];

/**
 * How many instances run: the deployment's, never restored by a redeploy (docs/lifecycle.md, "What a
 * redeploy restores"). A rollback is made in a hurry, often under load; dropping to the instance count
 * of the day the old revision was made would be a second outage.
 */
export const SCALE_FIELDS = [
  'min_scale',
  'max_scale',
  'queue_min_scale',
  'queue_max_scale',
  'orchestrator_min_scale',
  'orchestrator_max_scale',
] as const;

/** The scale fields the spec sets (an empty object when it sets none). */
export function scaleOfSpec(spec: ResourceSpec | null | undefined): ResourceSpec {
  const scale: ResourceSpec = {};
  for (const field of SCALE_FIELDS) if (spec?.[field] !== undefined) scale[field] = spec[field];
  return scale;
}

/**
 * A revision's resource spec as a redeploy puts it back: its fields, except the scale, which stays the
 * deployment's current one. Null when neither has a field.
 */
export function restoredResourceSpec(
  revision: ResourceSpec | null | undefined,
  current: ResourceSpec | null | undefined,
): ResourceSpec | null {
  const restored: ResourceSpec = { ...revision };
  for (const field of SCALE_FIELDS) delete restored[field];
  Object.assign(restored, scaleOfSpec(current));
  return Object.keys(restored).length > 0 ? restored : null;
}

const PAIRS: readonly [ResourceSpecField, ResourceSpecField][] = [
  ['min_scale', 'max_scale'],
  ['queue_min_scale', 'queue_max_scale'],
  ['orchestrator_min_scale', 'orchestrator_max_scale'],
  ...(['', 'queue_', 'orchestrator_', 'executor_', 'cache_', 'db_'] as const).flatMap(
    (p): [ResourceSpecField, ResourceSpecField][] => [
      [`${p}cpu`, `${p}cpu_limit`],
      [`${p}memory_mb`, `${p}memory_limit_mb`],
    ],
  ),
];

export function checkResourceSpec(spec: ResourceSpec | null | undefined): void {
  if (!spec) return;
  for (const [low, high] of PAIRS) {
    const a = spec[low];
    const b = spec[high];
    if (typeof a === 'number' && typeof b === 'number' && a > b) {
      throw new AppError('invalid_request', `source_config.resource_spec.${low} (${a}) must not exceed ${high} (${b})`);
    }
  }
}
