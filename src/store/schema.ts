/**
 * Table types for the typed query layer (Kysely). jsonb columns are written as JSON text (`json()`
 * below) because node-postgres would turn a JS array into a PostgreSQL array, not JSON.
 */
import type { ColumnType, Generated, Kysely, Selectable, Transaction } from 'kysely';
import type { DatabaseStorageState } from '../domain/database-storage.ts';
import type { SplitRollbackSettings } from '../domain/endpoint-splits.ts';
import type { SecretReference } from '../domain/deployment-plan.ts';
import type { ResourceSpec } from '../domain/resource-spec.ts';
import type { DeploymentType, Source, SourceConfig, SourceRevisionConfig } from '../domain/sources.ts';
import type { DeploymentStatus, RevisionStatus } from '../domain/states.ts';
import type {
  AgentConnectionTable,
  OAuthAuthorizationTable,
  OAuthProviderTable,
  OAuthTokenTable,
} from './schema-oauth.ts';
import type { SsoMappingTable, SsoSessionTable, SsoUsedStateTable } from './schema-sso.ts';

export type {
  AgentConnectionTable,
  OAuthAuthorizationStatus,
  OAuthAuthorizationTable,
  OAuthProviderTable,
  OAuthTokenStatus,
  OAuthTokenTable,
} from './schema-oauth.ts';

/** A jsonb column: read as T, written as JSON text. */
export type Json<T> = ColumnType<T, string, string>;
export type CreatedAt = ColumnType<Date, Date | undefined, never>;
export type UpdatedAt = ColumnType<Date, Date | undefined, Date>;

export const json = (value: unknown): string => JSON.stringify(value);

export interface OrganizationTable {
  id: string;
  name: string;
  created_at: CreatedAt;
}

export interface WorkspaceTable {
  id: string;
  organization_id: string;
  name: string;
  /** The workspace's quota (migrations/018_workspace_quotas.sql); null: none beyond the operator's maxima. */
  quota_memory_mb: ColumnType<number | null, number | null | undefined, number | null>;
  quota_cpu: ColumnType<number | null, number | null | undefined, number | null>;
  quota_instances: ColumnType<number | null, number | null | undefined, number | null>;
  quota_deployments: ColumnType<number | null, number | null | undefined, number | null>;
  /** migrations/020_database_storage.sql. */
  quota_database_storage_gi: ColumnType<number | null, number | null | undefined, number | null>;
  created_at: CreatedAt;
}

export interface ApiKeyTable {
  id: string;
  organization_id: string;
  workspace_id: string | null;
  name: string;
  role: 'admin' | 'member';
  key_hash: Buffer;
  key_prefix: string;
  created_at: CreatedAt;
  revoked_at: Date | null;
}

export interface TracingProjectTable {
  id: string;
  workspace_id: string;
  name: string;
  created_at: CreatedAt;
}

export interface ListenerTable {
  id: string;
  workspace_id: string;
  compute_type: string;
  compute_id: string;
  compute_config: Json<{ k8s_namespaces: string[] }>;
  version: string | null;
  created_at: CreatedAt;
  updated_at: UpdatedAt;
  /** The listener protocol (docs/listener-protocol.md): when the agent was last seen, and what its last heartbeat said. */
  last_seen_at: ColumnType<Date | null, Date | null | undefined, Date | null>;
  agent_version: ColumnType<string | null, string | null | undefined, string | null>;
  watched_namespaces: ColumnType<string[] | null, string[] | null | undefined, string[] | null>;
  agent_message: ColumnType<string | null, string | null | undefined, string | null>;
  /** The agent's clock when it observed the deployment conditions of its last heartbeat that carried them. */
  conditions_observed_at: ColumnType<Date | null, Date | null | undefined, Date | null>;
}

export const LISTENER_CONDITIONS = ['update_failed', 'crash_loop'] as const;
export type ListenerCondition = (typeof LISTENER_CONDITIONS)[number];

/** A listener deployment whose serving revision its agent says is not healthy (no row: healthy). */
export interface ListenerDeploymentConditionTable {
  deployment_id: string;
  workspace_id: string;
  listener_id: string;
  revision_id: string;
  condition: ListenerCondition;
  reason: string;
  message: string;
  /** The agent's id of the in-place change an `update_failed` is about (null when it sent none). */
  change: string | null;
  created_at: CreatedAt;
  updated_at: UpdatedAt;
}

/** A credential of one listener agent (src/auth/credentials.ts); the secret itself is never stored. */
export interface ListenerCredentialTable {
  id: string;
  workspace_id: string;
  listener_id: string;
  credential_hash: Buffer;
  credential_prefix: string;
  created_by: string;
  created_at: CreatedAt;
  last_used_at: Date | null;
  revoked_at: Date | null;
}

