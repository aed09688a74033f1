/**
 * `npm test`: prepares one migrated template database, then runs every test file with Node's test
 * runner; each file clones the template (CREATE DATABASE ... TEMPLATE), which is far cheaper than
 * migrating per file. The server is the one named by DATABASE_URL, or else an embedded PostgreSQL
 * started in a temporary directory for this run.
 *
 * Usage: npm test [-- test/some.test.ts ...]
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import pino from 'pino';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../src/db/embedded-postgres.ts';
import { migrate } from '../src/db/migrate.ts';

async function testFiles(dir: string): Promise<string[]> {
  const entries = await fs.readdir(dir, { withFileTypes: true, recursive: true });
  return entries
    .filter((e) => e.isFile() && e.name.endsWith('.test.ts'))
    .map((e) => path.relative(process.cwd(), path.join(e.parentPath, e.name)))
    .sort();
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

function databaseUrl(base: string, name: string): string {
  const url = new URL(base);
  url.pathname = `/${name}`;
  return url.toString();
}

async function main(): Promise<number> {
  const logger = pino({ level: 'warn' });
  let embedded: EmbeddedPostgres | null = null;
  let tempDir: string | null = null;
  let adminUrl = process.env.DATABASE_URL;
  if (!adminUrl) {
    tempDir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-test-'));
    await fs.chmod(tempDir, 0o711);
    embedded = await startEmbeddedPostgres({ clusterDir: path.join(tempDir, 'postgres'), logger });
    adminUrl = embedded.url;
    process.stdout.write(`test database: embedded PostgreSQL on port ${embedded.port}\n`);
  } else {
    process.stdout.write(`test database: ${new URL(adminUrl).host} (DATABASE_URL)\n`);
  }
  const template = `slipway_test_${process.pid}_${randomBytes(3).toString('hex')}`;
  try {
    await withClient(adminUrl, (c) => c.query(`create database ${template}`));
    const pool = new pg.Pool({ connectionString: databaseUrl(adminUrl, template), max: 2 });
    try {
      await migrate(pool);
    } finally {
      await pool.end();
    }
    const asked = process.argv.slice(2);
    const files = asked.length > 0 ? asked : await testFiles('test');
    const child = spawn(process.execPath, ['--import', 'tsx', '--test', '--test-concurrency=2', ...files], {
      stdio: 'inherit',
      env: { ...process.env, SLIPWAY_TEST_ADMIN_URL: adminUrl, SLIPWAY_TEST_TEMPLATE: template },
    });
    const forward = (signal: NodeJS.Signals) => child.kill(signal);
    process.on('SIGINT', forward);
    process.on('SIGTERM', forward);
    return await new Promise<number>((resolve) => child.on('exit', (code) => resolve(code ?? 1)));
  } finally {
    await withClient(adminUrl, async (c) => {
      const left = await c.query<{ datname: string }>('select datname from pg_database where datname like $1', [`${template}%`]);
      for (const { datname } of left.rows) await c.query(`drop database if exists ${c.escapeIdentifier(datname)} with (force)`);
    }).catch((error: unknown) => process.stderr.write(`could not drop test databases: ${String(error)}\n`));
    await embedded?.stop();
    if (tempDir) await fs.rm(tempDir, { recursive: true, force: true });
  }
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`${error instanceof Error ? error.stack : String(error)}\n`);
    process.exit(1);
  },
);
