/** Turns stored deployments and revisions into the interface's response shapes. */
import { MASKED_SECRET } from '../domain/deployment-plan.ts';
import {
  REVISION_FIELDS,
  SOURCE_CONFIG_FIELDS,
  type SourceConfig,
  type SourceRevisionConfig,
} from '../domain/sources.ts';
import type { Static } from 'typebox';
import type { DeploymentView } from '../store/deployments.ts';
import type {
  Deployment,
  Revision,
  SourceConfig as SourceConfigSchema,
  SourceRevisionConfig as RevisionConfigSchema,
} from './deployment-schemas.ts';
import type { RevisionView } from '../store/revisions.ts';

function fullSourceConfig(config: SourceConfig): Static<typeof SourceConfigSchema> {
  const out: Record<string, unknown> = {};
  for (const field of SOURCE_CONFIG_FIELDS) out[field] = config[field] ?? null;
  return out;
}

function fullRevisionConfig(config: SourceRevisionConfig | null): Static<typeof RevisionConfigSchema> {
  const out: Record<string, unknown> = {};
  for (const field of REVISION_FIELDS) out[field] = config?.[field] ?? null;
  out.repo_commit_sha = config?.repo_commit_sha ?? null;
  return out;
}

export function deploymentResponse(d: DeploymentView): Static<typeof Deployment> {
  return {
    name: d.name,
    source: d.source,
    source_config: fullSourceConfig(d.source_config),
    source_revision_config: fullRevisionConfig(d.latest_revision_config),
    // Secret values are write-only (docs/lifecycle.md).
    secrets: d.secrets.map((s) => ({ name: s.name, value: MASKED_SECRET })),
    id: d.id,
    tenant_id: d.workspace_id,
    created_at: d.created_at.toISOString(),
    updated_at: d.updated_at.toISOString(),
    status: d.status,
    latest_revision_id: d.latest_revision_id,
    active_revision_id: d.active_revision_id,
    secret_references: d.secret_references,
    image_version: d.image_version,
    tracing_project_id: d.tracing_project_id,
    remote_reconciled: d.remote_reconciled,
  };
}

export function revisionResponse(r: RevisionView): Static<typeof Revision> {
  return {
    id: r.id,
    created_at: r.created_at.toISOString(),
    updated_at: r.updated_at.toISOString(),
    status: r.status,
    source: r.source,
    source_revision_config: fullRevisionConfig(r.source_revision_config),
    deployment_id: r.deployment_id,
    failure_reason: r.failure_reason,
    failure_message: r.failure_message,
    remote_reconciled: r.remote_reconciled,
  };
}