export interface CodehostIntegrationTable {
  id: string;
  workspace_id: string;
  name: string;
  api_url: string;
  credentials_encrypted: string;
  webhook_secret_encrypted: string;
  kind: 'token' | 'app';
  app_id: string | null;
  installation_id: string | null;
  created_at: CreatedAt;
  updated_at: UpdatedAt;
}

export type WebhookDeliveryOutcome = 'revision_created' | 'ignored' | 'duplicate' | 'rejected';

export interface CodehostWebhookDeliveryTable {
  id: string;
  integration_id: string;
  workspace_id: string;
  delivery_id: string | null;
  event: string | null;
  outcome: WebhookDeliveryOutcome;
  reason: string;
  message: string;
  repository: string | null;
  ref: string | null;
  commit_sha: string | null;
  revision_ids: Json<string[]>;
  received_at: CreatedAt;
}

export interface SourceUploadTable {
  id: string;
  workspace_id: string;
  path: string;
  size_bytes: ColumnType<string, number, never>;
  sha256: string;
  created_at: CreatedAt;
}

/** A piece of an upload's bytes (migrations/014_upload_chunks.sql): the upload is its chunks in `seq` order. */
export interface UploadChunkTable {
  upload_id: string;
  seq: number;
  data: Buffer;
}

/** A single-use upload URL's token (migrations/009_upload_tokens.sql); the token itself is never stored. */
export interface UploadTokenTable {
  id: string;
  workspace_id: string;
  deployment_id: string;
  token_hash: Buffer;
  object_path: string;
  expires_at: Date;
  used_at: ColumnType<Date | null, Date | null | undefined, Date | null>;
  created_at: CreatedAt;
}

/** migrations/010_idempotency_keys.sql; written and read by src/store/idempotency-keys.ts. */
export interface IdempotencyKeyTable {
  scope: string;
  idempotency_key: string;
  fingerprint: Buffer;
  state: 'running' | 'done';
  claim: string;
  locked_until: Date;
  response_status: number | null;
  response_headers: ColumnType<Record<string, string> | null, string | null | undefined, string | null>;
  response_body: string | null;
  created_at: CreatedAt;
}

/** A secret as stored: the value encrypted (see src/crypto/secret-box.ts). */
export interface StoredSecret {
  name: string;
  value: string;
}

/**
 * The unions of status, source and deployment_type are also CHECK constraints
 * (migrations/011_state_checks.sql); test/store/schema-drift.test.ts keeps these types and the
 * migrated schema in step.
 */
export interface DeploymentTable {
  id: string;
  workspace_id: string;
  name: string;
  source: Source;
  source_config: Json<SourceConfig>;
  deployment_type: DeploymentType;
  listener_id: string | null;
  remote_reconciled: ColumnType<boolean, never, never>;
  status: DeploymentStatus;
  secrets: Json<StoredSecret[]>;
  secret_references: Json<SecretReference[] | null>;
  image_version: string | null;
  tracing_project_id: string;
  latest_revision_id: string | null;
  active_revision_id: string | null;
  /** The local data plane's runner serving the active revision, and until when its lease holds. */
  runner_owner: ColumnType<string | null, string | null | undefined, string | null>;
  runner_expires_at: ColumnType<Date | null, Date | null | undefined, Date | null>;
  delete_tracing_project: ColumnType<boolean, boolean | undefined, boolean>;
  /**
   * The DNS label of the app's stable URL, unique across the service: chosen by the database when the
   * row is stored (migrations/017_app_slugs.sql) and never changed.
   */
  app_slug: ColumnType<string, never, never>;
  created_at: CreatedAt;
  updated_at: UpdatedAt;
}

/** A named address of a deployment pinned to one of its revisions (migrations/027_deployment_endpoints.sql). */
export interface DeploymentEndpointTable {
  deployment_id: string;
  name: string;
  /** What the endpoint should serve: written by the API. */
  revision_id: string;
  /** What the own data plane serves there now: written by its worker once a switch is done. */
  served_revision_id: ColumnType<string | null, string | null | undefined, string | null>;
  /** A traffic split's second revision (migrations/029_endpoint_splits.sql): written by the API (and its rollback). */
  split_revision_id: ColumnType<string | null, string | null | undefined, string | null>;
  /** Percent of clients the split's revision gets, 1-99; set with split_revision_id. */
  split_weight: ColumnType<number | null, number | null | undefined, number | null>;
  /** The automatic rollback's thresholds; null: none. */
  split_rollback: ColumnType<SplitRollbackSettings | null, string | null | undefined, string | null>;
  split_started_at: ColumnType<Date | null, Date | null | undefined, Date | null>;
  /** The split's revision as the own data plane serves it now: written by its worker. */
  split_served_revision_id: ColumnType<string | null, string | null | undefined, string | null>;
  /** Why the split is not served, as its data plane last said (migrations/030); null: served, or nothing said. */
  split_not_served_reason: ColumnType<string | null, string | null | undefined, string | null>;
  created_at: CreatedAt;
  updated_at: UpdatedAt;
}

