/**
 * Adoption: the worker starting again the apps that should run here and nobody runs (after a restart,
 * or when another worker's runner lease ended). A start waits for its app's health check (up to a
 * minute), so adoption runs beside the worker's pass, never inside it: it holds up no claim of a
 * revision and no deletion. At most ADOPT_CONCURRENCY start at once, taken in turn from each
 * workspace, so that one tenant's hanging apps do not hold back every other tenant's.
 */
import type { Kysely } from 'kysely';
import type { Logger } from 'pino';
import type { DataPlaneReports } from '../domain/data-plane.ts';
import { activeRevisionsOf } from '../store/revisions.ts';
import type { Database, RevisionRow } from '../store/schema.ts';
import { claimRunnableDeployments, type LeaseOwner } from '../store/work-leases.ts';
import type { LocalRuntime, RevisionJob } from './local-runtime.ts';

/** Deployments started again at once (each waits for its health check). */
const ADOPT_CONCURRENCY = 4;
/** Deployments claimed for adoption in one pass. */
const CLAIMED_PER_PASS = 10;

/** Deployments in turns by workspace: the first of each workspace, then the second of each, and so on. */
export function fairOrder<T extends { workspace_id: string }>(items: T[]): T[] {
  const byWorkspace = new Map<string, T[]>();
  for (const item of items) byWorkspace.set(item.workspace_id, [...(byWorkspace.get(item.workspace_id) ?? []), item]);
  const lists = [...byWorkspace.values()];
  const out: T[] = [];
  for (let i = 0; out.length < items.length; i++) for (const list of lists) if (list[i]) out.push(list[i]!);
  return out;
}

/** The runtime's job for a revision of a deployment. */
export function jobOf(revision: RevisionRow, deployment: RevisionJob['deployment']): RevisionJob {
  return {
    revisionId: revision.id,
    source: revision.source,
    config: revision.source_revision_config,
    snapshot: revision.snapshot,
    secrets: revision.secrets,
    deployment,
  };
}

export interface AdoptionDeps {
  db: Kysely<Database>;
  runtime: LocalRuntime;
  reports: DataPlaneReports;
  logger: Logger;
  owner: LeaseOwner;
  leaseSeconds: number;
  /** True once the worker stops: no new start begins. */
  stopping: () => boolean;
}

export interface Adoption {
  /** Starts a pass in the background, unless one runs. */
  inBackground(): void;
  /** Deployments being started again, until their health check ends (their runner lease is kept). */
  resuming(): string[];
  /** Resolves when the pass that runs (if any) has ended. */
  settled(): Promise<void>;
}

export function createAdoption(deps: AdoptionDeps): Adoption {
  const { db, runtime, reports, logger, owner, leaseSeconds, stopping } = deps;
  const resuming = new Set<string>();
  let adopting: Promise<void> | null = null;

  async function adopt(): Promise<void> {
    const claimed = await db
      .transaction()
      .execute((tx) => claimRunnableDeployments(tx, owner, leaseSeconds, CLAIMED_PER_PASS));
    const toStart = fairOrder(
      claimed.filter((deployment) => !runtime.running().includes(deployment.id) && !resuming.has(deployment.id)),
    );
    if (toStart.length === 0) return;
    // Every active revision with its deployment's source config in one query, not two per deployment.
    const revisions = await activeRevisionsOf(
      db,
      toStart.map((deployment) => deployment.id),
    );
    const activeRevisionOf = new Map(revisions.map((revision) => [revision.deployment_id, revision]));
    const queue = [...toStart];
    const startNext = async (): Promise<void> => {
      for (let deployment = queue.shift(); deployment && !stopping(); deployment = queue.shift()) {
        const revision = activeRevisionOf.get(deployment.id);
        if (!revision) continue;
        resuming.add(deployment.id);
        try {
          await resumeOne(deployment, revision);
        } finally {
          resuming.delete(deployment.id);
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(ADOPT_CONCURRENCY, queue.length) }, startNext));
  }

  async function resumeOne(
    deployment: Awaited<ReturnType<typeof claimRunnableDeployments>>[number],
    revision: Awaited<ReturnType<typeof activeRevisionsOf>>[number],
  ): Promise<void> {
    logger.info({ deploymentId: deployment.id, revisionId: revision.id }, 'starting a deployment that should run here');
    try {
      await runtime.resume(
        jobOf(revision, {
          id: deployment.id,
          workspace_id: deployment.workspace_id,
          name: deployment.name,
          app_slug: deployment.app_slug,
          source_config: revision.deployment_source_config,
          tracing_project_id: deployment.tracing_project_id,
        }),
      );
    } catch (error) {
      logger.error({ err: error, deploymentId: deployment.id }, 'could not start a deployment again');
      await reports.reportCondition({
        deploymentId: deployment.id,
        condition: 'restart_failed',
        data: {
          revision_id: revision.id,
          message: `Its active revision could not be started again: ${error instanceof Error ? error.message : String(error)}`,
        },
      });
    }
  }

  return {
    inBackground() {
      if (adopting || stopping()) return;
      adopting = adopt()
        .catch((error: unknown) => logger.error({ err: error }, 'starting deployments that should run here failed'))
        .finally(() => {
          adopting = null;
        });
    },
    resuming: () => [...resuming],
    async settled() {
      await adopting;
    },
  };
}
