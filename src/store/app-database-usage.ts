/**
 * How much space a deployment's own database takes, and what of it is LangGraph's state (the schema
 * `langgraph` that runtime/langgraph-server.mjs keeps: threads, runs, checkpoints, the store...).
 *
 * Everything inside the app's database is the app's: its code may have replaced a table by a view over
 * a function of its own, or put row-level security on it. So these queries run on a connection as the
 * app's own role (appDatabaseClient), where such code can do nothing the app could not do already; the
 * service's role, a superuser on the embedded server, never reads the app's tables.
 */
import type pg from 'pg';

/** The schema runtime/langgraph-server.mjs keeps LangGraph's state in. */
export const LANGGRAPH_SCHEMA = 'langgraph';

/** Counting rows reads the whole table: past this, the planner's estimate is given instead. */
const COUNT_TIMEOUT_MS = 3_000;

export interface TableUsage {
  name: string;
  rows: number;
  /** True when `rows` is the planner's estimate (a count took too long, or the table is unreadable). */
  rows_estimated: boolean;
  /** The table with its indexes and TOAST. */
  size_bytes: number;
}

export interface LangGraphTtl {
  checkpointer: { strategy: 'delete'; default_ttl: number; sweep_interval_minutes: number } | null;
  store: { default_ttl: number; refresh_on_read: boolean; sweep_interval_minutes: number } | null;
  recorded_at: string;
}

export interface LangGraphUsage {
  size_bytes: number;
  tables: TableUsage[];
  /** Null when no instance recorded them (a launcher from before they were recorded). */
  ttl: LangGraphTtl | null;
}

/** The size of the app's database, as the service sees it (null when it no longer exists). */
export async function databaseSize(client: pg.ClientBase, name: string): Promise<number | null> {
  const result = await client.query<{ size: string }>(
    'select pg_catalog.pg_database_size(datname)::text as size from pg_catalog.pg_database where datname = $1',
    [name],
  );
  const row = result.rows[0];
  return row === undefined ? null : Number(row.size);
}

/**
 * LangGraph's tables in the app's database, or null when it has none (not a LangGraph deployment, or
 * one whose server has not started yet). `client` is connected as the app's role to its database.
 */
export async function langGraphUsage(client: pg.ClientBase): Promise<LangGraphUsage | null> {
  const tables = await client.query<{ name: string; estimate: string; size: string }>(
    `select c.relname as name, greatest(c.reltuples, 0)::bigint::text as estimate,
            pg_catalog.pg_total_relation_size(c.oid)::text as size
       from pg_catalog.pg_class c join pg_catalog.pg_namespace n on n.oid = c.relnamespace
      where n.nspname = $1 and c.relkind in ('r', 'p')
      order by c.relname`,
    [LANGGRAPH_SCHEMA],
  );
  if (tables.rows.length === 0) return null;
  const usage: TableUsage[] = [];
  for (const table of tables.rows) {
    const counted = await countRows(client, table.name);
    usage.push({
      name: table.name,
      rows: counted ?? Number(table.estimate),
      rows_estimated: counted === null,
      size_bytes: Number(table.size),
    });
  }
  return {
    size_bytes: usage.reduce((sum, table) => sum + table.size_bytes, 0),
    tables: usage,
    ttl: usage.some((table) => table.name === 'settings') ? await recordedTtl(client) : null,
  };
}

/** An exact count, or null when it takes too long or fails (the table is the app's to break). */
async function countRows(client: pg.ClientBase, table: string): Promise<number | null> {
  const name = `${client.escapeIdentifier(LANGGRAPH_SCHEMA)}.${client.escapeIdentifier(table)}`;
  // A savepoint, so that a failed count leaves the transaction usable for the next one.
  await client.query('savepoint count_rows');
  try {
    await client.query(`set local statement_timeout = ${COUNT_TIMEOUT_MS}`);
    const result = await client.query<{ rows: string }>(`select count(*)::text as rows from ${name}`);
    await client.query('release savepoint count_rows');
    return Number(result.rows[0]?.rows ?? 0);
  } catch {
    // Too slow or unreadable: the caller gives the planner's estimate and says so (rows_estimated).
    await client.query('rollback to savepoint count_rows');
    return null;
  }
}

const positive = (value: unknown): number | null =>
  typeof value === 'number' && Number.isFinite(value) && value > 0 ? value : null;

/**
 * The TTLs the last instance to start recorded. The row is written by code running in the app, so its
 * shape is checked, not trusted: what is not a TTL as the launcher writes it reads as none.
 */
async function recordedTtl(client: pg.ClientBase): Promise<LangGraphTtl | null> {
  await client.query('savepoint read_ttl');
  let row: { value: unknown; updated_at: Date } | undefined;
  try {
    const result = await client.query<{ value: unknown; updated_at: Date }>(
      `select value, updated_at from ${client.escapeIdentifier(LANGGRAPH_SCHEMA)}.settings where name = 'ttl'`,
    );
    row = result.rows[0];
    await client.query('release savepoint read_ttl');
  } catch {
    // The app changed the table: its TTLs are unknown, which the answer says with null.
    await client.query('rollback to savepoint read_ttl');
    return null;
  }
  if (row === undefined || typeof row.value !== 'object' || row.value === null) return null;
  const { checkpointer, store } = row.value as Record<string, Record<string, unknown> | null | undefined>;
  const checkpointerTtl = checkpointer ? positive(checkpointer.default_ttl) : null;
  const checkpointerSweep = checkpointer ? positive(checkpointer.sweep_interval_minutes) : null;
  const storeTtl = store ? positive(store.default_ttl) : null;
  const storeSweep = store ? positive(store.sweep_interval_minutes) : null;
  return {
    checkpointer:
      checkpointerTtl !== null && checkpointerSweep !== null
        ? { strategy: 'delete', default_ttl: checkpointerTtl, sweep_interval_minutes: checkpointerSweep }
        : null,
    store:
      storeTtl !== null && storeSweep !== null
        ? {
            default_ttl: storeTtl,
            refresh_on_read: store?.refresh_on_read !== false,
            sweep_interval_minutes: storeSweep,
          }
        : null,
    recorded_at: new Date(row.updated_at).toISOString(),
  };
}
