// The schema `langgraph` in the deployment's database: the names every module uses, the changes that
// make it (langgraph.schema_version), and the TTLs of langgraph.json as the instances apply them.

export const SCHEMA = 'langgraph';
/** Executions of one run before it fails; the API's worker refuses a fourth itself. */
export const MAX_ATTEMPTS = 3;
/** The last row of a run's events: nothing follows it. */
export const END_EVENT = '__end__';
export const WAKE_CHANNEL = 'langgraph_wake';
export const EVENTS_CHANNEL = 'langgraph_events';
export const CANCEL_CHANNEL = 'langgraph_cancel';
/**
 * Where the data plane says that a revision no longer serves (payload: its id), once another one does:
 * that revision's instances take no more runs, while the requests they are still serving drain.
 */
export const REPLACED_CHANNEL = 'slipway_replaced';
/** Taken while the schema is made or changed, so instances starting together do not race. */
export const SCHEMA_LOCK = 7_301_946_225;
/** How long a finished run's events are kept for late joiners. */
export const EVENTS_KEPT = '1 hour';

/** Changes of the schema, in order; the position is the version (langgraph.schema_version). */
export const MIGRATIONS = [
  `create table ${SCHEMA}.assistants (
     assistant_id uuid primary key,
     graph_id text not null,
     name text not null,
     description text,
     config jsonb not null default '{}',
     context jsonb,
     metadata jsonb not null default '{}',
     version integer not null,
     created_at timestamptz not null default now(),
     updated_at timestamptz not null default now())`,
  `create table ${SCHEMA}.assistant_versions (
     assistant_id uuid not null references ${SCHEMA}.assistants on delete cascade,
     version integer not null,
     graph_id text not null,
     name text not null,
     description text,
     config jsonb not null default '{}',
     context jsonb,
     metadata jsonb not null default '{}',
     created_at timestamptz not null default now(),
     primary key (assistant_id, version))`,
  `create table ${SCHEMA}.threads (
     thread_id uuid primary key,
     created_at timestamptz not null default now(),
     updated_at timestamptz not null default now(),
     metadata jsonb not null default '{}',
     config jsonb not null default '{}',
     status text not null default 'idle',
     "values" jsonb,
     interrupts jsonb)`,
  `create index threads_created_at on ${SCHEMA}.threads (created_at desc)`,
  `create table ${SCHEMA}.runs (
     run_id uuid primary key,
     thread_id uuid not null references ${SCHEMA}.threads on delete cascade,
     assistant_id uuid not null,
     created_at timestamptz not null default now(),
     updated_at timestamptz not null default now(),
     status text not null,
     metadata jsonb not null default '{}',
     kwargs jsonb not null,
     multitask_strategy text not null,
     attempt integer not null default 0,
     lease_owner text,
     lease_expires_at timestamptz,
     cancel_action text,
     failure text)`,
  `create index runs_pending on ${SCHEMA}.runs (created_at) where status = 'pending'`,
  `create index runs_running on ${SCHEMA}.runs (lease_expires_at) where status = 'running'`,
  `create index runs_thread on ${SCHEMA}.runs (thread_id, created_at)`,
  `create table ${SCHEMA}.run_events (
     seq bigserial primary key,
     run_id uuid not null,
     event text not null,
     data text not null,
     normalized boolean,
     created_at timestamptz not null default now())`,
  `create index run_events_run on ${SCHEMA}.run_events (run_id, seq)`,
  `create table ${SCHEMA}.crons (
     cron_id uuid primary key,
     assistant_id uuid not null,
     thread_id uuid references ${SCHEMA}.threads on delete cascade,
     user_id text,
     schedule text not null,
     timezone text,
     payload jsonb not null default '{}',
     metadata jsonb not null default '{}',
     enabled boolean not null default true,
     on_run_completed text,
     end_time timestamptz,
     next_run_date timestamptz,
     created_at timestamptz not null default now(),
     updated_at timestamptz not null default now())`,
  `create index crons_due on ${SCHEMA}.crons (next_run_date) where enabled`,
  // What the instances apply, for the control plane's view of the deployment's storage (the last
  // instance to start writes it: instances of one revision read the same langgraph.json).
  `create table ${SCHEMA}.settings (
     name text primary key,
     value jsonb not null,
     updated_at timestamptz not null default now())`,
  // A2A tasks (runtime/langgraph/a2a-tasks.mjs): the task as the A2A SDK keeps it, its context the
  // LangGraph thread, so any instance answers tasks/get and tasks/cancel.
  `create table ${SCHEMA}.a2a_tasks (
     task_id text primary key,
     context_id text not null,
     body jsonb not null,
     created_at timestamptz not null default now(),
     updated_at timestamptz not null default now())`,
  `create index a2a_tasks_context on ${SCHEMA}.a2a_tasks (context_id, created_at)`,
  // MCP sessions (runtime/langgraph/mcp.mjs): any instance serves a session another one opened, until
  // a DELETE ends it everywhere.
  `create table ${SCHEMA}.mcp_sessions (
     session_id text primary key,
     protocol_version text,
     created_at timestamptz not null default now(),
     closed_at timestamptz)`,
  // Lanes (instance.mjs): the deployment's own URL ('') or one of its endpoints, a pull request's preview
  // among them. A run or cron made through an instance of a lane is the lane's instances' only.
  `alter table ${SCHEMA}.runs add column lane text not null default ''`,
  `alter table ${SCHEMA}.crons add column lane text not null default ''`,
];

