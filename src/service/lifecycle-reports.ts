/**
 * The data planes' reports (the contract of src/domain/data-plane.ts), applied by the lifecycle's
 * writers (src/service/lifecycle.ts). What a listener says through the listener protocol and what the
 * own data plane's worker says in process go through the same operations and the same rules: a report
 * of a revision in a final state, of one superseded (not the deployment's latest revision, or, on the own
 * plane, not leased by the reporting worker), or one that is behind or repeats the current status
 * changes nothing; a deletion ends only for a deployment awaiting delete; a condition moves a deployment
 * only as the one conditions' table says (src/domain/conditions.ts).
 *
 * Which plane may call what is in the types: a listener's reports (`createListenerReports`) are those of
 * both planes (`DataPlaneReports`); the own worker's (`createOwnPlaneReports`) add its own
 * (`OwnPlaneReports`). The own worker's reports about a revision or a deployment are refused, and
 * logged, when the worker no longer holds the lease they rest on, as a listener's are checked against the
 * deployments assigned to it.
 */
import type { Kysely, QueryExecutorProvider } from 'kysely';
import type { Logger } from 'pino';
import type {
  AgentCredentialRecord,
  AppDatabaseRecord,
  DataPlaneReports,
  DatabaseStorageReport,
  DeletionOutcome,
  DeploymentConditionReport,
  DeploymentFactReport,
  EndpointReport,
  ListenerPlaneReports,
  NotAppliedReason,
  OwnPlaneReports,
  ReportOutcome,
  RevisionLogKind,
  RevisionLogLine,
  RevisionReport,
} from '../domain/data-plane.ts';
import { deletionConfirmation } from '../domain/deletion.ts';
import { isWorkedToward } from '../domain/desired-state.ts';
import {
  FAILED_REVISION_STATUSES,
  REVISION_STATES,
  dataPlaneSteps,
  isFinalRevisionStatus,
  type RevisionStatus,
} from '../domain/states.ts';
import { AppError, notFound } from '../errors.ts';
import { insertCredential } from '../store/agent-credentials.ts';
import { claimAppUid } from '../store/app-uids.ts';
import { setEndpointServed, setSplitState } from '../store/deployment-endpoints.ts';
import { changeDatabaseStorageState, recordDatabaseSize, saveDeploymentRuntime } from '../store/deployment-runtimes.ts';
import { lockDeployment, lockDeploymentById, moveAppUrls } from '../store/deployments.ts';
import { recordEvents } from '../store/events.ts';
import { findListenerRevision } from '../store/listeners.ts';
import { getPreview } from '../store/pull-request-previews.ts';
import { appendRevisionLogs, trimRevisionLogs } from '../store/revision-logs.ts';
import { findLocalRevision, lockRevision, lockRevisionsInStatus, setRevisionCommitSha } from '../store/revisions.ts';
import type { Database, Db } from '../store/schema.ts';
import { deleteUploadsOnlyUsedBy } from '../store/uploads.ts';
import { holdsDeploymentLease, holdsRevisionLease, setRunner, type LeaseOwner } from '../store/work-leases.ts';
import { applyListenerEndpointReport, splitEvent } from './lifecycle-endpoint-reports.ts';
import { pinPreviewEndpoint } from './preview-endpoints.ts';
import { activateRevision, applyCondition, finishDeletion, transitionRevision } from './lifecycle.ts';

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
 * Whether the reporter may still report about a deployment or a revision, in the report's transaction.
 * A listener's reports are checked against its assignment where they read the row (the deployment's
 * `listener_id`); the own worker's against its leases (`ownPlaneLeases`).
 */
interface LeaseCheck {
  deployment(tx: Db, deploymentId: string, report: string): Promise<boolean>;
  revision(tx: Db, revisionId: string, report: string): Promise<boolean>;
}

const NO_LEASES: LeaseCheck = { deployment: async () => true, revision: async () => true };

/**
 * The own worker holds a deployment while it runs it (its runner lease) or works on one of its revisions
 * (a revision's lease), and a revision while it leases it. A worker whose lease went to another (it was
 * thought dead, or stopped) may still be finishing what it started: what it reports then is refused and
 * logged, so that only the holder's word changes state.
 */
function ownPlaneLeases(db: Kysely<Database>, owner: LeaseOwner, logger: Logger | undefined): LeaseCheck {
  const refused = (subject: Record<string, string>, report: string) => {
    logger?.warn(
      { ...subject, owner: owner.id, report },
      'a report of a worker that no longer holds the lease was refused',
    );
    return false;
  };
  return {
    async deployment(tx, deploymentId, report) {
      return (await holdsDeploymentLease(tx, owner, deploymentId)) || refused({ deploymentId }, report);
    },
    async revision(tx, revisionId, report) {
      return (await holdsRevisionLease(tx, owner, revisionId)) || refused({ revisionId }, report);
    },
  };
}

/**
 * The reports both data planes make (DataPlaneReports of src/domain/data-plane.ts), each in a
 * transaction of its own, as `reporter`. The own data plane's are checked against its leases first.
 */
