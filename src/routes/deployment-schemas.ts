/**
 * Schemas of the deployment and revision resources.
 * Request and response share them; fields are nullable in requests and validated per source.
 */
import { Type, type Static, type TSchema } from 'typebox';
import { DEPLOYMENT_TYPES, REVISION_SOURCES, SOURCES } from '../domain/sources.ts';
import { MASKED_SECRET } from '../domain/deployment-plan.ts';
import { ResourceSpec } from '../domain/resource-spec.ts';
import { DEPLOYMENT_STATUSES, REVISION_STATUSES } from '../domain/states.ts';
import { DateTime, Nullable, SecretString, StringEnum, Uuid } from '../http/schema-helpers.ts';
import { PATTERN_WORDS } from '../http/validation.ts';

const opt = <T extends TSchema>(schema: T) => Type.Optional(Nullable(schema));

/** The resource_spec schema is the domain's (src/domain/resource-spec.ts): both data planes read its type. */
export { ResourceSpec };

export const DEPLOYMENT_NAME_PATTERN = '^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$';
const K8S_NAME = '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$';

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
