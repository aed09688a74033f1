/**
 * The own worker's work on one revision (src/dataplane/local-worker.ts runs several at a time): claiming
 * the next one with its lease, then building and deploying it through the local runtime, each step
 * reported through the data-plane reports (src/domain/data-plane.ts), and a failure reported with its
 * reason. A report the lifecycle does not apply (the revision was interrupted, deleted or taken over)
 * ends the work: it is not this worker's any more.
 */
import type { Kysely } from 'kysely';
import type { Logger } from 'pino';
import type { OwnPlaneReports, RevisionReport } from '../domain/data-plane.ts';
import { NOT_TO_RUN } from '../domain/desired-state.ts';
import type { RevisionStatus } from '../domain/states.ts';
import { AppError } from '../errors.ts';
import { getRevisionStatus } from '../store/revisions.ts';
import type { Database } from '../store/schema.ts';
import {
  claimRevision,
  extendRevisionLease,
  releaseRevisionLease,
  type ClaimedRevision,
  type LeaseOwner,
} from '../store/work-leases.ts';
import { inSpan } from '../telemetry/tracing.ts';
import { jobOf } from './adoption.ts';
import { pruneBuilds } from './build-pruning.ts';
import type { LocalRuntime } from './local-runtime.ts';
import { RevisionFailure } from './revision-build.ts';

/** A revision whose work was started this many times (takeovers included) fails with `worker_lost`. */
const MAX_ATTEMPTS = 3;

/** Thrown inside a job when the revision is no longer this worker's to move. */
export class NotOurs extends Error {}

const failureStatusOf = (status: RevisionStatus): 'BUILD_FAILED' | 'DEPLOY_FAILED' =>
  status === 'AWAITING_BUILD' || status === 'BUILDING' ? 'BUILD_FAILED' : 'DEPLOY_FAILED';

type Failure = { reason: string; message: string };

export interface RevisionWorkDeps {
  db: Kysely<Database>;
  runtime: LocalRuntime;
  reports: OwnPlaneReports;
  logger: Logger;
  owner: LeaseOwner;
  leaseSeconds: number;
  /** Whether the worker is stopping (a revision's files are then left for the next worker). */
  stopping: () => boolean;
}