function reportsOfBothPlanes(db: Kysely<Database>, reporter: Reporter, leases: LeaseCheck): DataPlaneReports {
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
        // Both planes work toward the target, the latest revision (src/domain/desired-state.ts), and the
        // own one toward each open pull request's preview beside it; the own data plane only on the
        // revision it leases.
        const preview =
          revision.preview_pull_request === null
            ? null
            : ((await getPreview(tx, deployment.id, revision.preview_pull_request))?.revision_id ?? null);
        const superseded =
          !isWorkedToward(deployment, revision, preview) ||
          (reporter.kind === 'local' && revision.lease_owner !== reporter.owner.id);
        if (superseded) return notApplied('superseded');
        const path = stepsTo(current, report.status, steps);
        if (path === null) return notApplied('behind');
        if (path.length === 0) return notApplied('duplicate');

        // The first report applied for the latest revision ends older revisions still on their way: the
        // data plane replaced them (an older one taken up before the latest was pushed; on the own plane
        // also a QUEUED one that was never started). A preview's replaces only older ones of its pull
        // request, and the deployment's own never a preview's.
        const replaced = (await lockRevisionsInStatus(tx, deployment.id, ['QUEUED', ...steps])).filter(
          (r) => r.id !== revision.id && r.preview_pull_request === revision.preview_pull_request,
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
        if (report.status === 'DEPLOYED' && revision.preview_pull_request !== null) {
          // A pull request's preview never serves the deployment: it is served at its own endpoint.
          await pinPreviewEndpoint(tx, deployment, revision);
        } else if (report.status === 'DEPLOYED') {
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
        // Another worker took the teardown over: it confirms.
        if (!(await leases.deployment(tx, deploymentId, 'confirmDeletion')))
          return { deleted: false, orphanedUploads: [] };
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
        if (!(await leases.deployment(tx, row.id, `reportCondition ${report.condition}`))) return;
        await applyCondition(tx, row, report.condition, report.data);
      });
    },
  };
}

/**
 * The reports of a listener: those of both planes, and no other (a listener's agent reaches them through
 * the listener protocol, src/service/listener-protocol.ts).
 */
export function createListenerReports(
  db: Kysely<Database>,
  listener: { listenerId: string; /** Its workspace: deletions are confirmed there. */ workspaceId?: string },
): ListenerPlaneReports {
  return {
    ...reportsOfBothPlanes(db, { kind: 'listener', ...listener }, NO_LEASES),
    reportEndpoint: (report) => applyListenerEndpointReport(db, listener.listenerId, report),
  };
}

/** A traffic split's second revision served (with its weight) or failed at the endpoint. */
async function reportSplit(
  tx: Db,
  deployment: { id: string; workspace_id: string; listener_id: null },
  report: EndpointReport,
  weight: number,
) {
  const split = { revisionId: report.revisionId, weight };
  await setSplitState(
    tx,
    deployment.id,
    report.endpoint,
    split,
    report.served ? { served: true } : { served: false, reason: report.message },
  );
  // A split started again after a restart is no change, and no event.
  if (report.served && report.recordedRevisionId === report.revisionId && report.fromRevisionId === null) return;
  await recordEvents(tx, [splitEvent(deployment, report.endpoint, split, report)]);
}

/**
 * The reports of the own data plane's worker, as the lease owner `owner`: those of both planes and its
 * own (OwnPlaneReports). A report about a revision or a deployment that `owner` no longer holds (its
 * lease went to another worker) changes nothing and is logged: see `ownPlaneLeases`.
 */
export function createOwnPlaneReports(
  db: Kysely<Database>,
  worker: { owner: LeaseOwner; leaseSeconds: number; logger?: Logger },
): OwnPlaneReports {
  const leases = ownPlaneLeases(db, worker.owner, worker.logger);
  const both = reportsOfBothPlanes(
    db,
    { kind: 'local', owner: worker.owner, leaseSeconds: worker.leaseSeconds },
    leases,
  );
  return {
    ...both,
    async reportFact(report: DeploymentFactReport): Promise<void> {
      await db.transaction().execute(async (tx) => {
        if (!(await leases.deployment(tx, report.deploymentId, `reportFact ${report.type}`))) return;
        await recordEvents(tx, [
          {
            workspaceId: report.workspaceId,
            subjectType: 'deployment',
            subjectId: report.deploymentId,
            deploymentId: report.deploymentId,
            type: report.type,
            data: report.data,
          },
        ]);
      });
    },

    async reportEndpoint(report: EndpointReport): Promise<void> {
      await db.transaction().execute(async (tx) => {
        const deployment = await tx
          .selectFrom('deployments')
          .select(['workspace_id', 'listener_id'])
          .where('id', '=', report.deploymentId)
          .executeTakeFirst();
        // Only the data plane that runs the deployment reports its endpoints.
        if (!deployment || deployment.listener_id !== null) return;
        if (!(await leases.deployment(tx, report.deploymentId, 'reportEndpoint'))) return;
        if (report.split)
          return reportSplit(
            tx,
            { id: report.deploymentId, ...deployment, listener_id: null },
            report,
            report.split.weight,
          );
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
      await db.transaction().execute(async (tx) => {
        if (await leases.revision(tx, revisionId, 'reportCommit')) await setRevisionCommitSha(tx, revisionId, sha);
      });
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
