/**
 * The lifecycle of a deployment and its one writer (docs/lifecycle.md): the only module that changes a
 * revision's status (checked against the state machine in src/domain/states.ts), makes a revision the
 * active one, changes a deployment's status, or ends a deletion, each with its event.
 *
 * The writers (transitionRevision, transitionDeployment, activateRevision, finishDeletion, startDeletion,
 * applyCondition): each writes one change and its event in the caller's transaction; the caller holds the
 * deployment's row lock (taken before its revisions', the order every writer uses). The deployment
 * service (a user's patch, delete or interrupt), the deadline sweeper, the listener's heartbeat and the
 * data planes' reports (src/service/lifecycle-reports.ts, the contract of src/domain/data-plane.ts) call
 * them.
 */
import { conditionMove, type DeploymentConditionName } from '../domain/conditions.ts';
import {
  DELETING_STATUS,
  deletionFinisher,
  pendingDeletionFinisher,
  type DeletionFinisher,
} from '../domain/deletion.ts';
import { NOT_TO_RUN, isWorkedToward } from '../domain/desired-state.ts';
import {
  UNFINISHED_REVISION_STATUSES,
  assertDeploymentTransition,
  assertRevisionTransition,
  type DeploymentStatus,
  type RevisionStatus,
} from '../domain/states.ts';
import { deleteDeploymentRow, hasLocalResources, setActiveRevision, updateDeployment } from '../store/deployments.ts';
import { recordEvents, type EventInput } from '../store/events.ts';
import { listenerHasBeenSeen } from '../store/listeners.ts';
import { getPreview } from '../store/pull-request-previews.ts';
import { lockRevisionsInStatus, setRevisionStatus } from '../store/revisions.ts';
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

/**
 * The revision both planes were working toward ended without running (a user's interrupt, its
 * deadline): older revisions still on their way were waiting for it to take over, and no data plane
 * works on them any more (their reports are refused as superseded), so they end now with it instead of
 * at their own deadlines. QUEUED ones are SKIPPED, the others INTERRUPTED, reason `superseded`. A
 * preview's ends only older ones of its pull request; the deployment's own never a preview's. The
 * caller holds the deployment's lock and has moved `ended` to its final status.
 */
export async function endRevisionsLeftFor(
  tx: Db,
  deployment: { id: string; latest_revision_id: string | null },
  ended: { id: string; number: number; status: RevisionStatus; preview_pull_request: number | null },
): Promise<void> {
  if (!NOT_TO_RUN.has(ended.status)) return;
  const previewNames =
    ended.preview_pull_request === null
      ? null
      : ((await getPreview(tx, deployment.id, ended.preview_pull_request))?.revision_id ?? null);
  if (!isWorkedToward(deployment, ended, previewNames)) return;
  const left = (await lockRevisionsInStatus(tx, deployment.id, UNFINISHED_REVISION_STATUSES)).filter(
    (r) => r.id !== ended.id && r.preview_pull_request === ended.preview_pull_request,
  );
  for (const older of left) {
    await transitionRevision(tx, older, older.status === 'QUEUED' ? 'SKIPPED' : 'INTERRUPTED', {
      reason: 'superseded',
      message: `Revision ${ended.number} replaced it and then ended without running (${ended.status}).`,
    });
  }
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
 * A delete, after its caller interrupted the deployment's unfinished revisions: the deployment goes
 * AWAITING_DELETE, and who ends the deletion is the one rule's (src/domain/deletion.ts): the delete
 * itself, now, when the deployment's data plane holds nothing of it; else that data plane, after its
 * teardown (the own worker claims it; a listener sees `delete: true` in its desired state and
 * confirms). The caller holds the deployment's row lock; a deployment already being deleted is left
 * as it is. Returns who ends it.
 */
export async function startDeletion(
  tx: Db,
  deployment: DeploymentRef & Pick<DeploymentRow, 'name' | 'tracing_project_id' | 'listener_id'>,
  options: { deleteTracingProject: boolean },
): Promise<DeletionFinisher> {
  const pending = pendingDeletionFinisher(deployment);
  if (pending !== null) return pending;
  await transitionDeployment(tx, deployment, DELETING_STATUS);
  const finisher = deletionFinisher({
    listener_id: deployment.listener_id,
    dataPlaneMayHoldIt:
      deployment.listener_id === null
        ? await hasLocalResources(tx, deployment.id)
        : await listenerHasBeenSeen(tx, deployment.listener_id),
  });
  if (finisher === 'delete') await finishDeletion(tx, deployment, options);
  else await updateDeployment(tx, deployment.id, { deleteTracingProject: options.deleteTracingProject });
  return finisher;
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

/**
 * A condition of a deployment (a crash loop, healthy again, its database made) moves its status as the
 * conditions' table says (src/domain/conditions.ts, the same rule for both data planes), in the
 * caller's transaction, which holds the deployment's row lock. The event's reason is the condition's
 * name. True when it moved.
 */
export async function applyCondition(
  tx: Db,
  deployment: DeploymentRef,
  condition: DeploymentConditionName,
  data: Record<string, unknown>,
): Promise<boolean> {
  const to = conditionMove(condition, deployment.status);
  if (to === null) return false;
  await transitionDeployment(tx, deployment, to, { reason: condition, ...data });
  return true;
}