/** The snapshot of what a revision runs with (src/service/deployments.ts, snapshotOf); redeploys add reuse_build_of. */
export interface RevisionSnapshot {
  resource_spec?: ResourceSpec | null;
  install_command?: string | null;
  build_command?: string | null;
  listener_config?: SourceConfig['listener_config'];
  secret_references?: SecretReference[] | null;
  reuse_build_of?: string;
  /**
   * A pull request's preview (src/service/pull-request-previews.ts): `secrets` false when it runs without the
   * deployment's secrets, database and agent credential (a fork's, unless the deployment allows it).
   */
  preview?: { pull_request: number; from_fork: boolean; secrets: boolean };
}

export interface RevisionTable {
  id: string;
  deployment_id: string;
  workspace_id: string;
  number: number;
  status: RevisionStatus;
  source: Source;
  source_revision_config: Json<SourceRevisionConfig>;
  snapshot: Json<RevisionSnapshot>;
  secrets: Json<StoredSecret[]>;
  failure_reason: string | null;
  failure_message: string | null;
  status_changed_at: UpdatedAt;
  /** The worker holding the revision's current step, and until when (src/store/work-leases.ts). */
  lease_owner: ColumnType<string | null, string | null | undefined, string | null>;
  lease_expires_at: ColumnType<Date | null, Date | null | undefined, Date | null>;
  attempts: ColumnType<number, number | undefined, number>;
  /** The pull request whose preview this revision is (migrations/028_pull_request_previews.sql); null for others. */
  preview_pull_request: ColumnType<number | null, number | null | undefined, number | null>;
  created_at: CreatedAt;
  updated_at: UpdatedAt;
}

/** A commit status state on the code host (GitHub's). */
export type CommitStatusState = 'pending' | 'success' | 'failure' | 'error';

/** An open pull request's preview of a deployment (migrations/028_pull_request_previews.sql). */
export interface PullRequestPreviewTable {
  deployment_id: string;
  pull_request: number;
  repository: string;
  head_sha: string;
  head_repository: string;
  from_fork: boolean;
  revision_id: string | null;
  refused_message: ColumnType<string | null, string | null | undefined, string | null>;
  /** What was last posted to the pull request, for which commit (src/service/preview-statuses.ts). */
  status_state: ColumnType<CommitStatusState | null, CommitStatusState | null | undefined, CommitStatusState | null>;
  status_sha: ColumnType<string | null, string | null | undefined, string | null>;
  status_attempts: ColumnType<number, number | undefined, number>;
  status_retry_at: ColumnType<Date | null, Date | null | undefined, Date | null>;
  created_at: CreatedAt;
  updated_at: UpdatedAt;
}

/** A deployment's preview settings (migrations/028_pull_request_previews.sql). */
export interface DeploymentPreviewSettingsTable {
  deployment_id: string;
  max_previews: number | null;
  fork_secrets: boolean;
  updated_at: UpdatedAt;
}

/** What the local data plane made for a deployment: its database and role, and its agent credential. */
export interface DeploymentRuntimeTable {
  deployment_id: string;
  workspace_id: string;
  database_name: string | null;
  role_name: string | null;
  database_password_sealed: string | null;
  agent_credential_id: string | null;
  agent_credential_sealed: string | null;
  /** What the local data plane last measured of the database, and what it did (migrations/020_database_storage.sql). */
  database_size_bytes: ColumnType<string | null, number | null | undefined, number | null>;
  database_measured_at: ColumnType<Date | null, Date | null | undefined, Date | null>;
  database_storage_state: ColumnType<DatabaseStorageState, DatabaseStorageState | undefined, DatabaseStorageState>;
  database_state_size_bytes: ColumnType<string | null, number | null | undefined, number | null>;
  created_at: CreatedAt;
}

export type RevisionLogType = 'build' | 'deploy';
export type RevisionLogStream = 'stdout' | 'stderr' | 'system';

/** One line of a revision's build output (`build`) or of its app's stdout/stderr (`deploy`). */
export interface RevisionLogTable {
  id: Generated<string>;
  revision_id: string;
  type: RevisionLogType;
  stream: RevisionLogStream;
  line: string;
  logged_at: ColumnType<Date, Date | undefined, never>;
}

export interface EventTable {
  id: Generated<string>;
  workspace_id: string;
  subject_type: string;
  subject_id: string;
  deployment_id: string | null;
  type: string;
  from_status: string | null;
  to_status: string | null;
  data: Json<Record<string, unknown>>;
  created_at: CreatedAt;
}

