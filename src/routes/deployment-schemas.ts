/**
 * Schemas of the deployment and revision resources.
 * Request and response share them; fields are nullable in requests and validated per source.
 */
import { Type, type Static, type TSchema } from 'typebox';
import { DEPLOYMENT_TYPES, REVISION_SOURCES, SOURCES } from '../domain/sources.ts';
import { MASKED_SECRET } from '../domain/deployment-plan.ts';
import { DEPLOYMENT_STATUSES, REVISION_STATUSES } from '../domain/states.ts';
import { DateTime, Nullable, SecretString, StringEnum, Uuid } from '../http/schema-helpers.ts';
import { PATTERN_WORDS } from '../http/validation.ts';

const FreeObject = (description?: string) =>
  Type.Object({}, { additionalProperties: true, ...(description ? { description } : {}) });
const ShortText = (max = 253) => Type.String({ maxLength: max });
const opt = <T extends TSchema>(schema: T) => Type.Optional(Nullable(schema));

export const DEPLOYMENT_NAME_PATTERN = '^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$';
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

export const SourceConfig = Type.Object(
  {
    integration_id: opt(Uuid()),
    repo_url: opt(Type.String({ minLength: 1, maxLength: 2048, format: 'uri' })),
    deployment_type: opt(StringEnum(DEPLOYMENT_TYPES)),
    build_on_push: opt(Type.Boolean()),
    custom_url: opt(Type.String({ maxLength: 2048 })),
    resource_spec: opt(ResourceSpec),
    listener_id: opt(Uuid()),
    listener_config: opt(Type.Object({ k8s_namespace: opt(Type.String({ pattern: K8S_NAME, maxLength: 63 })) })),
    install_command: opt(Type.String({ minLength: 1, maxLength: 4096 })),
    build_command: opt(Type.String({ minLength: 1, maxLength: 4096 })),
  },
  { title: 'SourceConfig' },
);

const revisionFields = {
  repo_ref: opt(Type.String({ minLength: 1, maxLength: 255 })),
  framework_config_path: opt(
    Type.String({
      minLength: 1,
      maxLength: 1024,
      pattern: '^(?!/)(?!.*(^|/)\\.\\.(/|$)).+$',
      description: 'Relative path inside the source, no ".." segments.',
    }),
  ),
  image_uri: opt(Type.String({ minLength: 1, maxLength: 1024, pattern: '^[^\\s]+$' })),
  source_tarball_path: opt(Type.String({ minLength: 1, maxLength: 1024 })),
};

/**
 * Request form: repo_commit_sha is response-only. langgraph_config_path (LangChain's CLI) is read as
 * framework_config_path before validation (applyConfigPathAlias); listed here to be documented.
 */
export const SourceRevisionConfigInput = Type.Object(
  {
    ...revisionFields,
    langgraph_config_path: opt(
      Type.String({
        minLength: 1,
        maxLength: 1024,
        description:
          'Another name for framework_config_path, as `langgraph deploy` sends it; answers show framework_config_path.',
      }),
    ),
  },
  { title: 'SourceRevisionConfigInput' },
);
export const SourceRevisionConfig = Type.Object(
  { ...revisionFields, repo_commit_sha: opt(Type.String({ maxLength: 64 })) },
  { title: 'SourceRevisionConfig' },
);

export const SECRET_NAME_PATTERN = '^[A-Za-z_][A-Za-z0-9_]{0,254}$';
const SECRET_NAME_WORDS =
  'A secret name is an environment variable name: letters, digits and _, not starting with a digit, at most 255 characters';
const SecretName = Type.String({
  pattern: SECRET_NAME_PATTERN,
  [PATTERN_WORDS]: SECRET_NAME_WORDS,
  description: 'Environment variable name.',
});
/** A secret as a request sends it: the value is write-only, or the mask to keep the stored one. */
export const SecretInput = Type.Object(
  {
    name: SecretName,
    value: SecretString({
      maxLength: 65536,
      description: `Write-only: answers show ${MASKED_SECRET}. In a patch, ${MASKED_SECRET} for an existing name keeps its value.`,
    }),
  },
  { title: 'SecretInput' },
);
/**
 * A secret as an answer shows it. Its own schema rather than SecretInput's: a `writeOnly` value in an
 * answer tells client generators and fuzzers that answers never carry `value`, yet every answer carries
 * the mask (docs/api.md, "Conventions").
 */
