/**
 * The bench's database: a fresh database on the server named by DATABASE_URL (dropped afterwards),
 * or an embedded PostgreSQL started in a temporary directory (removed afterwards). Migrated before use.
 */
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import { createMigratedDatabase, startScratchServer } from '../scripts/scratch-server.ts';
import { withClient } from '../src/db/admin-client.ts';

export interface BenchDatabase {
  /** Connection string of the bench's own database. */
  url: string;
  /** Where it runs, for the report. */
  description: string;
  close(): Promise<void>;
}

export async function openBenchDatabase(externalUrl: string | undefined, logger: Logger): Promise<BenchDatabase> {
  const server = await startScratchServer(externalUrl, logger, 'slipway-bench');
  const adminUrl = server.adminUrl;
  const name = `slipway_bench_${process.pid}_${randomBytes(3).toString('hex')}`;
  const cleanup = async () => {
    await withClient(adminUrl, (c) =>
      c.query(`drop database if exists ${c.escapeIdentifier(name)} with (force)`),
    ).catch((error: unknown) => logger.warn({ err: error }, `could not drop the bench database ${name}`));
    await server.stop();
  };
  try {
    const url = await createMigratedDatabase(adminUrl, name);
    const version = await withClient(
      url,
      async (c) => (await c.query<{ server_version: string }>('show server_version')).rows[0]!.server_version,
    );
    const where = server.embedded
      ? `embedded PostgreSQL ${version} (temporary directory)`
      : `PostgreSQL ${version} at ${new URL(adminUrl).host} (DATABASE_URL, database ${name})`;
    return { url, description: where, close: cleanup };
  } catch (error) {
    await cleanup();
    throw error;
  }
}
