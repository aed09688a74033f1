/**
 * The own worker's pruning of build output (src/dataplane/local-worker.ts): after a deploy, the app
 * directories of a deployment's revisions that will not run again go.
 */
import type { Kysely } from 'kysely';
import type { Logger } from 'pino';
import { isFinalRevisionStatus } from '../domain/states.ts';
import { pinnedRevisionIds } from '../store/deployment-endpoints.ts';
import { activeRevisionId } from '../store/deployments.ts';
import { revisionStatusesOf } from '../store/revisions.ts';
import type { Database } from '../store/schema.ts';
import type { LocalRuntime } from './local-runtime.ts';

/** Deployed revisions whose build output is kept besides the active one, for quick rollbacks. */
const KEPT_BUILDS = 2;

/** Removes app directories of this deployment's revisions that will not run again. */
export async function pruneBuilds(
  deps: { db: Kysely<Database>; runtime: Pick<LocalRuntime, 'removeRevisionFiles'>; logger: Logger },
  deploymentId: string,
): Promise<void> {
  const { db, runtime, logger } = deps;
  const revisions = await revisionStatusesOf(db, deploymentId);
  const active = await activeRevisionId(db, deploymentId);
  const kept = new Set([
    active,
    // Endpoints serve their revisions' sealed builds: those stay while an endpoint names them.
    ...(await pinnedRevisionIds(db, deploymentId)),
    ...revisions
      .filter((r) => r.status === 'DEPLOYED' && r.id !== active)
      .slice(0, KEPT_BUILDS)
      .map((r) => r.id),
  ]);
  for (const revision of revisions) {
    // One that cannot go (its processes not confirmed gone) is kept, and said; it must not fail the
    // revision that just deployed, whose own files the failure path would then remove.
    if (!kept.has(revision.id) && isFinalRevisionStatus(revision.status))
      await runtime
        .removeRevisionFiles(revision.id)
        .catch((error: unknown) =>
          logger.error({ err: error, revisionId: revision.id }, 'could not remove the files of a revision'),
        );
  }
}
