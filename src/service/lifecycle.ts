/**
 * The lifecycle of a deployment and its one writer (docs/lifecycle.md): the only module that changes a
 * revision's status (checked against the state machine in src/domain/states.ts), makes a revision the
 * active one, changes a deployment's status, or ends a deletion, each with its event.
 *
 * Two layers:
 * - The writers (transitionRevision, transitionDeployment, activateRevision, finishDeletion): each
 *   writes one change and its event in the caller's transaction; the caller holds the deployment's row
 *   lock (taken before its revisions', the order every writer uses). The deployment service (a user's
 *   patch, delete or interrupt), the deadline sweeper and the reports below call them.
 * - The data planes' reports (createDataPlaneReports, the contract of src/domain/data-plane.ts): what a
 *   listener says through the listener protocol and what the own data plane's worker says in process
 *   go through the same operations and the same rules: a report of a revision in a final state, of one
 *   superseded, or one that is behind or repeats the current status changes nothing; a deletion ends
 *   only for a deployment awaiting delete; a condition moves a deployment only as the one conditions'
 *   table says (src/domain/conditions.ts), which never moves a deployment being deleted.
 */
import type { QueryExecutorProvider } from 'kysely';
import type {
  AgentCredentialRecord,
  AppDatabaseRecord,
  DataPlaneReports,
  DatabaseStorageReport,
  DeletionOutcome,
  DeploymentConditionReport,
  DeploymentFactReport,
  EndpointReport,
  NotAppliedReason,
  ReportOutcome,
  RevisionLogKind,
  RevisionLogLine,
  RevisionReport,
} from '../domain/data-plane.ts';
import { conditionMove, type DeploymentConditionName } from '../domain/conditions.ts';
import {
  DELETING_STATUS,
  deletionConfirmation,
  deletionFinisher,
  pendingDeletionFinisher,
  type DeletionFinisher,
} from '../domain/deletion.ts';
import {
  FAILED_REVISION_STATUSES,
  REVISION_STATES,
  assertDeploymentTransition,
  dataPlaneSteps,
  assertRevisionTransition,
  isFinalRevisionStatus,
  type DeploymentStatus,
  type RevisionStatus,
} from '../domain/states.ts';
import { AppError, notFound } from '../errors.ts';
import {
  deleteDeploymentRow,
  hasLocalResources,
  lockDeployment,
  lockDeploymentById,
  moveAppUrls,
  setActiveRevision,
  updateDeployment,
} from '../store/deployments.ts';
import { setEndpointServed } from '../store/deployment-endpoints.ts';
import { recordEvents, type EventInput } from '../store/events.ts';
import { appendRevisionLogs, trimRevisionLogs } from '../store/revision-logs.ts';
import { findListenerRevision, listenerHasBeenSeen } from '../store/listeners.ts';
import {
  findLocalRevision,
  lockRevision,
  lockRevisionsInStatus,
  setRevisionCommitSha,
  setRevisionStatus,
} from '../store/revisions.ts';
import type { Database, Db, DeploymentRow } from '../store/schema.ts';
import { insertCredential } from '../store/agent-credentials.ts';
import { claimAppUid } from '../store/app-uids.ts';
import { changeDatabaseStorageState, recordDatabaseSize, saveDeploymentRuntime } from '../store/deployment-runtimes.ts';
import { deleteTracingProject } from '../store/tracing-projects.ts';
import { deleteUploadsOnlyUsedBy } from '../store/uploads.ts';
import { setRunner, type LeaseOwner } from '../store/work-leases.ts';
import type { Kysely } from 'kysely';

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

// ----- reports of the data planes ----------------------------------------------------------------

/** Who reports: a listener (over the listener protocol), or this service's own worker holding a lease. */
export type Reporter =
  | { kind: 'listener'; listenerId: string; /** Its workspace: deletions are confirmed there. */ workspaceId?: string }
  | { kind: 'local'; owner: LeaseOwner; leaseSeconds: number };

/** The states a listener may walk a revision through on its way to the reported one. */
export const LISTENER_STEPS: ReadonlySet<RevisionStatus> = new Set(dataPlaneSteps('listener'));
/** The states the own data plane walks a revision through (it builds, too). */
const LOCAL_STEPS: ReadonlySet<RevisionStatus> = new Set(dataPlaneSteps('local'));

/**
 * The transitions from `from` to `to` through the state table, passing only through `through` (a
 * data plane's own steps): [] when already there, null when `to` is not ahead of `from` (a stale or
 * repeated report).
 */
export function stepsTo(
  from: RevisionStatus,
  to: RevisionStatus,
  through: ReadonlySet<RevisionStatus> = LISTENER_STEPS,
): RevisionStatus[] | null {
  if (from === to) return [];
  const cameFrom = new Map<RevisionStatus, RevisionStatus>();
  const queue: RevisionStatus[] = [from];
  while (queue.length > 0) {
    const at = queue.shift()!;
    for (const next of REVISION_STATES[at].next) {
      if (cameFrom.has(next) || next === from) continue;
      cameFrom.set(next, at);
      if (next === to) {
        const path: RevisionStatus[] = [to];
        for (let step = at; step !== from; step = cameFrom.get(step)!) path.unshift(step);
        return path;
      }
      if (through.has(next)) queue.push(next);
    }
  }
  return null;
}

