/**
 * What `GET /metrics` reads from the database when scraped (src/routes/metrics.ts keeps the registry
 * and the HTTP counters): read then, in one query, so the gauges are always true and cost nothing
 * between scrapes.
 */
import type { Kysely } from 'kysely';
import { readDatabaseGauges, type DatabaseGauges } from '../store/metrics.ts';
import type { Database } from '../store/schema.ts';

export type { DatabaseGauges };

export interface MetricsServiceDeps {
  db: Kysely<Database>;
}

export function createMetricsService({ db }: MetricsServiceDeps) {
  return {
    /** Deployments and revisions by status, listeners by state, the local work queue. */
    databaseGauges: (): Promise<DatabaseGauges> => readDatabaseGauges(db),
  };
}

export type MetricsService = ReturnType<typeof createMetricsService>;
