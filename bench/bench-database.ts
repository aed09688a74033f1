/**
 * The bench's database: a fresh database on the server named by DATABASE_URL (dropped afterwards),
 * or an embedded PostgreSQL started in a temporary directory (removed afterwards). Migrated before use.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import type { Logger } from 'pino';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../src/db/embedded-postgres.ts';
import { migrate } from '../src/db/migrate.ts';

export interface BenchDatabase {
  /** Connection string of the bench's own database. */
  url: string;
  /** Where it runs, for the report. */
  description: string;
  close(): Promise<void>;
}

async function withClient<T>(url: string, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

function withDatabase(url: string, name: string): string {
  const out = new URL(url);
  out.pathname = `/${name}`;
  return out.toString();
}

export async function openBenchDatabase(externalUrl: string | undefined, logger: Logger): Promise<BenchDatabase> {
  let embedded: EmbeddedPostgres | null = null;
  let tempDir: string | null = null;
  let adminUrl = externalUrl;
  if (!adminUrl) {
    tempDir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-bench-'));
    // The embedded server runs as 'postgres' when we are root: it must be able to enter the directory.
    await fs.chmod(tempDir, 0o711);
    embedded = await startEmbeddedPostgres({ clusterDir: path.join(tempDir, 'postgres'), logger });
    adminUrl = embedded.url;
  }
  const name = `slipway_bench_${process.pid}_${randomBytes(3).toString('hex')}`;
  const cleanup = async () => {
    await withClient(adminUrl, (c) => c.query(`drop database if exists ${c.escapeIdentifier(name)} with (force)`)).catch((error: unknown) =>
      logger.warn({ err: error }, `could not drop the bench database ${name}`),
    );
    await embedded?.stop();
    if (tempDir) await fs.rm(tempDir, { recursive: true, force: true });
  };
  try {
    await withClient(adminUrl, (c) => c.query(`create database ${c.escapeIdentifier(name)}`));
    const url = withDatabase(adminUrl, name);
    const pool = new pg.Pool({ connectionString: url, max: 2 });
    try {
      await migrate(pool);
    } finally {
      await pool.end();
    }
    const version = await withClient(url, async (c) => (await c.query<{ server_version: string }>('show server_version')).rows[0]!.server_version);
    const where = embedded ? `embedded PostgreSQL ${version} (temporary directory)` : `PostgreSQL ${version} at ${new URL(adminUrl).host} (DATABASE_URL, database ${name})`;
    return { url, description: where, close: cleanup };
  } catch (error) {
    await cleanup();
    throw error;
  }
}
