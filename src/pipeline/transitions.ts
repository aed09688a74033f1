/**
 * The lifecycle's one writer: the only way a revision or a deployment changes status (checked against
 * the state machine in src/domain/states.ts), a revision becomes the active one, and a deletion ends,
 * whichever data plane reports it (the worker, the listener protocol, a user's delete). Each function
 * writes the change and its event in the caller's transaction; the caller holds the deployment's row
 * lock (taken before its revisions', the order every writer uses).
 */
import {
  assertDeploymentTransition,
  assertRevisionTransition,
  type DeploymentStatus,
  type RevisionStatus,
} from '../domain/states.ts';
import { deleteDeploymentRow, setActiveRevision, updateDeployment } from '../store/deployments.ts';
import { recordEvents, type EventInput } from '../store/events.ts';
import { setRevisionStatus } from '../store/revisions.ts';
import type { Db, DeploymentRow } from '../store/schema.ts';
import { deleteTracingProject } from '../store/tracing-projects.ts';

export interface RevisionRef {
  id: string;
  workspace_id: string;
  deployment_id: string;
  status: RevisionStatus;
}

export interface Failure {
  /** Machine-readable, e.g. `deadline_exceeded`, `build_command_failed`. */
  reason: string;
  message: string;
}

export async function transitionRevision(
  db: Db,
  revision: RevisionRef,
  to: RevisionStatus,
  failure: Failure | null = null,
): Promise<void> {
  const from = revision.status;
  assertRevisionTransition(from, to);
  await setRevisionStatus(db, revision.id, to, failure);
  await recordEvents(db, [
    {
      workspaceId: revision.workspace_id,
      subjectType: 'revision',
      subjectId: revision.id,
      deploymentId: revision.deployment_id,
      type: 'revision.status_changed',
      fromStatus: from,
      toStatus: to,
      data: failure ? { reason: failure.reason, message: failure.message } : {},
    },
  ]);
}

export interface DeploymentRef {
  id: string;
  workspace_id: string;
  status: DeploymentStatus;
}

export async function transitionDeployment(
  db: Db,
  deployment: DeploymentRef,
  to: DeploymentStatus,
  data: Record<string, unknown> = {},
): Promise<void> {
  const from = deployment.status;
  assertDeploymentTransition(from, to);
  await updateDeployment(db, deployment.id, { status: to });
  await recordEvents(db, [
    {
      workspaceId: deployment.workspace_id,
      subjectType: 'deployment',
      subjectId: deployment.id,
      deploymentId: deployment.id,
      type: 'deployment.status_changed',
      fromStatus: from,
      toStatus: to,
      data,
    },
  ]);
}

/**
 * A revision that has just become DEPLOYED serves its deployment: it becomes the active revision (with
 * a `deployment.active_revision_changed` event) and the deployment READY. The own data plane passes
 * the stable URL it switched to, which is stored on the deployment; a listener's deployment keeps its
 * own `custom_url`. A revision becomes DEPLOYED once, so the active revision always changes here; were
 * it already the active one, nothing but the URL would be written.
 */
export async function activateRevision(
  db: Db,
  deployment: DeploymentRef & Pick<DeploymentRow, 'active_revision_id' | 'source_config'>,
  revisionId: string,
  stableUrl?: string,
): Promise<void> {
  const changed = deployment.active_revision_id !== revisionId;
  if (changed || stableUrl !== undefined) await setActiveRevision(db, deployment.id, revisionId, stableUrl);
  if (changed) {
    const url = stableUrl ?? deployment.source_config.custom_url;
    await recordEvents(db, [
      {
        workspaceId: deployment.workspace_id,
        subjectType: 'deployment',
        subjectId: deployment.id,
        deploymentId: deployment.id,
        type: 'deployment.active_revision_changed',
        data: { from: deployment.active_revision_id, to: revisionId, url: typeof url === 'string' ? url : null },
      },
    ]);
  }
  if (deployment.status !== 'READY') await transitionDeployment(db, deployment, 'READY', { revision_id: revisionId });
}

/**
 * The last step of a deletion, whoever takes it: a delete with nothing to tear down, the worker after
 * its teardown, a listener confirming it removed everything. The deployment is AWAITING_DELETE (the
 * caller checked or just moved it there); its `deployment.deleted` event is written, its row goes (its
 * revisions with it) and, when the delete asked for it, its tracing project.
 */
export async function finishDeletion(
  db: Db,
  deployment: Pick<DeploymentRow, 'id' | 'workspace_id' | 'name' | 'tracing_project_id'>,
  options: { deleteTracingProject: boolean; confirmedByListener?: string },
): Promise<void> {
  await recordEvents(db, [
    {
      workspaceId: deployment.workspace_id,
      subjectType: 'deployment',
      subjectId: deployment.id,
      deploymentId: deployment.id,
      type: 'deployment.deleted',
      fromStatus: 'AWAITING_DELETE',
      data: {
        name: deployment.name,
        tracing_project_deleted: options.deleteTracingProject,
        ...(options.confirmedByListener !== undefined ? { confirmed_by_listener: options.confirmedByListener } : {}),
      },
    },
  ]);
  await deleteDeploymentRow(db, deployment.id);
  if (options.deleteTracingProject) await deleteTracingProject(db, deployment.tracing_project_id);
}

/**
 * A new revision is stored as CREATING and queued in the same transaction, so it is inserted QUEUED
 * with both steps as events (one statement for both, written by the caller with its other events).
 */
export const NEW_REVISION_STATUS: RevisionStatus = 'QUEUED';

export function newRevisionEvents(revision: Omit<RevisionRef, 'status'>, cause: Record<string, unknown>): EventInput[] {
  assertRevisionTransition('CREATING', NEW_REVISION_STATUS);
  const subject = {
    workspaceId: revision.workspace_id,
    subjectType: 'revision' as const,
    subjectId: revision.id,
    deploymentId: revision.deployment_id,
  };
  return [
    { ...subject, type: 'revision.created', toStatus: 'CREATING', data: cause },
    { ...subject, type: 'revision.status_changed', fromStatus: 'CREATING', toStatus: NEW_REVISION_STATUS },
  ];
}
