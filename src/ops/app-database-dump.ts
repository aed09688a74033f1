/**
 * The apps' own databases (`slw_app_*`, src/dataplane/app-database.ts) in a backup: their schemas are
 * the apps', so only pg_dump can carry them, and pg_dump refuses servers of a newer major version than
 * its own. The newest pg_dump found (in /usr/local/bin, /usr/bin, or Debian's and PGDG's
 * /usr/lib/postgresql/<major>/bin) is used when it is new enough for the server; pg_restore from the same
 * directory brings a dump back.
 *
 * A dump is made as the service's user; a restore logs in as the app's own role, never as the service's
 * with SET ROLE: loading the rows runs the app's own code (its CHECK constraints, its functions), which
 * could RESET ROLE back to the service's (a superuser) and take the whole server. Passwords go through
 * the environment (PGPASSWORD), never on a command line other users can read.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import type pg from 'pg';

const run = promisify(execFile);

export interface PgTools {
  dump: string;
  restore: string;
  major: number;
}

async function majorOf(binary: string): Promise<number | null> {
  try {
    const { stdout } = await run(binary, ['--version']);
    const match = /\(PostgreSQL\)\s+(\d+)/.exec(stdout);
    return match ? Number(match[1]) : null;
  } catch {
    return null;
  }
}

/** The newest pg_dump of this machine, with its pg_restore; null when there is none. */
export async function findPgTools(): Promise<PgTools | null> {
  const dirs = new Set<string>(['/usr/local/bin', '/usr/bin', '/usr/local/pgsql/bin']);
  const debian = await fs.readdir('/usr/lib/postgresql').catch(() => [] as string[]);
  for (const version of debian) dirs.add(path.join('/usr/lib/postgresql', version, 'bin'));
  let best: PgTools | null = null;
  for (const dir of dirs) {
    const dump = path.join(dir, 'pg_dump');
    const restore = path.join(dir, 'pg_restore');
    const major = await majorOf(dump);
    if (major === null || (await majorOf(restore)) !== major) continue;
    if (!best || major > best.major) best = { dump, restore, major };
  }
  return best;
}

export async function serverMajor(client: pg.ClientBase): Promise<number> {
  const result = await client.query<{ version: number }>(
    "select current_setting('server_version_num')::int as version",
  );
  return Math.floor(result.rows[0]!.version / 10000);
}

/**
 * libpq's environment for the service's URL on another database of its server; nothing else of ours
 * (the tools are named by absolute path).
 */
function libpqEnv(serviceUrl: string, database: string, login?: { user: string; password: string }): NodeJS.ProcessEnv {
  const url = new URL(serviceUrl);
  const env: NodeJS.ProcessEnv = {
    LC_ALL: 'C',
    PGHOST: url.hostname.replace(/^\[|\]$/g, '') || '127.0.0.1',
    PGPORT: url.port || '5432',
    PGUSER: login?.user ?? decodeURIComponent(url.username),
    PGPASSWORD: login?.password ?? decodeURIComponent(url.password),
    PGDATABASE: database,
  };
  const sslmode = url.searchParams.get('sslmode');
  if (sslmode) env.PGSSLMODE = sslmode;
  return env;
}

/**
 * Dumps an app database. pg_dump locks every table first, and the app's own sessions can hold a lock it
 * waits for (a transaction left open): it gives up after `lockWaitSeconds` instead of waiting forever, so
 * one app cannot keep every backup of the service from finishing.
 */
export async function dumpAppDatabase(
  tools: PgTools,
  serviceUrl: string,
  database: string,
  file: string,
  lockWaitSeconds: number,
): Promise<void> {
  await run(
    tools.dump,
    [
      '--format=custom',
      '--no-owner',
      '--no-privileges',
      `--lock-wait-timeout=${Math.max(1, Math.round(lockWaitSeconds * 1000))}`,
      `--file=${file}`,
    ],
    { env: libpqEnv(serviceUrl, database), maxBuffer: 16 * 1024 * 1024 },
  );
}

/**
 * Restores a dump into the (empty) app database as the app's role (its login and password), so its
 * objects are the app's and nothing in the dump acts with more than the app's own rights.
 */
export async function restoreAppDatabase(
  tools: PgTools,
  serviceUrl: string,
  database: string,
  login: { role: string; password: string },
  file: string,
): Promise<void> {
  await run(
    tools.restore,
    ['--no-owner', '--no-privileges', '--single-transaction', '--exit-on-error', `--dbname=${database}`, file],
    {
      env: libpqEnv(serviceUrl, database, { user: login.role, password: login.password }),
      maxBuffer: 16 * 1024 * 1024,
    },
  );
}
