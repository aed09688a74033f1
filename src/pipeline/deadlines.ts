/**
 * Deadlines: no revision stays in a non-final state forever (docs/lifecycle.md). Overdue
 * revisions are claimed with FOR UPDATE SKIP LOCKED, so several replicas sweeping at once never move
 * the same revision twice, and moved to their state's failure with reason `deadline_exceeded`.
 */
import type { Kysely } from 'kysely';
import type { Logger } from 'pino';
import { REVISION_STATES, type RevisionStatus } from '../domain/states.ts';
import type { Database } from '../store/schema.ts';
import { startPeriodic, type Periodic } from './periodic.ts';
import { endRevisionsLeftFor, transitionRevision } from '../service/lifecycle.ts';
import { lockDeploymentById } from '../store/deployments.ts';
import { lockRevision } from '../store/revisions.ts';
import { systemClock, type Clock } from '../clock.ts';

const WITH_DEADLINE = (
  Object.entries(REVISION_STATES) as [RevisionStatus, (typeof REVISION_STATES)[RevisionStatus]][]
).filter(([, state]) => state.deadline !== null && state.onDeadline !== null);

/**
 * Moves up to `batch` overdue revisions to their failure state; returns how many moved. A moved revision
 * that the data planes were working toward ends the older ones left waiting for it
 * (`endRevisionsLeftFor`), each deployment in a transaction of its own that takes the deployment's lock
 * before its revisions', as every writer does.
 */
export async function expireOverdueRevisions(db: Kysely<Database>, now: Date, batch = 100): Promise<number> {
  const moved = await expireBatch(db, now, batch);
  for (const revision of moved) {
    await db.transaction().execute(async (tx) => {
      const deployment = await lockDeploymentById(tx, revision.deployment_id);
      const ended = deployment ? await lockRevision(tx, revision.id) : undefined;
      if (deployment && ended) await endRevisionsLeftFor(tx, deployment, ended);
    });
  }
  return moved.length;
}

async function expireBatch(db: Kysely<Database>, now: Date, batch: number) {
  return db.transaction().execute(async (tx) => {
    const overdue = await tx
      .selectFrom('revisions')
      .select(['id', 'workspace_id', 'deployment_id', 'status'])
      .where((eb) =>
        eb.or(
          WITH_DEADLINE.map(([status, state]) =>
            eb.and([
              eb('status', '=', status),
              eb('status_changed_at', '<', new Date(now.getTime() - state.deadline! * 1000)),
            ]),
          ),
        ),
      )
      .orderBy('status_changed_at')
      .limit(batch)
      .forUpdate()
      .skipLocked()
      .execute();
    for (const revision of overdue) {
      const state = REVISION_STATES[revision.status];
      await transitionRevision(tx, revision, state.onDeadline!, {
        reason: 'deadline_exceeded',
        message: `The revision stayed in ${revision.status} longer than ${state.deadline! / 60} minutes.`,
      });
    }
    return overdue;
  });
}

/** Sweeps every `intervalMs`; `now` is injectable so tests control the clock. */
export function startDeadlineSweeper(options: {
  db: Kysely<Database>;
  logger: Logger;
  intervalMs: number;
  now?: Clock;
}): Periodic {
  const { db, logger, intervalMs, now = systemClock } = options;
  return startPeriodic({
    name: 'deadline sweep',
    intervalMs,
    logger,
    async run() {
      let moved: number;
      do {
        // Each batch is one transaction: a failed one rolls back and the next run retries.
        moved = await expireOverdueRevisions(db, now());
        if (moved > 0) logger.info({ moved }, 'revisions past their deadline moved to failure');
      } while (moved > 0);
    },
  });
}
