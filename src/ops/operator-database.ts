/**
 * The service's database as the operator commands (`slipway backup`, `slipway restore`) reach it: the
 * server of DATABASE_URL, or the embedded one of the data directory. For a backup of the embedded setup
 * the service may be running: its server is then used where it runs (the port in its `postmaster.pid`,
 * the password beside the cluster), since a consistent read needs no stop. Otherwise the command takes
 * the data directory and starts the server itself, as the service would, without migrating anything.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Kysely } from 'kysely';
import type pg from 'pg';
import type { Logger } from 'pino';
import { ConfigError, type Config } from '../config.ts';
import { KEY_FILE } from '../crypto/secret-box.ts';
import { databaseUrl, withClient } from '../db/admin-client.ts';
import { DataDirInUseError, lockDataDir, type DataDirLock } from '../db/data-dir-lock.ts';
import { connect } from '../db/database.ts';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../db/embedded-postgres.ts';
import type { Database } from '../store/schema.ts';

/** The embedded cluster's database of the service (src/db/database.ts). */
const EMBEDDED_DATABASE = 'slipway';

export interface OperatorDatabase {
  url: string;
  pool: pg.Pool;
  db: Kysely<Database>;
  /** Whether it is the embedded server of the data directory. */
  embedded: boolean;
  close(): Promise<void>;
}

async function exists(file: string): Promise<boolean> {
  return fs.access(file).then(
    () => true,
    () => false,
  );
}

function opened(
  url: string,
  embedded: EmbeddedPostgres | null,
  lock: DataDirLock | null,
  isEmbedded: boolean,
): OperatorDatabase {
  const { db, pool } = connect(url, 4);
  return {
    url,
    pool,
    db,
    embedded: isEmbedded,
    async close() {
      await db.destroy();
      await embedded?.stop();
      await lock?.release();
    },
  };
}

/** The server of a running service on the data directory: its port from postmaster.pid. */
async function runningServerUrl(dataDir: string): Promise<string> {
  const pidFile = await fs.readFile(path.join(dataDir, 'postgres', 'postmaster.pid'), 'utf8').catch(() => null);
  const port = Number(pidFile?.split('\n')[3]);
  const password = (await fs.readFile(path.join(dataDir, 'postgres-password'), 'utf8').catch(() => '')).trim();
  if (!Number.isInteger(port) || port <= 0 || password === '')
    throw new ConfigError(
      'SLIPWAY_DATA_DIR',
      `${dataDir} is in use by a Slipway process whose database is not running (yet): try again once it has started, or stop it`,
    );
  return `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}/${EMBEDDED_DATABASE}`;
}

/** The service's database to read a backup from; never migrated or otherwise changed. */
export async function openForBackup(config: Config, logger: Logger): Promise<OperatorDatabase> {
  if (config.databaseUrl !== null) return opened(config.databaseUrl, null, null, false);
  const clusterDir = path.join(config.dataDir, 'postgres');
  if (!(await exists(path.join(clusterDir, 'PG_VERSION'))))
    throw new ConfigError(
      'SLIPWAY_DATA_DIR',
      `${config.dataDir} holds no Slipway database: run this with the service's SLIPWAY_DATA_DIR (or its DATABASE_URL)`,
    );
  let lock: DataDirLock;
  try {
    lock = await lockDataDir(config.dataDir, { logger, command: 'backup' });
  } catch (error) {
    if (!(error instanceof DataDirInUseError)) throw error;
    logger.info({ pid: error.owner.pid }, 'the service runs on this data directory: reading its database there');
    return opened(await runningServerUrl(config.dataDir), null, null, true);
  }
  let embedded: EmbeddedPostgres;
  try {
    embedded = await startEmbeddedPostgres({ clusterDir, logger });
  } catch (error) {
    await lock.release();
    throw error;
  }
  return opened(databaseUrl(embedded.url, EMBEDDED_DATABASE), embedded, lock, true);
}

