/**
 * The worker of the own data plane: it runs local revisions (deployments without a listener) on this
 * machine, as a listener agent runs its cluster's. Work is claimed from the revision table with a
 * lease (src/store/work-leases.ts); a change anywhere wakes the worker through the change feed, with a
 * slow poll as the safety net. What happens is reported through the data-plane reports
 * (src/domain/data-plane.ts), the operations a listener reaches through the listener protocol, called
 * here in process: the lifecycle (src/service/lifecycle.ts) applies a report only while this worker
 * still holds the revision's lease, so a revision interrupted by a user, or taken over after a lost
 * lease, is never written over. This module writes no state of its own but leases.
 *
 * Besides revisions, the worker starts the apps that should run here and nobody runs (adoption after a
 * restart, src/dataplane/adoption.ts), applies a changed resource spec to the apps it runs (in place, without a revision), keeps
 * its runner leases, re-checks crash-looping apps, and tears deleted deployments down.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Kysely } from 'kysely';
import type { Logger } from 'pino';
import type { ChangeFeed } from '../db/change-feed.ts';
import type { OwnPlaneReports, RevisionReport, Worker } from '../domain/data-plane.ts';
import { NOT_TO_RUN, desiredResourceSpec, servingRevisionId } from '../domain/desired-state.ts';
import { isFinalRevisionStatus, type RevisionStatus } from '../domain/states.ts';
import { AppError } from '../errors.ts';
import { getRevisionStatus, previewPullRequestOf, revisionStatusesOf } from '../store/revisions.ts';
import type { Database } from '../store/schema.ts';
import { createAdoption, jobOf } from './adoption.ts';
import type { EndpointOutcome, LocalRuntime } from './local-runtime.ts';
import { endpointWants } from './endpoint-wants.ts';
import { pruneBuilds } from './build-pruning.ts';
import { RevisionFailure } from './revision-build.ts';
import {
  claimDeploymentToDelete,
  claimRevision,
  extendRevisionLease,
  extendRunnerLeases,
  releaseRevisionLease,
  runnerDeployments,
  setRunner,
  type ClaimedRevision,
  type LeaseOwner,
} from '../store/work-leases.ts';
import { inRootSpan, inSpan, noTracing, type Tracing } from '../telemetry/tracing.ts';

export type { Worker };

/** A revision whose work was started this many times (takeovers included) fails with `worker_lost`. */
const MAX_ATTEMPTS = 3;

export interface WorkerDeps {
  db: Kysely<Database>;
  runtime: LocalRuntime;
  /** This worker's reports (the lifecycle's, as this lease owner). */
  reports: OwnPlaneReports;
  changes: ChangeFeed;
  logger: Logger;
  owner: LeaseOwner;
  concurrency: number;
  leaseSeconds?: number;
  /** A span per revision's work, with its steps (src/telemetry/tracing.ts); none when absent. */
  tracing?: Tracing;
}

/** Safety-net poll when no notification comes. */
const POLL_MS = 5_000;
/** How long a deletion whose teardown failed first waits before it is tried again... */
const DEFERRED_DELETION_MS = 60_000;
/** ... and at the most, after failing again and again (the wait doubles each time). */
const DEFERRED_DELETION_MAX_MS = 30 * 60_000;

/** The worker's identity: a node id kept in the data directory, plus this process. */
export async function leaseOwnerFor(dataDir: string): Promise<LeaseOwner> {
  const file = path.join(dataDir, 'node-id');
  let nodeId = (await fs.readFile(file, 'utf8').catch(() => '')).trim();
  if (!/^[0-9a-f]{16}$/.test(nodeId)) {
    nodeId = randomBytes(8).toString('hex');
    await fs.mkdir(dataDir, { recursive: true, mode: 0o700 });
    await fs.writeFile(file, nodeId, { mode: 0o600 });
  }
  return { id: `${nodeId}/${process.pid}-${randomBytes(3).toString('hex')}`, nodePrefix: `${nodeId}/` };
}