/**
 * A TTL of langgraph.json (`{"strategy": "delete", "default_ttl": minutes, "sweep_interval_minutes":
 * minutes}`, as LangChain's servers read it), or null when none or unusable (said in the log).
 */
export function ttlOf(ttl, name, logger) {
  if (ttl == null) return null;
  const minutes = Number(ttl.default_ttl);
  const sweepMinutes = ttl.sweep_interval_minutes == null ? 60 : Number(ttl.sweep_interval_minutes);
  if ((ttl.strategy ?? 'delete') !== 'delete' || !(minutes > 0) || !(sweepMinutes > 0)) {
    logger.warn(`${name} ignored: it needs strategy "delete", a positive default_ttl and sweep_interval_minutes`, {
      ttl,
    });
    return null;
  }
  return { minutes, sweepMinutes };
}

/** Writes the TTLs this instance applies (null: none, or ignored), as langgraph.json names them. */
export async function recordTtls(pool, threadTtl, storeTtl, refreshOnRead) {
  const ttl = {
    checkpointer: threadTtl
      ? { strategy: 'delete', default_ttl: threadTtl.minutes, sweep_interval_minutes: threadTtl.sweepMinutes }
      : null,
    store: storeTtl
      ? {
          default_ttl: storeTtl.minutes,
          refresh_on_read: refreshOnRead !== false,
          sweep_interval_minutes: storeTtl.sweepMinutes,
        }
      : null,
  };
  await pool.query(
    `insert into ${SCHEMA}.settings (name, value) values ('ttl', $1)
     on conflict (name) do update set value = excluded.value, updated_at = now()`,
    [JSON.stringify(ttl)],
  );
}

/** Makes or updates the schema: ours, the checkpointer's and the store's, one instance at a time. */
export async function migrate(pool, saver, postgresStore) {
  const client = await pool.connect();
  try {
    await client.query('select pg_advisory_lock($1)', [SCHEMA_LOCK]);
    await client.query(`create schema if not exists ${SCHEMA}`);
    await client.query(`create table if not exists ${SCHEMA}.schema_version (version integer not null)`);
    const { rows } = await client.query(`select max(version) as version from ${SCHEMA}.schema_version`);
    const done = rows[0]?.version ?? 0;
    for (let version = done + 1; version <= MIGRATIONS.length; version += 1) {
      await client.query('begin');
      await client.query(MIGRATIONS[version - 1]);
      await client.query(`insert into ${SCHEMA}.schema_version (version) values ($1)`, [version]);
      await client.query('commit');
    }
    await saver.setup();
    await postgresStore.setup();
  } finally {
    await client.query('select pg_advisory_unlock($1)', [SCHEMA_LOCK]).catch(() => undefined);
    client.release();
  }
}