/** What a restore target holds that makes it not empty; empty list when it is empty. */
async function dataDirContents(dataDir: string): Promise<string[]> {
  const entries = await fs.readdir(dataDir).catch((error: NodeJS.ErrnoException) => {
    if (error.code === 'ENOENT') return [];
    throw error;
  });
  // The key file may be put there first: it is how the restore gets the key.
  return entries.filter((name) => name !== KEY_FILE).sort();
}

/** The relations of the database outside the system's schemas: any means it is not empty. */
async function databaseContents(url: string): Promise<string[]> {
  return withClient(url, async (client) => {
    const result = await client.query<{ name: string }>(
      `select n.nspname || '.' || c.relname as name from pg_class c join pg_namespace n on n.oid = c.relnamespace
        where n.nspname not in ('pg_catalog', 'information_schema') and n.nspname not like 'pg_toast%'
          and n.nspname not like 'pg_temp%' and c.relkind in ('r', 'p', 'v', 'm', 'S', 'f')
          and not exists (select 1 from pg_depend d where d.objid = c.oid and d.deptype = 'e')
        order by 1 limit 5`,
    );
    return result.rows.map((r) => r.name);
  });
}

/**
 * Checks that the restore target is empty, changing nothing: the data directory (embedded) holds
 * nothing but the key file, or DATABASE_URL's database has no tables.
 */
export async function checkRestoreTarget(config: Config): Promise<void> {
  if (config.databaseUrl === null) {
    const found = await dataDirContents(config.dataDir);
    if (found.length > 0)
      throw new ConfigError(
        'SLIPWAY_DATA_DIR',
        `${config.dataDir} is not empty (it holds ${found.slice(0, 5).join(', ')}): restore into a new data directory (it may hold ${KEY_FILE} only); nothing was changed`,
      );
    return;
  }
  const found = await databaseContents(config.databaseUrl);
  if (found.length > 0)
    throw new ConfigError(
      'DATABASE_URL',
      `the database is not empty (it holds ${found.join(', ')}${found.length === 5 ? ', ...' : ''}): restore into a new, empty database; nothing was changed`,
    );
}

export interface RestoreTarget extends OperatorDatabase {
  /** Undoes what opening did to a fresh data directory (the cluster made), after a failed restore. */
  discard(): Promise<void>;
}

/**
 * Opens the checked-empty target: the DATABASE_URL database, or a new embedded cluster in the data
 * directory (which this process holds until close).
 */
export async function openRestoreTarget(config: Config, logger: Logger): Promise<RestoreTarget> {
  if (config.databaseUrl !== null) {
    const target = opened(config.databaseUrl, null, null, false);
    return { ...target, discard: async () => undefined };
  }
  const lock = await lockDataDir(config.dataDir, { logger, command: 'restore' });
  let embedded: EmbeddedPostgres | null = null;
  const discard = async () => {
    await embedded?.stop();
    // It was empty but for the key file (checkRestoreTarget): what is there now, this restore made.
    for (const name of await dataDirContents(config.dataDir)) {
      if (name === path.basename(lock.file)) continue;
      await fs.rm(path.join(config.dataDir, name), { recursive: true, force: true });
    }
    await lock.release();
  };
  try {
    embedded = await startEmbeddedPostgres({ clusterDir: path.join(config.dataDir, 'postgres'), logger });
    await withClient(embedded.url, async (client) => {
      await client.query(`create database ${client.escapeIdentifier(EMBEDDED_DATABASE)}`);
      // As the service does at every start (src/db/database.ts): app roles never connect to it.
      await client.query(
        `revoke connect, temporary on database ${client.escapeIdentifier(EMBEDDED_DATABASE)} from public`,
      );
    });
  } catch (error) {
    await discard();
    throw error;
  }
  const target = opened(databaseUrl(embedded.url, EMBEDDED_DATABASE), embedded, lock, true);
  return { ...target, discard: async () => (await target.db.destroy().catch(() => undefined), discard()) };
}
