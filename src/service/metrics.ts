/**
 * What `GET /metrics` reads from the database when scraped (src/routes/metrics.ts keeps the registry
 * and the HTTP counters): read then, in one query, so the gauges are always true and cost nothing
 * between scrapes.
 */
import type { Kysely } from 'kysely';
import type { Clock } from '../clock.ts';
import { readDatabaseGauges, type DatabaseGauges } from '../store/metrics.ts';
import type { Database } from '../store/schema.ts';

export type { DatabaseGauges };

export interface MetricsServiceDeps {
  db: Kysely<Database>;
  /** What listener states and the queue's age go by (src/store/metrics.ts); the database's `now()` when absent. */
  now?: Clock;
}

export function createMetricsService({ db, now }: MetricsServiceDeps) {
  return {
    /** Deployments and revisions by status, listeners by state, the local work queue. */
    databaseGauges: (): Promise<DatabaseGauges> => readDatabaseGauges(db, now),
  };
}

export type MetricsService = ReturnType<typeof createMetricsService>;
