/**
 * The automatic rollback of traffic splits (docs/app-urls.md, "Automatic rollback"). In the process that
 * runs the app edge, every CHECK_INTERVAL_MS: for each endpoint whose split carries `rollback` and whose
 * second revision the data plane serves, the edge's series per revision (src/dataplane/traffic-series.ts)
 * give both revisions' requests, 5xx (the app's and the edge's own failures for it) and p99 over the
 * window, counted from the split's start at most (the clock); when the second revision is worse by more
 * than the margin (src/domain/endpoint-splits.ts, rollbackVerdict), the split is taken back through the
 * split service, the one writer of splits, with an event naming the numbers.
 *
 * What it cannot promise: each replica judges from its own edge's numbers (the first to decide ends the
 * split); the series live in memory, so a restart starts the window again; and the check runs every
 * CHECK_INTERVAL_MS, so a bad revision has that long, plus the time to reach min_requests, to do harm.
 */
import type { Kysely } from 'kysely';
import type { Logger } from 'pino';
import { systemClock, type Clock } from '../clock.ts';
import { BUCKET_SECONDS, type SeriesOfRoute, type TrafficSeries } from '../dataplane/traffic-series.ts';
import { endpointLabel } from '../domain/endpoints.ts';
import { rollbackVerdict, type RevisionNumbers } from '../domain/endpoint-splits.ts';
import type { Database } from '../store/schema.ts';
import type { SplitService } from './endpoint-splits.ts';

export const CHECK_INTERVAL_MS = 10_000;

export interface SplitRollbackMonitorDeps {
  db: Kysely<Database>;
  splits: Pick<SplitService, 'rollBack'>;
  /** The series of this process's app edge; null where it runs none. */
  traffic: () => TrafficSeries | null;
  logger: Logger;
  now?: Clock;
}

function numbersOf(series: SeriesOfRoute | undefined): RevisionNumbers {
  if (series === undefined) return { requests: 0, serverErrors: 0, p99: null };
  const { total } = series;
  return { requests: total.requests, serverErrors: total.errors['5xx'] + total.errors.edge, p99: total.latency.p99 };
}

export function createSplitRollbackMonitor(deps: SplitRollbackMonitorDeps) {
  const { db, logger } = deps;
  const now = deps.now ?? systemClock;
  let timer: NodeJS.Timeout | null = null;
  let running: Promise<number> | null = null;

  /** One pass over the splits with a rollback: answers how many were taken back. */
  async function check(): Promise<number> {
    const traffic = deps.traffic();
    if (traffic === null) return 0;
    const rows = await db
      .selectFrom('deployment_endpoints as e')
      .innerJoin('deployments as d', 'd.id', 'e.deployment_id')
      .select([
        'e.deployment_id',
        'e.name',
        'e.revision_id',
        'e.split_revision_id',
        'e.split_rollback',
        'e.split_started_at',
        'e.split_served_revision_id',
        'd.app_slug',
      ])
      .where('e.split_rollback', 'is not', null)
      .where('d.listener_id', 'is', null)
      .execute();
    let rolledBack = 0;
    for (const row of rows) {
      const settings = row.split_rollback;
      if (settings === null || row.split_revision_id === null || row.split_started_at === null) continue;
      // Not yet served: the endpoint's revision has all the traffic, there is nothing to judge.
      if (row.split_served_revision_id !== row.split_revision_id) continue;
      const since = Math.max(0, (now().getTime() - row.split_started_at.getTime()) / 1000);
      const buckets = Math.ceil(Math.min(settings.window_seconds, since) / BUCKET_SECONDS) + 1;
      const windowSeconds = Math.min(buckets * BUCKET_SECONDS, 3600);
      const found = traffic.query([endpointLabel(row.app_slug, row.name)], windowSeconds, windowSeconds);
      const base = numbersOf(found.find((s) => s.revisionId === row.revision_id));
      const split = numbersOf(found.find((s) => s.revisionId === row.split_revision_id));
      const verdict = rollbackVerdict(base, split, settings);
      if (verdict === null) continue;
      const done = await deps.splits.rollBack(
        row.deployment_id,
        row.name,
        { splitRevisionId: row.split_revision_id, startedAt: row.split_started_at },
        verdict,
      );
      if (done) {
        rolledBack += 1;
        logger.warn(
          { deploymentId: row.deployment_id, endpoint: row.name, splitRevisionId: row.split_revision_id, verdict },
          `traffic split rolled back: ${verdict.message}`,
        );
      }
    }
    return rolledBack;
  }

  /** A pass, never two at once (a pass asked for while one runs is that one). */
  function checkOnce(): Promise<number> {
    running ??= check().finally(() => {
      running = null;
    });
    return running;
  }

  return {
    check: checkOnce,
    start(intervalMs = CHECK_INTERVAL_MS): void {
      if (timer !== null) return;
      timer = setInterval(() => {
        checkOnce().catch((error: unknown) => logger.error({ err: error }, 'the split rollback check failed'));
      }, intervalMs);
      timer.unref();
    },
    async stop(): Promise<void> {
      if (timer !== null) clearInterval(timer);
      timer = null;
      await running?.catch(() => undefined);
    },
  };
}

export type SplitRollbackMonitor = ReturnType<typeof createSplitRollbackMonitor>;