const FAILED_STATUSES: ReadonlySet<RevisionStatus> = new Set(FAILED_REVISION_STATUSES);
const DEFAULT_FAILURE = { reason: 'deploy_failed', message: 'The listener reported that the deploy failed.' };

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

/** The reports of one data plane (src/domain/data-plane.ts), each in a transaction of its own. */
export function createDataPlaneReports(db: Kysely<Database>, reporter: Reporter): DataPlaneReports {
  const steps = reporter.kind === 'listener' ? LISTENER_STEPS : LOCAL_STEPS;
  const listenerId = reporter.kind === 'listener' ? reporter.listenerId : null;

  return {
    async reportRevision(report: RevisionReport): Promise<ReportOutcome> {
      return db.transaction().execute(async (tx) => {
        const found =
          listenerId !== null
            ? await findListenerRevision(tx, listenerId, report.revisionId)
            : await findLocalRevision(tx, report.revisionId);
        const deployment = found ? await lockDeployment(tx, found.workspace_id, found.deployment_id) : undefined;
        const revision = deployment ? await lockRevision(tx, report.revisionId) : undefined;
        if (!deployment || !revision) throw notFound('Revision', report.revisionId);
        const current = revision.status;
        const notApplied = (reason: NotAppliedReason): ReportOutcome => ({
          applied: false,
          status: current,
          notAppliedReason: reason,
        });
        if (isFinalRevisionStatus(current)) return notApplied('final');
        // Both planes work toward the target, the latest revision (src/domain/desired-state.ts); the own
        // data plane only on the revision it leases.
        const superseded =
          deployment.latest_revision_id !== revision.id ||
          (reporter.kind === 'local' && revision.lease_owner !== reporter.owner.id);
        if (superseded) return notApplied('superseded');
        const path = stepsTo(current, report.status, steps);
        if (path === null) return notApplied('behind');
        if (path.length === 0) return notApplied('duplicate');

        // The first report applied for the latest revision ends older revisions still on their way: the
        // data plane replaced them (an older one taken up before the latest was pushed; on the own plane
        // also a QUEUED one that was never started).
        const replaced = (await lockRevisionsInStatus(tx, deployment.id, ['QUEUED', ...steps])).filter(
          (r) => r.id !== revision.id,
        );
        const where = reporter.kind === 'listener' ? 'on the listener' : 'on the own data plane';
        for (const older of replaced) {
          await transitionRevision(tx, older, older.status === 'QUEUED' ? 'SKIPPED' : 'INTERRUPTED', {
            reason: 'superseded',
            message: `Revision ${revision.number} replaced it ${where} before it was deployed.`,
          });
        }
        let from = current;
        for (const to of path) {
          const failure = FAILED_STATUSES.has(to)
            ? {
                reason: report.failure?.reason ?? DEFAULT_FAILURE.reason,
                message: report.failure?.message ?? DEFAULT_FAILURE.message,
              }
            : null;
          await transitionRevision(tx, { ...revision, status: from }, to, failure);
          from = to;
        }
        if (listenerId !== null) {
          // What the listener said, as it said it (the status events above hold what was applied).
          await recordEvents(tx, [
            {
              workspaceId: deployment.workspace_id,
              subjectType: 'revision',
              subjectId: revision.id,
              deploymentId: deployment.id,
              type: 'revision.reported',
              toStatus: report.status,
              data: {
                listener_id: listenerId,
                ...(report.failure?.reason !== undefined ? { failure_reason: report.failure.reason } : {}),
                ...(report.failure?.message !== undefined ? { message: report.failure.message } : {}),
              },
            },
          ]);
        }
        if (report.status === 'DEPLOYED') {
          // The own data plane runs what it deployed: it holds the deployment's runner lease from now.
          if (reporter.kind === 'local') await setRunner(tx, reporter.owner, deployment.id, reporter.leaseSeconds);
          await activateRevision(tx, deployment, revision.id, report.url);
        }
        return { applied: true, status: report.status, notAppliedReason: null };
      });
    },

    async confirmDeletion(deploymentId: string): Promise<DeletionOutcome> {
      return db.transaction().execute(async (tx) => {
        const row =
          reporter.kind === 'listener' && reporter.workspaceId !== undefined
            ? await lockDeployment(tx, reporter.workspaceId, deploymentId)
            : await lockDeploymentById(tx, deploymentId);
        // Gone already: a retried confirmation, or another worker finished it.
        if (!row) return { deleted: false, orphanedUploads: [] };
        const confirmation = deletionConfirmation(
          row,
          listenerId === null ? { kind: 'local' } : { kind: 'listener', listenerId },
        );
        if (confirmation === 'not_theirs') throw notFound('Deployment', deploymentId);
        if (confirmation === 'not_deleting') {
          throw new AppError(
            'conflict',
            `Deployment ${deploymentId} is ${row.status}, not being deleted: only a deployment marked delete in the desired state can be confirmed deleted.`,
          );
        }
        // Uploads that only this deployment's revisions used go with it.
        const orphaned = await deleteUploadsOnlyUsedBy(tx, deploymentId);
        await finishDeletion(tx, row, {
          deleteTracingProject: row.delete_tracing_project,
          ...(listenerId !== null ? { confirmedByListener: listenerId } : {}),
        });
        return { deleted: true, orphanedUploads: orphaned.map((upload) => upload.path) };
      });
    },

    async reportCondition(report: DeploymentConditionReport): Promise<void> {
      await db.transaction().execute(async (tx) => {
        const row = await lockDeploymentById(tx, report.deploymentId);
        if (!row || row.listener_id !== listenerId) return;
        await applyCondition(tx, row, report.condition, report.data);
      });
    },

    async reportFact(report: DeploymentFactReport): Promise<void> {
      await recordEvents(db, [
        {
          workspaceId: report.workspaceId,
          subjectType: 'deployment',
          subjectId: report.deploymentId,
          deploymentId: report.deploymentId,
          type: report.type,
          data: report.data,
        },
      ]);
    },

    async reportEndpoint(report: EndpointReport): Promise<void> {
      await db.transaction().execute(async (tx) => {
        const deployment = await tx
          .selectFrom('deployments')
          .select(['workspace_id', 'listener_id'])
          .where('id', '=', report.deploymentId)
          .executeTakeFirst();
        // Only the data plane that runs the deployment reports its endpoints.
        if (!deployment || deployment.listener_id !== listenerId) return;
        if (report.served) {
          await setEndpointServed(tx, report.deploymentId, report.endpoint, report.revisionId);
          // After a restart the same revision is started again: that is no move, and no event.
          if (report.recordedRevisionId === report.revisionId && report.fromRevisionId === null) return;
        }
        await recordEvents(tx, [
          {
            workspaceId: deployment.workspace_id,
            subjectType: 'deployment',
            subjectId: report.deploymentId,
            deploymentId: report.deploymentId,
            ...(report.served
              ? {
                  type: 'deployment.endpoint_served' as const,
                  data: {
                    endpoint: report.endpoint,
                    revision_id: report.revisionId,
                    from_revision_id: report.fromRevisionId,
                  },
                }
              : {
                  type: 'deployment.endpoint_failed' as const,
                  data: { endpoint: report.endpoint, revision_id: report.revisionId, message: report.message },
                }),
          },
        ]);
      });
    },

    async keepAppDatabase(deploymentId: string, workspaceId: string, database: AppDatabaseRecord): Promise<void> {
      await saveDeploymentRuntime(db, deploymentId, workspaceId, {
        databaseName: database.databaseName,
        roleName: database.roleName,
        databasePasswordSealed: database.passwordSealed,
      });
    },

    async keepAgentCredential(
      deploymentId: string,
      workspaceId: string,
      credential: AgentCredentialRecord,
    ): Promise<void> {
      const row = await insertCredential(db, {
        workspaceId,
        deploymentId,
        name: 'runtime',
        agentIds: null,
        hash: credential.hash,
        prefix: credential.prefix,
        createdBy: 'data-plane',
      });
      await saveDeploymentRuntime(db, deploymentId, workspaceId, {
        agentCredentialId: row.id,
        agentCredentialSealed: credential.sealed,
      });
    },

    async reportDatabaseSize(deploymentId: string, sizeBytes: number, at: Date): Promise<void> {
      await recordDatabaseSize(db, deploymentId, sizeBytes, at);
    },

    async reportDatabaseStorage(
      report: DatabaseStorageReport,
      enforce: (tx: QueryExecutorProvider) => Promise<void>,
    ): Promise<boolean> {
      return db.transaction().execute(async (tx) => {
        const { deploymentId } = report;
        if (!(await changeDatabaseStorageState(tx, deploymentId, report.from, report.to, report.sizeBytes)))
          return false;
        await enforce(tx);
        await recordEvents(tx, [
          {
            workspaceId: report.workspaceId,
            subjectType: 'deployment',
            subjectId: deploymentId,
            deploymentId,
            type: report.event.type,
            data: report.event.data,
          },
        ]);
        return true;
      });
    },

    async reportCommit(revisionId: string, sha: string): Promise<void> {
      await setRevisionCommitSha(db, revisionId, sha);
    },

    async reportAppEdge(edge: { prefix: string; suffix: string }): Promise<number> {
      return moveAppUrls(db, edge.prefix, edge.suffix);
    },

    async appendLogLines(revisionId: string, type: RevisionLogKind, lines: readonly RevisionLogLine[]): Promise<void> {
      await appendRevisionLogs(db, revisionId, type, lines);
    },

    async trimLog(revisionId: string, type: RevisionLogKind, keep: number): Promise<void> {
      await trimRevisionLogs(db, revisionId, type, keep);
    },

    claimAppUid(deploymentId: string, range: { first: number; count: number }): Promise<number> {
      return claimAppUid(db, deploymentId, range);
    },
  };
}
