/**
 * Writing a deployment's revisions, shared by its create, patch and redeploy
 * (src/service/deployments.ts): what a revision snapshots of the deployment, how a redeploy puts it
 * back, the upload a revision names, and storing a new revision with its events. Each runs in the
 * caller's transaction.
 */
import { randomUUID } from 'node:crypto';
import type { PlannedRevision, SecretReference } from '../domain/deployment-plan.ts';
import { restoredResourceSpec } from '../domain/resource-spec.ts';
import { imageVersionOf, type SourceConfig } from '../domain/sources.ts';
import { SUPERSEDABLE_REVISION_STATUSES } from '../domain/states.ts';
import { AppError } from '../errors.ts';
import { NEW_REVISION_STATUS, newRevisionEvents, transitionRevision } from './lifecycle.ts';
import { updateDeployment } from '../store/deployments.ts';
import { recordEvents, type EventInput } from '../store/events.ts';
import { insertRevision, lockRevisionsInStatus } from '../store/revisions.ts';
import type { Db, DeploymentRow, RevisionSnapshot, StoredSecret } from '../store/schema.ts';
import { findUploadByPath } from '../store/uploads.ts';

/** The source_config fields a revision snapshots, and a redeploy restores (resource_spec but its scale). */
export const SNAPSHOT_CONFIG_FIELDS = ['resource_spec', 'install_command', 'build_command', 'listener_config'] as const;

/**
 * The deployment's source config with the snapshot's fields put back (absent ones removed), except the
 * scale of its resource spec, which stays the deployment's (restoredResourceSpec).
 */
export function restoreSnapshot(current: SourceConfig, snapshot: RevisionSnapshot): SourceConfig {
  const restored: SourceConfig = {
    ...current,
    resource_spec: restoredResourceSpec(snapshot.resource_spec, current.resource_spec),
    install_command: snapshot.install_command,
    build_command: snapshot.build_command,
    listener_config: snapshot.listener_config,
  };
  for (const field of SNAPSHOT_CONFIG_FIELDS) {
    if (restored[field] === null || restored[field] === undefined) delete restored[field];
  }
  return restored;
}

/** The SNAPSHOT_CONFIG_FIELDS of the config (null when absent) and the secret references. */
export function snapshotOf(config: SourceConfig, secretReferences: SecretReference[] | null): RevisionSnapshot {
  return {
    resource_spec: config.resource_spec ?? null,
    install_command: config.install_command ?? null,
    build_command: config.build_command ?? null,
    listener_config: config.listener_config ?? null,
    secret_references: secretReferences,
  };
}

/** A source_tarball_path must be an upload of the workspace. */
export async function checkRevisionReferences(tx: Db, workspaceId: string, revision: PlannedRevision): Promise<void> {
  const path = revision.config.source_tarball_path;
  if (path && !(await findUploadByPath(tx, workspaceId, path))) {
    throw new AppError(
      'invalid_reference',
      `source_revision_config.source_tarball_path '${path}' is not an upload of this workspace: ` +
        'upload the tarball with POST /v2/uploads and use the path it returns.',
    );
  }
}

/**
 * Stores a revision: born CREATING and queued at once (newRevisionEvents), superseding older queued
 * revisions (SKIPPED). The first revision of a new deployment has nothing to supersede, and its
 * deployment row already names it, so `first` skips those two steps.
 */
export async function addRevision(
  tx: Db,
  deployment: Pick<DeploymentRow, 'id' | 'workspace_id'>,
  revision: PlannedRevision,
  secrets: StoredSecret[],
  snapshot: RevisionSnapshot,
  cause: Record<string, unknown>,
  first: { id: string; events: EventInput[] } | null = null,
): Promise<string> {
  const id = first?.id ?? randomUUID();
  if (!first) {
    const superseded = await lockRevisionsInStatus(tx, deployment.id, SUPERSEDABLE_REVISION_STATUSES);
    // A pull request's preview is superseded only by a newer commit of that pull request.
    for (const older of superseded.filter((r) => r.preview_pull_request === null)) {
      await transitionRevision(tx, older, 'SKIPPED', {
        reason: 'superseded',
        message: `Superseded by revision ${id} before it started.`,
      });
    }
  }
  await insertRevision(tx, {
    id,
    deploymentId: deployment.id,
    workspaceId: deployment.workspace_id,
    status: NEW_REVISION_STATUS,
    source: revision.source,
    config: revision.config,
    snapshot,
    secrets,
  });
  await recordEvents(tx, [
    ...(first?.events ?? []),
    ...newRevisionEvents({ id, workspace_id: deployment.workspace_id, deployment_id: deployment.id }, cause),
  ]);
  if (!first)
    await updateDeployment(tx, deployment.id, {
      latestRevisionId: id,
      imageVersion: imageVersionOf(revision.config),
    });
  return id;
}
