/**
 * The gauges of `GET /metrics` that come from the database, in one query: deployments and revisions by
 * status, listeners by state, and the local data plane's work queue.
 */
import { sql } from 'kysely';
import type { Clock } from '../clock.ts';
import { listenerStateSql } from './listeners.ts';
import type { Db } from './schema.ts';
import { sqlNow } from './sql-now.ts';

export interface DatabaseGauges {
  listeners: { status: string; n: number }[];
  deployments: { status: string; n: number }[];
  revisions: { status: string; n: number }[];
  queue: { depth: number; oldest_seconds: number | null };
}

/**
 * Listener states and the queue's age go by the database's `now()`, or by `clock` (the service's,
 * src/clock.ts) when given one: the same time src/store/listeners.ts judges a listener by.
 */
export async function readDatabaseGauges(db: Db, clock?: Clock): Promise<DatabaseGauges> {
  const now = sqlNow(clock);
  const listenerState = listenerStateSql(clock);
  const result = await sql<{ kind: string; status: string | null; n: number; oldest_seconds: number | null }>`
    select 'deployment' as kind, status, count(*)::int as n, null::float8 as oldest_seconds
      from deployments group by status
    union all
    select 'revision', status, count(*)::int, null from revisions group by status
    union all
    select 'listener', ${listenerState}, count(*)::int, null
      from listeners group by 2
    union all
    select 'queue', null, count(*)::int, extract(epoch from ${now} - min(r.created_at))::float8
      from revisions r join deployments d on d.id = r.deployment_id
      where r.status = 'QUEUED' and d.listener_id is null`.execute(db);
  const rows = result.rows;
  const queue = rows.find((r) => r.kind === 'queue');
  const of = (kind: string) =>
    rows.filter((r) => r.kind === kind).map((r) => ({ status: r.status ?? 'UNKNOWN', n: r.n }));
  return {
    listeners: of('listener'),
    deployments: of('deployment'),
    revisions: of('revision'),
    queue: { depth: queue?.n ?? 0, oldest_seconds: queue?.oldest_seconds ?? null },
  };
}
