/**
 * Each deployment on the local data plane gets its own PostgreSQL database on the service's server
 * (embedded or DATABASE_URL): a role with a random password that owns a database nobody else may
 * connect to. The service's own connection makes them, so with DATABASE_URL its user needs CREATEROLE
 * and CREATEDB.
 *
 * Names derive from the deployment id (`slw_app_<32 hex>`), never from user input, so they need no
 * quoting rules beyond the driver's escaping.
 */
import { randomBytes } from 'node:crypto';
import type pg from 'pg';

export interface AppDatabase {
  name: string;
  role: string;
  password: string;
}

function appDatabaseName(deploymentId: string): string {
  return `slw_app_${deploymentId.replace(/-/g, '')}`;
}

/** Creates the role and database when missing (idempotent: a retried provision finds them). */
export async function createAppDatabase(
  pool: pg.Pool,
  deploymentId: string,
  password = randomBytes(24).toString('hex'),
): Promise<AppDatabase> {
  const name = appDatabaseName(deploymentId);
  const client = await pool.connect();
  try {
    const role = client.escapeIdentifier(name);
    const roleExists = await client.query('select 1 from pg_roles where rolname = $1', [name]);
    // CREATE ROLE takes no parameters: the password is a literal, escaped by the driver.
    if (roleExists.rowCount === 0)
      await client.query(`create role ${role} login password ${client.escapeLiteral(password)}`);
    else await client.query(`alter role ${role} login password ${client.escapeLiteral(password)}`);
    const dbExists = await client.query('select 1 from pg_database where datname = $1', [name]);
    if (dbExists.rowCount === 0) await client.query(`create database ${role} owner ${role}`);
    // Other apps' roles must not even connect to it.
    await client.query(`revoke connect, temporary on database ${role} from public`);
    return { name, role: name, password };
  } finally {
    client.release();
  }
}

export async function dropAppDatabase(pool: pg.Pool, name: string): Promise<void> {
  const client = await pool.connect();
  try {
    const id = client.escapeIdentifier(name);
    await client.query(`drop database if exists ${id} with (force)`);
    await client.query(`drop role if exists ${id}`);
  } finally {
    client.release();
  }
}

/** The connection string an app gets: the service's server, its own role and database. */
export function appDatabaseUrl(serviceUrl: string, database: AppDatabase): string {
  const url = new URL(serviceUrl);
  url.username = encodeURIComponent(database.role);
  url.password = encodeURIComponent(database.password);
  url.pathname = `/${database.name}`;
  url.search = '';
  return url.toString();
}
