/**
 * The only way a revision or a deployment changes status: check the transition against the state
 * machine (src/domain/states.ts), write it, and write its event, in the caller's transaction.
 */
import {
  assertDeploymentTransition,
  assertRevisionTransition,
  type DeploymentStatus,
  type RevisionStatus,
} from '../domain/states.ts';
import { updateDeployment } from '../store/deployments.ts';
import { recordEvents, type EventInput } from '../store/events.ts';
import { setRevisionStatus } from '../store/revisions.ts';
import type { Db } from '../store/schema.ts';

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

export async function transitionDeployment(
  db: Db,
  deployment: { id: string; workspace_id: string; status: DeploymentStatus },
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