/** Claims revisions and runs their work, as the worker `owner`. */
export function createRevisionWork(deps: RevisionWorkDeps) {
  const { db, runtime, reports, logger, owner, leaseSeconds, stopping } = deps;

  /**
   * Reports the revision at `to`. Not applied because it is final (interrupted, say), superseded (the
   * lease went to another worker) or gone: the work is not ours any more.
   */
  async function advance(report: RevisionReport): Promise<void> {
    const outcome = await reports.reportRevision(report).catch((error: unknown) => {
      if (error instanceof AppError && error.code === 'not_found') throw new NotOurs();
      throw error;
    });
    if (outcome.applied || outcome.notAppliedReason === 'duplicate') return;
    if (outcome.notAppliedReason === 'behind')
      throw new Error(`revision ${report.revisionId} is ${outcome.status}, past ${report.status}`);
    throw new NotOurs();
  }

  async function run(claimed: ClaimedRevision, controller: AbortController): Promise<void> {
    const deploymentId = claimed.deployment_id;
    const job = jobOf(claimed, {
      id: deploymentId,
      workspace_id: claimed.workspace_id,
      name: claimed.deployment_name,
      app_slug: claimed.deployment_app_slug,
      source_config: claimed.deployment_source_config,
      tracing_project_id: claimed.tracing_project_id,
    });
    const signal = controller.signal;
    let status = claimed.status;
    const step = async (to: RevisionStatus, failure: Failure | null = null, url?: string) => {
      signal.throwIfAborted();
      await advance({
        revisionId: job.revisionId,
        status: to,
        ...(failure ? { failure } : {}),
        ...(url !== undefined ? { url } : {}),
      });
      status = to;
    };
    const heartbeat = setInterval(
      () => {
        extendRevisionLease(db, owner, job.revisionId, leaseSeconds).then(
          (held) => {
            if (!held) controller.abort(new NotOurs());
          },
          (error: unknown) =>
            logger.warn({ err: error, revisionId: job.revisionId }, 'could not extend a revision lease'),
        );
      },
      (leaseSeconds * 1000) / 3,
    );
    try {
      if (claimed.attempts > MAX_ATTEMPTS) {
        await step(failureStatusOf(status), {
          reason: 'worker_lost',
          message:
            `Work on this revision was started ${claimed.attempts - 1} times and each time the ` +
            `worker stopped before it finished. Redeploy it to try again.`,
        });
        return;
      }
      if (job.source === 'internal_container' || job.source === 'external_container') {
        await step('DEPLOY_FAILED', {
          reason: 'container_runtime_unavailable',
          message:
            'This machine has no container engine, so the service cannot run container images ' +
            'itself. Register a listener in your Kubernetes cluster and deploy the image there ' +
            '(source external_container with a listener_id).',
        });
        return;
      }
      if (status === 'AWAITING_BUILD' || status === 'BUILDING') {
        await inSpan('build', {}, () =>
          runtime.build(
            job,
            {
              building: () => step('BUILDING'),
              commitResolved: (sha) => reports.reportCommit(job.revisionId, sha),
            },
            signal,
          ),
        );
        await step('AWAITING_DEPLOY');
      }
      await step('DEPLOYING');
      if (job.snapshot.preview) {
        // A pull request's preview: built and sealed, it is served at its own endpoint (pinned by the
        // lifecycle when it records it DEPLOYED), never at the deployment's stable URL.
        await step('DEPLOYED');
        return;
      }
      // DEPLOYED: the deployment now serves it from here, at its stable URL, and this worker runs it.
      await inSpan('deploy', {}, () => runtime.deploy(job, signal, (customUrl) => step('DEPLOYED', null, customUrl)));
      await pruneBuilds({ db, runtime, logger }, deploymentId);
    } catch (error) {
      if (error instanceof RevisionFailure) {
        await step(error.status, { reason: error.reason, message: error.message }).catch((e: unknown) => {
          if (!(e instanceof NotOurs)) throw e;
        });
      } else if (error instanceof NotOurs || signal.aborted) {
        logger.info({ revisionId: job.revisionId }, 'revision work stopped: interrupted, deleted or taken over');
      } else {
        logger.error({ err: error, revisionId: job.revisionId }, 'revision work failed unexpectedly');
        await step(failureStatusOf(status), {
          reason: 'internal_error',
          message:
            `The data plane failed unexpectedly (${error instanceof Error ? error.message : String(error)}). ` +
            `Redeploy to try again; the service log has details.`,
        }).catch(() => undefined);
      }
      const current = await getRevisionStatus(db, job.revisionId);
      // Only a revision that ended without running loses its files: a DEPLOYED one serves from them (it
      // failed after its commit), and one still under way keeps them.
      if (!stopping() && (current === undefined || NOT_TO_RUN.has(current)))
        await runtime
          .removeRevisionFiles(job.revisionId)
          .catch((error: unknown) =>
            logger.error({ err: error, revisionId: job.revisionId }, 'could not remove the files of a revision'),
          );
    } finally {
      clearInterval(heartbeat);
      // On stop, an unfinished revision's lease is let go so that the next worker takes it over at once.
      await releaseRevisionLease(db, job.revisionId).catch((error: unknown) =>
        logger.warn({ err: error }, 'could not release a revision lease'),
      );
    }
  }

  /**
   * The next revision to work on, its lease taken; a QUEUED one is reported at its first working
   * status. One superseded or interrupted since the claim is skipped (the next one is claimed).
   */
  async function claimNext(): Promise<ClaimedRevision | undefined> {
    for (;;) {
      const claimed = await db.transaction().execute((tx) => claimRevision(tx, owner, leaseSeconds));
      if (!claimed || claimed.status !== 'QUEUED') return claimed;
      const to: RevisionStatus =
        claimed.source === 'internal_container' || claimed.source === 'external_container'
          ? 'AWAITING_DEPLOY'
          : 'AWAITING_BUILD';
      try {
        await advance({ revisionId: claimed.id, status: to });
        return { ...claimed, status: to };
      } catch (error) {
        if (!(error instanceof NotOurs)) throw error;
        await releaseRevisionLease(db, claimed.id, owner);
      }
    }
  }

  return { run, claimNext };
}
