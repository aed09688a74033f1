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
 *
 * This module schedules; the work is done by its concerns' modules: a revision's work
 * (src/dataplane/revision-work.ts), deletions (deployment-deletions.ts), the running apps' specs and
 * endpoints (running-app-upkeep.ts).
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Kysely } from 'kysely';
import type { Logger } from 'pino';
import type { ChangeFeed } from '../db/change-feed.ts';
import type { OwnPlaneReports, Worker } from '../domain/data-plane.ts';
import { isFinalRevisionStatus } from '../domain/states.ts';
import { previewPullRequestOf } from '../store/revisions.ts';
import type { Database } from '../store/schema.ts';
import { extendRunnerLeases, type LeaseOwner } from '../store/work-leases.ts';
import { inRootSpan, noTracing, type Tracing } from '../telemetry/tracing.ts';
import { createAdoption } from './adoption.ts';
import { createDeploymentDeletions } from './deployment-deletions.ts';
import type { LocalRuntime } from './local-runtime.ts';
import { createRevisionWork, NotOurs } from './revision-work.ts';
import { applyEndpoints, applyResourceSpecs } from './running-app-upkeep.ts';

export type { Worker };

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
  const work = createRevisionWork({ db, runtime, reports, logger, owner, leaseSeconds, stopping: () => stopping });
  const deletions = createDeploymentDeletions({ db, runtime, reports, logger, owner, leaseSeconds, stopWorkOf });
  const apps = { db, runtime, reports, logger, owner };

  /**
   * Stops the work on a deployment's revisions, and waits until it has stopped: a build or a start under
   * way has processes that write its directories (docs/data-plane.md).
   */
  async function stopWorkOf(deploymentId: string): Promise<void> {
    const running = [...jobs.values()].filter((job) => job.deploymentId === deploymentId);
    for (const job of running) job.controller.abort(new NotOurs());
    await Promise.all(running.map((job) => job.done));
  }

  async function pumpRevisions(): Promise<void> {
    while (!stopping && jobs.size < deps.concurrency) {
      const claimed = await work.claimNext();
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
        () => work.run(claimed, controller),
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

  async function pump(): Promise<void> {
    await pumpRevisions();
    while (!stopping && (await deletions.deleteOne()));
    adoption.inBackground();
    if (!stopping) await applyResourceSpecs(apps);
    if (!stopping) await applyEndpoints(apps);
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