export interface TagKeyTable {
  id: string;
  workspace_id: string;
  key: string;
  description: string | null;
  created_at: CreatedAt;
}

export interface TagValueTable {
  id: string;
  tag_key_id: string;
  value: string;
  created_at: CreatedAt;
}

export interface DeploymentTagTable {
  deployment_id: string;
  tag_value_id: string;
}

export interface AgentCredentialTable {
  id: string;
  workspace_id: string;
  deployment_id: string;
  name: string;
  /** The agents it reaches; null: the deployment's own agents (src/store/agent-credentials.ts). */
  agent_ids: Json<string[] | null>;
  credential_hash: Buffer;
  credential_prefix: string;
  created_by: string;
  created_at: CreatedAt;
  last_used_at: Date | null;
  revoked_at: Date | null;
}

/** A deployment's protocol credential (src/store/protocol-credentials.ts). */
export interface ProtocolCredentialTable {
  id: string;
  workspace_id: string;
  deployment_id: string;
  name: string;
  credential_hash: Buffer;
  credential_prefix: string;
  created_by: string;
  created_at: CreatedAt;
  last_used_at: Date | null;
  revoked_at: Date | null;
}

/** The one row naming the encryption key of the sealed values (migrations/007_key_check.sql). */
export interface KeyCheckTable {
  singleton: ColumnType<boolean, true | undefined, never>;
  key_id: string;
  check_value: string;
  rotating_to: string | null;
  updated_at: UpdatedAt;
}

/** The host uid of a deployment's processes when the service runs as root (migrations/019_app_uids.sql). */
export interface AppUidTable {
  deployment_id: string;
  uid: number;
  created_at: CreatedAt;
}

export interface Database {
  organizations: OrganizationTable;
  workspaces: WorkspaceTable;
  api_keys: ApiKeyTable;
  tracing_projects: TracingProjectTable;
  listeners: ListenerTable;
  listener_credentials: ListenerCredentialTable;
  listener_deployment_conditions: ListenerDeploymentConditionTable;
  codehost_integrations: CodehostIntegrationTable;
  codehost_webhook_deliveries: CodehostWebhookDeliveryTable;
  source_uploads: SourceUploadTable;
  upload_chunks: UploadChunkTable;
  upload_tokens: UploadTokenTable;
  idempotency_keys: IdempotencyKeyTable;
  deployments: DeploymentTable;
  deployment_endpoints: DeploymentEndpointTable;
  revisions: RevisionTable;
  pull_request_previews: PullRequestPreviewTable;
  deployment_preview_settings: DeploymentPreviewSettingsTable;
  deployment_runtimes: DeploymentRuntimeTable;
  revision_logs: RevisionLogTable;
  events: EventTable;
  tag_keys: TagKeyTable;
  tag_values: TagValueTable;
  deployment_tags: DeploymentTagTable;
  oauth_providers: OAuthProviderTable;
  oauth_tokens: OAuthTokenTable;
  oauth_authorizations: OAuthAuthorizationTable;
  agent_connections: AgentConnectionTable;
  agent_credentials: AgentCredentialTable;
  protocol_credentials: ProtocolCredentialTable;
  key_check: KeyCheckTable;
  sso_mappings: SsoMappingTable;
  sso_used_states: SsoUsedStateTable;
  sso_sessions: SsoSessionTable;
  app_uids: AppUidTable;
}

/** What every store function runs in: the pool-backed handle or an open transaction. */
export type Db = Kysely<Database> | Transaction<Database>;

export type DeploymentRow = Selectable<DeploymentTable>;
export type RevisionRow = Selectable<RevisionTable>;
export type DeploymentEndpointRow = Selectable<DeploymentEndpointTable>;
export type PullRequestPreviewRow = Selectable<PullRequestPreviewTable>;
export type DeploymentRuntimeRow = Selectable<DeploymentRuntimeTable>;
export type RevisionLogRow = Selectable<RevisionLogTable>;
export type ListenerRow = Selectable<ListenerTable>;
export type ListenerCredentialRow = Selectable<ListenerCredentialTable>;
export type ListenerDeploymentConditionRow = Selectable<ListenerDeploymentConditionTable>;
export type CodehostIntegrationRow = Selectable<CodehostIntegrationTable>;
export type WebhookDeliveryRow = Selectable<CodehostWebhookDeliveryTable>;
export type OAuthProviderRow = Selectable<OAuthProviderTable>;
export type OAuthTokenRow = Selectable<OAuthTokenTable>;
export type OAuthAuthorizationRow = Selectable<OAuthAuthorizationTable>;
export type AgentCredentialRow = Selectable<AgentCredentialTable>;
export type ProtocolCredentialRow = Selectable<ProtocolCredentialTable>;
