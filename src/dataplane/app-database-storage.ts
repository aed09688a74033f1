/**
 * Keeps each app's own PostgreSQL database within its storage limit (issue 33, items 1 and 4): an app
 * writing into its database would otherwise fill the disk that holds the control plane's database and
 * every other app's. The worker measures every app database every SLIPWAY_DATABASE_CHECK_SECONDS and
 * applies the rule of src/domain/database-storage.ts:
 *
 * - read_only: `default_transaction_read_only = on` for the database and for its role in it, and the
 *   role's sessions ended, so that every new session starts read-only: reads go on, writes fail with
 *   SQLSTATE 25006. The app may lift it for its own session (that is how it makes room), and could
 *   reset the defaults (its role owns the database): they are set again at every measure.
 * - cut_off: the role is NOLOGIN and its sessions ended (set again at every measure, since a redeploy's
 *   provisioning gives the role LOGIN).
 * - writable again: LOGIN, and both defaults reset.
 *
 * Each change is reported through the data plane's reports (src/domain/data-plane.ts
 * `reportDatabaseStorage`): the lifecycle changes the state (its one writer, changeDatabaseStorageState),
 * runs this module's ALTERs and records the event in one transaction, once however many replicas
 * measure. Sizes are reported the same way (`reportDatabaseSize`): no row of the service's is written
 * here. The limit is the deployment's current `db_storage_gi` (its default, at most the maximum:
 * databaseStorageOf). Sizes are read with pg_database_size from the
 * service's pool, which reads the database's files and runs none of the app's code.
 *
 * One replica measures at a time: a round runs under a session advisory lock, and a replica that finds
 * it held skips the round (the other is measuring). The size shown in a workspace's usage is written only
 * when it moved (by RECORD_STEP_BYTES or 1%), not at every measure: a quiet database costs the control
 * plane no write per interval.
 *
 * What it cannot promise: between two measures an app writes what its disk allows, and the margin
 * bounds what it adds after read-only only at the pace of the measures (docs/operations.md).
 */
import { sql } from 'kysely';
import type { Kysely, QueryExecutorProvider } from 'kysely';
import type pg from 'pg';
import type { Logger } from 'pino';
import { DATABASE_STORAGE_ROUND_LOCK } from '../db/advisory-locks.ts';
import {
  cutOffMarginBytes,
  limitBytesOf,
  nextStorageState,
  type DatabaseStorageState,
} from '../domain/database-storage.ts';
import type { OwnPlaneReports, DatabaseStorageReport } from '../domain/data-plane.ts';
import { databaseStorageOf, type SpecDefaults } from '../domain/resource-maxima.ts';
import { databaseSize } from '../store/app-database-usage.ts';
import { appDatabasesToMeasure, type MeasuredAppDatabase } from '../store/deployment-runtimes.ts';
import type { Database } from '../store/schema.ts';
import { systemClock, type Clock } from '../clock.ts';

const MIB = 1024 * 1024;

/** The least change of a database's size that is written down (besides 1% of it). */
const RECORD_STEP_BYTES = MIB;

/** Whether the size moved enough since the last one written to be written again. */
function sizeMoved(last: number | null, size: number): boolean {
  return last === null || Math.abs(size - last) >= Math.max(RECORD_STEP_BYTES, last / 100);
}

/** App database and role names (src/dataplane/app-database.ts): nothing else is ever altered here. */
const APP_NAME = /^slw_app_[0-9a-f-]+$/;

export interface DatabaseStorageDeps {
  db: Kysely<Database>;
  /** Sizes and changes of state are reported here (the lifecycle writes them). */
  reports: OwnPlaneReports;
  pool: pg.Pool;
  logger: Logger;
  /** The operator's default and maximum (resourcePolicyOf(config).defaults). */
  defaults: Pick<SpecDefaults, 'databaseStorageGi' | 'maxDatabaseStorageGi'>;
  intervalMs: number;
  now?: Clock;
}

export interface DatabaseStorageWatch {
  stop(): Promise<void>;
}

const mib = (bytes: number) => Math.round((bytes / MIB) * 10) / 10;

/** Settings and logins of a state, set (again) on the database and its role. */
async function applyState(
  db: QueryExecutorProvider,
  database: MeasuredAppDatabase,
  state: DatabaseStorageState,
): Promise<void> {
  const name = sql.id(database.databaseName);
  const role = sql.id(database.roleName);
  if (state === 'writable') {
    await sql`alter role ${role} login`.execute(db);
    await sql`alter database ${name} reset default_transaction_read_only`.execute(db);
    await sql`alter role ${role} in database ${name} reset default_transaction_read_only`.execute(db);
    return;
  }
  await sql`alter database ${name} set default_transaction_read_only = on`.execute(db);
  await sql`alter role ${role} in database ${name} set default_transaction_read_only = on`.execute(db);
  if (state === 'cut_off') await sql`alter role ${role} nologin`.execute(db);
}