export const Secret = Type.Object(
  {
    name: SecretName,
    value: Type.Literal(MASKED_SECRET, { description: 'Always the mask: a secret value is never shown.' }),
  },
  { title: 'Secret' },
);
export const SecretReference = Type.Object(
  {
    name: Type.String({ pattern: SECRET_NAME_PATTERN, [PATTERN_WORDS]: SECRET_NAME_WORDS }),
    secret_name: Type.String({ pattern: K8S_NAME, maxLength: 253 }),
    secret_key: Type.String({ minLength: 1, maxLength: 253, pattern: '^[-._a-zA-Z0-9]+$' }),
  },
  { title: 'SecretReference' },
);

export const DeploymentCreateBody = Type.Object(
  {
    name: Type.String({
      pattern: DEPLOYMENT_NAME_PATTERN,
      // As the dashboard says it (web/src/pages/new-deployment.tsx).
      [PATTERN_WORDS]:
        'A deployment name uses lowercase letters, digits and - only; it must start with a letter and must not end with -',
      maxLength: 63,
      description: 'Lowercase letters, digits and -, starting with a letter; becomes a host name.',
    }),
    source: StringEnum(SOURCES),
    source_config: opt(SourceConfig),
    source_revision_config: opt(SourceRevisionConfigInput),
    secrets: opt(Type.Array(SecretInput, { maxItems: 200 })),
    secret_references: opt(Type.Array(SecretReference, { maxItems: 200 })),
  },
  { title: 'DeploymentCreate' },
);
export type DeploymentCreateBody = Static<typeof DeploymentCreateBody>;

export const DeploymentPatchBody = Type.Object(
  {
    revision_source: opt(StringEnum(REVISION_SOURCES)),
    source_config: opt(SourceConfig),
    source_revision_config: opt(SourceRevisionConfigInput),
    secrets: opt(Type.Array(SecretInput, { maxItems: 200 })),
    secret_references: opt(Type.Array(SecretReference, { maxItems: 200 })),
    name: Type.Optional(Type.Unknown({ description: 'Cannot change; the current value is accepted.' })),
    source: Type.Optional(Type.Unknown({ description: 'Cannot change; the current value is accepted.' })),
  },
  { title: 'DeploymentPatch' },
);
export type DeploymentPatchBody = Static<typeof DeploymentPatchBody>;

export const Deployment = Type.Object(
  {
    name: Type.String(),
    source: StringEnum(SOURCES),
    source_config: SourceConfig,
    source_revision_config: SourceRevisionConfig,
    secrets: Type.Array(Secret),
    id: Uuid(),
    tenant_id: Uuid(),
    created_at: DateTime(),
    updated_at: DateTime(),
    status: StringEnum(DEPLOYMENT_STATUSES),
    latest_revision_id: Nullable(Uuid()),
    active_revision_id: Nullable(Uuid()),
    secret_references: Type.Optional(Nullable(Type.Array(SecretReference))),
    image_version: Type.Optional(Nullable(Type.String())),
    tracing_project_id: Uuid({ description: 'The tracing project created with the deployment.' }),
    remote_reconciled: Type.Boolean({ description: 'True when a listener reconciles this deployment.' }),
  },
  { title: 'Deployment', description: 'A deployment.' },
);

export const Revision = Type.Object(
  {
    id: Uuid(),
    created_at: DateTime(),
    updated_at: DateTime(),
    status: StringEnum(REVISION_STATUSES),
    source: StringEnum(SOURCES),
    source_revision_config: SourceRevisionConfig,
    deployment_id: Uuid(),
    failure_reason: Nullable(Type.String({ description: 'Machine-readable reason when the status is a failure.' })),
    failure_message: Nullable(Type.String()),
    remote_reconciled: Type.Boolean(),
  },
  { title: 'Revision', description: 'A revision of a deployment.' },
);
