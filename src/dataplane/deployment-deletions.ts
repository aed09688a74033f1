/**
 * The own worker's teardown of deleted deployments (docs/data-plane.md): one deployment at a time is
 * claimed with the runner lease, its revisions' work stopped, its apps, files and database torn down
 * by the local runtime, and the deletion confirmed through the data-plane reports. A teardown that
 * fails is tried again later, less and less often, without holding up the others.
 */
import type { Kysely } from 'kysely';
import type { Logger } from 'pino';
import type { OwnPlaneReports } from '../domain/data-plane.ts';
import { revisionStatusesOf } from '../store/revisions.ts';
import type { Database } from '../store/schema.ts';
import { claimDeploymentToDelete, setRunner, type LeaseOwner } from '../store/work-leases.ts';
import type { LocalRuntime } from './local-runtime.ts';

/** How long a deletion whose teardown failed first waits before it is tried again... */
const DEFERRED_DELETION_MS = 60_000;
/** ... and at the most, after failing again and again (the wait doubles each time). */
const DEFERRED_DELETION_MAX_MS = 30 * 60_000;

export interface DeploymentDeletionsDeps {
  db: Kysely<Database>;
  runtime: LocalRuntime;
  reports: OwnPlaneReports;
  logger: Logger;
  owner: LeaseOwner;
  leaseSeconds: number;
  /** Stops the work on the deployment's revisions, resolving once it has stopped. */
  stopWorkOf: (deploymentId: string) => Promise<void>;
}

/** `deleteOne()` tears down the next deleted deployment; false when there is none to do now. */
export function createDeploymentDeletions(deps: DeploymentDeletionsDeps) {
  const { db, runtime, reports, logger, owner, leaseSeconds } = deps;
  /**
   * Deletions whose teardown failed, by deployment, with when to try again: one that cannot finish (its
   * processes could not be confirmed gone, say) holds up neither the others nor the rest of a pass.
   */
  const deferredDeletions = new Map<string, { until: number; attempts: number; reason: string }>();

  async function deleteOne(): Promise<boolean> {
    const now = Date.now();
    const waiting = [...deferredDeletions].filter(([, deferred]) => deferred.until > now).map(([id]) => id);
    const target = await db.transaction().execute(async (tx) => {
      const found = await claimDeploymentToDelete(tx, owner, waiting);
      if (found) await setRunner(tx, owner, found.id, leaseSeconds);
      return found;
    });
    if (!target) return false;
    // Its revisions' work stops, and has stopped, before anything of it is removed: a build or a start
    // under way has processes that write its directories (docs/data-plane.md).
    await deps.stopWorkOf(target.id);
    const revisions = await revisionStatusesOf(db, target.id);
    try {
      await runtime.teardown(
        target,
        revisions.map((r) => r.id),
      );
    } catch (error) {
      const reason = error instanceof Error ? error.message : String(error);
      const before = deferredDeletions.get(target.id);
      const attempts = (before?.attempts ?? 0) + 1;
      // Tried again less and less often; said in full the first time and whenever the reason changes.
      const delay = Math.min(DEFERRED_DELETION_MS * 2 ** (attempts - 1), DEFERRED_DELETION_MAX_MS);
      deferredDeletions.set(target.id, { until: Date.now() + delay, attempts, reason });
      const context = { deploymentId: target.id, attempts, retryInSeconds: delay / 1000 };
      if (before?.reason === reason) logger.warn(context, 'a deleted deployment still cannot be torn down');
      else logger.error({ ...context, err: error }, 'could not tear a deleted deployment down; retrying later');
      return true;
    }
    deferredDeletions.delete(target.id);
    // Its uploads that no other deployment used go with it.
    const { orphanedUploads } = await reports.confirmDeletion(target.id);
    // Uploads made before uploads were stored in the database also have a file here.
    for (const path of orphanedUploads) await runtime.removeUpload(path);
    logger.info({ deploymentId: target.id }, 'deployment torn down and deleted');
    return true;
  }

  return { deleteOne };
}