/** Thrown inside a job when the revision is no longer this worker's to move. */
class NotOurs extends Error {}

const failureStatusOf = (status: RevisionStatus): 'BUILD_FAILED' | 'DEPLOY_FAILED' =>
  status === 'AWAITING_BUILD' || status === 'BUILDING' ? 'BUILD_FAILED' : 'DEPLOY_FAILED';

type Failure = { reason: string; message: string };

export function startWorker(deps: WorkerDeps): Worker {
  const { db, runtime, reports, changes, logger, owner } = deps;
  const leaseSeconds = deps.leaseSeconds ?? 30;
  /** The running jobs by revision; `preview`: the pull request of a preview's, null for the deployment's own. */
  const jobs = new Map<
    string,
    { deploymentId: string; preview: number | null; controller: AbortController; done: Promise<void> }
  >();
  let stopping = false;
  let pumping: Promise<void> | null = null;
  let again = false;
  const adoption = createAdoption({ db, runtime, reports, logger, owner, leaseSeconds, stopping: () => stopping });

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
      if (!stopping && (current === undefined || NOT_TO_RUN.has(current)))
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

  async function pumpRevisions(): Promise<void> {
    while (!stopping && jobs.size < deps.concurrency) {
      const claimed = await claimNext();
      if (!claimed) return;
      const controller = new AbortController();
      const done = inRootSpan(
        deps.tracing ?? noTracing,
        'revision',
        {
          'slipway.deployment.id': claimed.deployment_id,
          'slipway.revision.id': claimed.id,
          'slipway.workspace.id': claimed.workspace_id,
        },
        () => run(claimed, controller),
      )
        .catch((error: unknown) => logger.error({ err: error, revisionId: claimed.id }, 'revision job crashed'))
        .finally(() => {
          jobs.delete(claimed.id);
          wake();
        });
      jobs.set(claimed.id, {
        deploymentId: claimed.deployment_id,
        preview: claimed.preview_pull_request,
        controller,
        done,
      });
    }
  }

  /**
   * Scales the apps whose runner lease this worker holds to their deployment's resource spec. Not
   * awaited: a slow health check holds up no other work (the next pass retries what was skipped).
   */
  async function applyResourceSpecs(): Promise<void> {
    for (const deployment of await runnerDeployments(db, owner, runtime.running())) {
      // What serves and with which spec: the one rule's, as a listener reads it in its desired state.
      const serving = servingRevisionId(deployment);
      if (serving === null) continue;
      const deploymentId = deployment.id;
      void runtime
        .rescale(deploymentId, serving, desiredResourceSpec(deployment))
        .catch((error: unknown) =>
          logger.error({ err: error, deploymentId }, 'could not apply a changed resource spec'),
        );
    }
  }

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
    const running = [...jobs.values()].filter((job) => job.deploymentId === target.id);
    for (const job of running) job.controller.abort(new NotOurs());
    await Promise.all(running.map((job) => job.done));
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

  /**
   * Serves the endpoints of the deployments this worker runs (docs/app-urls.md, "Endpoints"). Not
   * awaited, as resource specs: a start waits for a health check; the runtime runs one pass per
   * deployment at a time and the latest request after it.
   */
  async function applyEndpoints(): Promise<void> {
    const running = runtime.running();
    if (running.length === 0) return;
    const wants = await endpointWants(db, running);
    for (const deploymentId of running) {
      const { wanted, marked, markedSplits } = wants.get(deploymentId)!;
      void runtime
        .serveEndpoints(deploymentId, wanted, (outcome) =>
          reportEndpoint(deploymentId, outcome, outcome.split ? markedSplits : marked),
        )
        .catch((error: unknown) => logger.error({ err: error, deploymentId }, 'could not serve endpoints'));
    }
  }

  /** Says what became of an endpoint's start: its served revision, and an event (the lifecycle records both). */
  async function reportEndpoint(
    deploymentId: string,
    outcome: EndpointOutcome,
    marked: Map<string, string | null>,
  ): Promise<void> {
    const recordedRevisionId = marked.get(outcome.endpoint) ?? null;
    await reports.reportEndpoint(
      outcome.served
        ? {
            ...(outcome.split ? { split: outcome.split } : {}),
            deploymentId,
            endpoint: outcome.endpoint,
            revisionId: outcome.revisionId,
            recordedRevisionId,
            served: true,
            fromRevisionId: outcome.fromRevisionId,
          }
        : {
            ...(outcome.split ? { split: outcome.split } : {}),
            deploymentId,
            endpoint: outcome.endpoint,
            revisionId: outcome.revisionId,
            recordedRevisionId,
            served: false,
            message: outcome.message,
          },
    );
  }

  async function pump(): Promise<void> {
    await pumpRevisions();
    while (!stopping && (await deleteOne()));
    adoption.inBackground();
    if (!stopping) await applyResourceSpecs();
    if (!stopping) await applyEndpoints();
  }

  function wake(): void {
    if (stopping) return;
    if (pumping) {
      again = true;
      return;
    }
    pumping = pump()
      .catch((error: unknown) => logger.error({ err: error }, 'worker pass failed; the next wake-up retries'))
      .finally(() => {
        pumping = null;
        if (again) {
          again = false;
          wake();
        }
      });
  }

  const unsubscribe = changes.subscribe((change) => {
    if (change.kind === 'revision' && isFinalRevisionStatus(change.status)) {
      // Interrupted (or moved on by someone else): stop working on it at once.
      jobs.get(change.revision_id)?.controller.abort(new NotOurs());
    }
    if (change.kind === 'revision' && change.status === 'QUEUED') {
      // A newer revision is the deployment's target now (src/domain/desired-state.ts): work on an older
      // one stops, and the newer one's first step ends it, as a listener's does; a preview's only older
      // work on its pull request, and the deployment's own never a preview's (previewWorkRevisionIds).
      const { deployment_id: deploymentId, revision_id: queued } = change;
      void previewPullRequestOf(db, queued)
        .then((preview) => {
          for (const [revisionId, job] of jobs)
            if (job.deploymentId === deploymentId && job.preview === preview && revisionId !== queued)
              job.controller.abort(new NotOurs());
        })
        .catch((error: unknown) => logger.warn({ err: error }, 'could not read a queued revision'));
    }
    if (change.kind === 'deployment' && change.status === 'AWAITING_DELETE') {
      for (const [, job] of jobs) if (job.deploymentId === change.deployment_id) job.controller.abort(new NotOurs());
    }
    if (change.kind !== 'log') wake();
  });

  const poll = setInterval(wake, POLL_MS);
  poll.unref();
  const runnerBeat = setInterval(
    () => {
      void (async () => {
        const running = runtime.running();
        // Those being started again keep their lease too (a start may outlast it).
        await extendRunnerLeases(db, owner, adoption.resuming(), leaseSeconds);
        const held = new Set(await extendRunnerLeases(db, owner, running, leaseSeconds));
        // Another worker runs these now (it deployed a newer revision, or took ours over): stop ours.
        for (const id of running) if (!held.has(id)) await runtime.stop(id);
        await runtime.check();
      })().catch((error: unknown) => logger.warn({ err: error }, 'runner heartbeat failed'));
    },
    (leaseSeconds * 1000) / 3,
  );
  runnerBeat.unref();
  wake();

  return {
    async stop() {
      stopping = true;
      unsubscribe();
      clearInterval(poll);
      clearInterval(runnerBeat);
      for (const [, job] of jobs) job.controller.abort(new NotOurs());
      await Promise.all([...jobs.values()].map((job) => job.done));
      await pumping;
      await adoption.settled();
      await runtime.close();
    },
  };
}
