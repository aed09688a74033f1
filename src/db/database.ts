/**
 * Opens the database the service runs on: the server named by DATABASE_URL, or the embedded one
 * started under the data directory. Either way the migrations are applied before anything else runs.
 */
import path from 'node:path';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import type { Logger } from 'pino';
import type { Config } from '../config.ts';
import type { Database as Schema } from '../store/schema.ts';
import { startEmbeddedPostgres, type EmbeddedPostgres } from './embedded-postgres.ts';
import { migrate } from './migrate.ts';
import { databaseUrl, withClient } from './admin-client.ts';

export interface OpenDatabase {
  db: Kysely<Schema>;
  pool: pg.Pool;
  /** The connection string the service uses. */
  url: string;
  /** Closes the pool, then stops the embedded server if one was started. */
  close(): Promise<void>;
}

/** A pool plus its Kysely handle on one connection string. */
export function connect(connectionString: string, max = 20): { db: Kysely<Schema>; pool: pg.Pool } {
  const pool = new pg.Pool({ connectionString, max });
  // An idle client losing its server connection must not crash the process; the pool replaces it.
  pool.on('error', () => undefined);
  const db = new Kysely<Schema>({ dialect: new PostgresDialect({ pool }) });
  return { db, pool };
}

const EMBEDDED_DATABASE = 'slipway';

async function ensureDatabase(adminUrl: string, name: string): Promise<void> {
  await withClient(adminUrl, async (client) => {
    const found = await client.query('select 1 from pg_database where datname = $1', [name]);
    if (found.rowCount === 0) await client.query(`create database ${client.escapeIdentifier(name)}`);
    // Apps get roles on this server (src/dataplane/app-database.ts): they must not connect to ours.
    await client.query(`revoke connect, temporary on database ${client.escapeIdentifier(name)} from public`);
  });
}

export interface OpenDatabaseOptions {
  /**
   * The embedded server exited without being stopped. The service cannot serve without it and a
   * restart recovers it: main.ts exits non-zero so a supervisor restarts it.
   */
  onServerExit?: (exit: { code: number | null; signal: NodeJS.Signals | null }) => void;
}

/** The caller must own the data directory (src/db/data-dir-lock.ts) when no DATABASE_URL is set. */
export async function openDatabase(
  config: Config,
  logger: Logger,
  options: OpenDatabaseOptions = {},
): Promise<OpenDatabase> {
  let embedded: EmbeddedPostgres | null = null;
  let url = config.databaseUrl;
  if (url === null) {
    embedded = await startEmbeddedPostgres({
      clusterDir: path.join(config.dataDir, 'postgres'),
      logger,
      onUnexpectedExit: options.onServerExit,
    });
    try {
      await ensureDatabase(embedded.url, EMBEDDED_DATABASE);
    } catch (error) {
      await embedded.stop();
      throw error;
    }
    url = databaseUrl(embedded.url, EMBEDDED_DATABASE);
  }
  const { db, pool } = connect(url);
  try {
    const applied = await migrate(pool);
    if (applied.length > 0) logger.info({ applied }, 'database migrations applied');
  } catch (error) {
    await pool.end();
    await embedded?.stop();
    throw error;
  }
  return {
    db,
    pool,
    url,
    async close() {
      await db.destroy();
      await embedded?.stop();
    },
  };
}
