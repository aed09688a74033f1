/**
 * A PostgreSQL server for a test run (scripts/run-tests.ts) or a bench run (bench/): the one named by
 * a connection string, or else an embedded server started in a temporary directory (removed when
 * stopped), and migrated databases on it.
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import type { Logger } from 'pino';
import { databaseUrl, withClient } from '../src/db/admin-client.ts';
import { startEmbeddedPostgres } from '../src/db/embedded-postgres.ts';
import { migrate } from '../src/db/migrate.ts';

export interface ScratchServer {
  /** Superuser (or given) connection string on the server's maintenance database. */
  adminUrl: string;
  embedded: boolean;
  stop(): Promise<void>;
}

export async function startScratchServer(
  externalUrl: string | undefined,
  logger: Logger,
  prefix: string,
  /** Settings of an embedded server (`-c name=value`); a server named by a connection string keeps its own. */
  settings?: Readonly<Record<string, string>>,
): Promise<ScratchServer> {
  if (externalUrl) return { adminUrl: externalUrl, embedded: false, stop: async () => undefined };
  const tempDir = await fs.mkdtemp(path.join(os.tmpdir(), `${prefix}-`));
  // The embedded server runs as 'postgres' when we are root: it must be able to enter the directory.
  await fs.chmod(tempDir, 0o711);
  try {
    const server = await startEmbeddedPostgres({ clusterDir: path.join(tempDir, 'postgres'), logger, settings });
    return {
      adminUrl: server.url,
      embedded: true,
      async stop() {
        await server.stop();
        await fs.rm(tempDir, { recursive: true, force: true });
      },
    };
  } catch (error) {
    await fs.rm(tempDir, { recursive: true, force: true });
    throw error;
  }
}

/** Creates database `name` on the server and applies every migration to it; returns its URL. */
export async function createMigratedDatabase(adminUrl: string, name: string): Promise<string> {
  await withClient(adminUrl, (c) => c.query(`create database ${c.escapeIdentifier(name)}`));
  const url = databaseUrl(adminUrl, name);
  const pool = new pg.Pool({ connectionString: url, max: 2 });
  try {
    await migrate(pool);
  } finally {
    await pool.end();
  }
  return url;
}