/** Ends the role's sessions in its database: the next ones start under the new defaults (or not at all). */
async function endSessions(db: QueryExecutorProvider, database: MeasuredAppDatabase): Promise<void> {
  await sql`select pg_catalog.pg_terminate_backend(pid) from pg_catalog.pg_stat_activity
             where datname = ${database.databaseName} and usename = ${database.roleName}
               and pid <> pg_catalog.pg_backend_pid()`.execute(db);
}

function eventOf(
  from: DatabaseStorageState,
  to: DatabaseStorageState,
  sizeBytes: number,
  limitBytes: number,
): DatabaseStorageReport['event'] {
  const held = `The database holds ${mib(sizeBytes)} MiB; its limit is ${mib(limitBytes)} MiB (db_storage_gi)`;
  const margin = cutOffMarginBytes(limitBytes);
  const base = { limit_bytes: limitBytes, size_bytes: sizeBytes };
  const [type, data] =
    to === 'read_only'
      ? ([
          'deployment.database_full',
          {
            ...base,
            message: `${held}: new transactions are read-only. Make room (TRUNCATE or DROP in a read-write transaction) or raise db_storage_gi.`,
          },
        ] as const)
      : to === 'cut_off'
        ? ([
            'deployment.database_cut_off',
            {
              ...base,
              margin_bytes: margin,
              message: `${held}, and the app kept writing past read-only by more than ${mib(margin)} MiB: its database login is refused until the database is within its limit. Raise db_storage_gi.`,
            },
          ] as const)
        : (['deployment.database_writable', { ...base, from, message: `${held}: it takes writes again.` }] as const);
  return { type, data };
}

/** Measures one database and brings it to its state; an error is the caller's to log. */
async function checkOne(deps: DatabaseStorageDeps, database: MeasuredAppDatabase, now: Date): Promise<void> {
  if (!APP_NAME.test(database.databaseName) || !APP_NAME.test(database.roleName)) return;
  const client = await deps.pool.connect();
  let sizeBytes: number | null;
  try {
    sizeBytes = await databaseSize(client, database.databaseName);
  } finally {
    client.release();
  }
  // Dropped meanwhile (its deployment is being deleted).
  if (sizeBytes === null) return;
  const size = sizeBytes;
  if (sizeMoved(database.sizeBytes, size)) await deps.reports.reportDatabaseSize(database.deploymentId, size, now);
  const limitBytes = limitBytesOf(databaseStorageOf(database.resourceSpec, deps.defaults));
  const to = nextStorageState({
    state: database.state,
    stateSizeBytes: database.stateSizeBytes,
    sizeBytes: size,
    limitBytes,
  });
  if (to === database.state) {
    // Set again: the app may have reset its defaults, a redeploy given its role LOGIN.
    if (to === 'writable') return;
    await applyState(deps.db, database, to);
    if (to === 'cut_off') await endSessions(deps.db, database);
    return;
  }
  const changed = await deps.reports.reportDatabaseStorage(
    {
      deploymentId: database.deploymentId,
      workspaceId: database.workspaceId,
      from: database.state,
      to,
      sizeBytes: size,
      event: eventOf(database.state, to, size, limitBytes),
    },
    (tx) => applyState(tx, database, to),
  );
  // After the commit: a session that began before it would otherwise still see the old settings.
  if (changed && to !== 'writable') await endSessions(deps.db, database);
  if (changed)
    deps.logger.info(
      { deploymentId: database.deploymentId, from: database.state, to, size_bytes: size, limit_bytes: limitBytes },
      'app database storage state changed',
    );
}

/**
 * One measure of every app database, unless another replica is measuring (false then); errors are
 * logged per database, never thrown.
 */
export async function checkDatabaseStorage(deps: DatabaseStorageDeps): Promise<boolean> {
  const lock = await deps.pool.connect();
  try {
    const held = await lock.query<{ locked: boolean }>('select pg_try_advisory_lock($1) as locked', [
      DATABASE_STORAGE_ROUND_LOCK.toString(),
    ]);
    if (!held.rows[0]!.locked) return false;
    try {
      const now = (deps.now ?? systemClock)();
      for (const database of await appDatabasesToMeasure(deps.db)) {
        await checkOne(deps, database, now).catch((error: unknown) =>
          deps.logger.error(
            { err: error, deploymentId: database.deploymentId },
            'could not check an app database size',
          ),
        );
      }
      return true;
    } finally {
      await lock.query('select pg_advisory_unlock($1)', [DATABASE_STORAGE_ROUND_LOCK.toString()]);
    }
  } finally {
    lock.release();
  }
}

/** Measures every SLIPWAY_DATABASE_CHECK_SECONDS until stopped. */
export function startDatabaseStorageWatch(deps: DatabaseStorageDeps): DatabaseStorageWatch {
  let stopped = false;
  let timer: NodeJS.Timeout | null = null;
  let round: Promise<void> = Promise.resolve();
  const schedule = () => {
    if (stopped) return;
    timer = setTimeout(() => {
      round = checkDatabaseStorage(deps)
        .then(() => undefined)
        .catch((error: unknown) => deps.logger.error({ err: error }, 'could not measure the app databases'))
        .finally(schedule);
    }, deps.intervalMs);
  };
  schedule();
  return {
    async stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
      await round;
    },
  };
}
