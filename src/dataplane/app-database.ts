/**
 * Each deployment on the local data plane gets its own PostgreSQL database on the service's server
 * (embedded or DATABASE_URL): a role with a random password that owns a database nobody else may
 * connect to. The service's own connection makes them, so with DATABASE_URL its user needs CREATEROLE
 * and CREATEDB.
 *
 * The app's code is not trusted with the server it shares with the service:
 * - its role has a connection limit, so one app cannot take the server's connection slots;
 * - it may connect to its own database only: CONNECT is revoked from PUBLIC on its database and, by
 *   protectServiceDatabases at the service's start, on the service's own, `postgres` and `template1`;
 * - in its database the catalogs listing every database of the server by name are not readable (when
 *   the service is a superuser: only the owner of those shared catalogs can revoke on them);
 * - slots are kept for the service by the server (superuser_reserved_connections on the embedded one,
 *   src/db/embedded-postgres.ts; docs/operations.md for DATABASE_URL), which protectServiceDatabases
 *   checks.
 *
 * Names are random (`slw_app_<32 hex>`, newAppDatabaseName), chosen once and kept with the deployment
 * (deployment_runtimes), never from user input, so they need no quoting rules beyond the driver's
 * escaping. Random, not derived from the deployment id: the role catalogs (pg_roles) stay readable by
 * every role, and would otherwise list every tenant's deployment ids to any app. (Deployments made
 * before kept the names they had: `slw_app_<their id>`.)
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { databaseUrl, quietClient } from '../db/admin-client.ts';

export interface AppDatabase {
  name: string;
  role: string;
  password: string;
}

export interface MadeAppDatabase extends AppDatabase {
  /** True when this call made the database (false: it was there). */
  created: boolean;
}

/**
 * Connections one app's role may hold at once. Apps share the server's max_connections (200 on the
 * embedded server, 30 of them kept for the service): a limit per app keeps one app from taking them all.
 */
export const APP_ROLE_CONNECTION_LIMIT = 20;

/** The names app databases and roles have (newAppDatabaseName), as a regular expression (PostgreSQL's and JavaScript's). */
const APP_NAME_PATTERN = '^slw_app_[0-9a-f]{32}$';

/**
 * Catalogs of every database that list all the server's databases by name, readable by PUBLIC.
 * pg_stat_activity is left readable: it shows the databases of live sessions only, and apps use it on
 * their own sessions.
 */
const DATABASE_LISTS = [
  'pg_catalog.pg_database',
  'pg_catalog.pg_stat_database',
  'pg_catalog.pg_stat_database_conflicts',
];

/** A new app database's name, which is also its role's: random, so that it tells nothing of its deployment. */
export function newAppDatabaseName(): string {
  return `slw_app_${randomBytes(16).toString('hex')}`;
}

/** A new app role's password. */
export function newAppDatabasePassword(): string {
  return randomBytes(24).toString('hex');
}

/** The one row a query of a single-row select (no FROM, or an aggregate) returns. */
function only<T>(rows: T[]): T {
  const row = rows[0];
  if (row === undefined) throw new Error('expected a row');
  return row;
}

function message(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

function checkConnectionLimit(connectionLimit: number): void {
  if (!Number.isInteger(connectionLimit) || connectionLimit < 1)
    throw new RangeError(`connection limit must be a positive integer, got ${connectionLimit}`);
}

async function isSuperuser(client: pg.ClientBase): Promise<boolean> {
  const result = await client.query<{ superuser: boolean }>(
    "select current_setting('is_superuser') = 'on' as superuser",
  );
  return only(result.rows).superuser;
}

/** A connection as the service (the pool's user and options) to another database of its server. */
function serviceClientOn(pool: pg.Pool, database: string): pg.Client {
  const { connectionString } = pool.options;
  // A connection string's database wins over the `database` option: replace it in the string.
  return quietClient(
    new pg.Client(
      connectionString
        ? { ...pool.options, connectionString: databaseUrl(connectionString, database) }
        : { ...pool.options, database },
    ),
  );
}

/**
 * A connection as an app's own role to its database, for the service to look inside it without running
 * the app's code (views, policies, functions it made) with the service's privileges. It takes one of the
 * role's connections (APP_ROLE_CONNECTION_LIMIT) while it is open; every statement has a time limit.
 */
export function appDatabaseClient(pool: pg.Pool, database: AppDatabase, statementTimeoutMs = 10_000): pg.Client {
  const { connectionString } = pool.options;
  const own = { user: database.role, password: database.password, database: database.name };
  const limits = { statement_timeout: statementTimeoutMs, connectionTimeoutMillis: 10_000 };
  return quietClient(
    new pg.Client(
      connectionString
        ? { ...pool.options, ...limits, connectionString: appDatabaseUrl(connectionString, database) }
        : { ...pool.options, ...limits, ...own },
    ),
  );
}

/**
 * Makes the database lists unreadable by PUBLIC inside an app's database (its role is PUBLIC there).
 * pg_database is a shared catalog but its privileges are kept per database, so this hides it in this
 * database only, which is where the app's role can connect. Needs a superuser (the catalogs' owner).
 */
async function hideDatabaseLists(pool: pg.Pool, database: string): Promise<void> {
  const client = serviceClientOn(pool, database);
  await client.connect();
  try {
    await client.query(`revoke select on ${DATABASE_LISTS.join(', ')} from public`);
  } finally {
    await client.end();
  }
}

/**
 * Creates the role and database `name` when missing (idempotent: a retried provision finds them). An
 * existing role gets the password and connection limit given (an operator's change to either is
 * overwritten).
 */
export async function createAppDatabase(
  pool: pg.Pool,
  name: string = newAppDatabaseName(),
  password: string = newAppDatabasePassword(),
  connectionLimit = APP_ROLE_CONNECTION_LIMIT,
): Promise<MadeAppDatabase> {
  checkConnectionLimit(connectionLimit);
  if (!new RegExp(APP_NAME_PATTERN).test(name)) throw new Error(`'${name}' is not an app database name`);
  const client = await pool.connect();
  let superuser: boolean;
  let created = false;
  try {
    const role = client.escapeIdentifier(name);
    const roleExists = await client.query('select 1 from pg_roles where rolname = $1', [name]);
    // CREATE ROLE takes no parameters: the password is a literal, escaped by the driver; the limit a
    // checked integer.
    const options = `login connection limit ${connectionLimit} password ${client.escapeLiteral(password)}`;
    if (roleExists.rowCount === 0) await client.query(`create role ${role} ${options}`);
    else await client.query(`alter role ${role} ${options}`);
    superuser = await isSuperuser(client);
    const dbExists = await client.query('select 1 from pg_database where datname = $1', [name]);
    if (dbExists.rowCount === 0) {
      // Giving a database to a role needs the right to SET ROLE to it, and dropping it the owner's
      // privileges; a CREATEROLE role gets neither by making the role (PostgreSQL 16+ grants it ADMIN
      // only): it grants the role to itself. Before 16 a plain membership gives both.
      if (!superuser) {
        const version = await client.query<{ version: number }>(
          "select current_setting('server_version_num')::int as version",
        );
        const how = only(version.rows).version >= 160000 ? ' with set true, inherit true' : '';
        await client.query(`grant ${role} to current_user${how}`);
      }
      await client.query(`create database ${role} owner ${role}`);
      created = true;
    }
    // Other apps' roles must not even connect to it.
    await client.query(`revoke connect, temporary on database ${role} from public`);
  } finally {
    client.release();
  }
  // Before the app gets its URL. A service that is no superuser cannot (docs/operations.md): the names
  // stay readable, which the service's start does not warn about since running as one is no remedy.
  if (superuser) await hideDatabaseLists(pool, name);
  return { name, role: name, password, created };
}

/** Whether the database `name` exists on the server (one catalog read: what a deploy checks first). */
export async function appDatabaseExists(pool: pg.Pool, name: string): Promise<boolean> {
  const found = await pool.query('select 1 from pg_database where datname = $1', [name]);
  return (found.rowCount ?? 0) > 0;
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

/** Revokes CONNECT and TEMPORARY from PUBLIC on the service's databases; warns of each still open. */
async function closeServiceDatabases(client: pg.ClientBase, user: string, warnings: string[]): Promise<void> {
  const current = await client.query<{ name: string }>('select current_database() as name');
  const names = [...new Set(['postgres', 'template1', only(current.rows).name])];
  const errors = new Map<string, string>();
  for (const name of names) {
    // A non-owner's REVOKE only warns ("no privileges could be revoked"): what it did is checked below.
    await client
      .query(`revoke connect, temporary on database ${client.escapeIdentifier(name)} from public`)
      .catch((error: unknown) => errors.set(name, message(error)));
  }
  // Databases (of those that exist) where PUBLIC still has CONNECT or TEMPORARY; a NULL datacl is the
  // default ACL, which grants both. A replica starting at the same moment may have made our REVOKE fail
  // ("tuple concurrently updated") while doing it itself: this finds the database closed all the same.
  const open = await client.query<{ name: string; owner: string }>(
    `select d.datname as name, d.datdba::regrole::text as owner
       from pg_database d
      where d.datname = any($1)
        and exists (select 1 from aclexplode(coalesce(d.datacl, acldefault('d', d.datdba))) a
                     where a.grantee = 0 and a.privilege_type in ('CONNECT', 'TEMPORARY'))`,
    [names],
  );
  for (const { name, owner } of open.rows) {
    const error = errors.get(name);
    warnings.push(
      `app roles can connect to database ${client.escapeIdentifier(name)}: the service's role ${user} could not ` +
        `revoke CONNECT from PUBLIC on it (${error ?? `it is not its owner ${owner}, nor a superuser`}); ` +
        `as ${owner} run: REVOKE CONNECT, TEMPORARY ON DATABASE ${client.escapeIdentifier(name)} FROM PUBLIC`,
    );
  }
}

/** Gives the connection limit to app roles made before there was one (or whose limit was lifted). */
async function limitAppRoles(client: pg.ClientBase, warnings: string[]): Promise<void> {
  const unlimited = await client.query<{ name: string }>(
    'select rolname as name from pg_roles where rolname ~ $1 and rolconnlimit = -1 and not rolsuper order by 1',
    [APP_NAME_PATTERN],
  );
  const failed: string[] = [];
  for (const { name } of unlimited.rows) {
    await client
      .query(`alter role ${client.escapeIdentifier(name)} connection limit ${APP_ROLE_CONNECTION_LIMIT}`)
      .catch(async (error: unknown) => {
        // A deployment deleted meanwhile took its role along: nothing to limit.
        const gone = await client.query('select 1 from pg_roles where rolname = $1', [name]);
        if (gone.rowCount !== 0) failed.push(`${name} (${message(error)})`);
      });
  }
  if (failed.length > 0)
    warnings.push(
      `app roles without a connection limit: ${failed.join(', ')}; ` +
        `run ALTER ROLE <role> CONNECTION LIMIT ${APP_ROLE_CONNECTION_LIMIT} for each as a role that may`,
    );
}

/** Hides the database lists in app databases made before they were hidden (superuser only). */
async function hideListsInAppDatabases(pool: pg.Pool, client: pg.ClientBase, warnings: string[]): Promise<void> {
  const databases = await client.query<{ name: string }>(
    'select datname as name from pg_database where datname ~ $1 and datallowconn order by 1',
    [APP_NAME_PATTERN],
  );
  const failed: string[] = [];
  // A few at a time: one connection each, and the start waits for them.
  const queue = databases.rows.map((r) => r.name);
  const work = async () => {
    for (let name = queue.shift(); name !== undefined; name = queue.shift()) {
      const database = name;
      await hideDatabaseLists(pool, database).catch(async (error: unknown) => {
        // Dropped meanwhile (a deployment deleted): nothing to hide.
        const gone = await client.query('select 1 from pg_database where datname = $1', [database]);
        if (gone.rowCount !== 0) failed.push(`${database} (${message(error)})`);
      });
    }
  };
  await Promise.all(Array.from({ length: 4 }, work));
  if (failed.length > 0)
    warnings.push(`app roles can list the server's databases from their databases: ${failed.sort().join(', ')}`);
}

/**
 * Whether the server keeps at least the service's pool of connection slots for the service's role, so
 * apps taking every other slot cannot keep it from connecting. Superusers may use both kinds of
 * reserved slots; other roles those of reserved_connections (PostgreSQL 16+) when they have the
 * privileges of pg_use_reserved_connections.
 */
async function checkReservedConnections(
  pool: pg.Pool,
  client: pg.ClientBase,
  user: string,
  warnings: string[],
): Promise<void> {
  const result = await client.query<{
    superuser: boolean;
    max: number;
    superuser_reserved: number;
    reserved: number | null;
    may_use_reserved: boolean;
  }>(
    `select current_setting('is_superuser') = 'on' as superuser,
            current_setting('max_connections')::int as max,
            current_setting('superuser_reserved_connections')::int as superuser_reserved,
            current_setting('reserved_connections', true)::int as reserved,
            case when exists (select 1 from pg_roles where rolname = 'pg_use_reserved_connections')
                 then pg_has_role('pg_use_reserved_connections', 'USAGE') else false end as may_use_reserved`,
  );
  const { superuser, max, superuser_reserved, reserved, may_use_reserved } = only(result.rows);
  // reserved_connections is null before PostgreSQL 16, which has it.
  const kept = superuser ? superuser_reserved + (reserved ?? 0) : may_use_reserved ? (reserved ?? 0) : 0;
  // pg's default pool size when none is given.
  const needed = pool.options.max ?? 10;
  if (kept >= needed) return;
  const remedy = superuser
    ? `raise superuser_reserved_connections to at least ${needed} per service process`
    : reserved === null
      ? `before PostgreSQL 16 only superusers get reserved slots: upgrade to 16 or later for reserved_connections`
      : `set reserved_connections to at least ${needed} per service process and GRANT pg_use_reserved_connections TO ${user}`;
  warnings.push(
    `only ${kept} of the server's ${max} connection slots are kept for the service's role ${user}, fewer than its ` +
      `pool of ${needed}: apps that take every other slot can keep the service from connecting; ${remedy} ` +
      `(docs/operations.md)`,
  );
}

/**
 * Closes the service's server to app roles, idempotently; run at every start of the local data plane,
 * before any app starts. It revokes CONNECT (and TEMPORARY) from PUBLIC on the service's own database,
 * `postgres` and `template1` (superusers, as the service and the tests connect to them, are not held by
 * CONNECT privileges; owners keep theirs), gives app roles made before connection limits existed the
 * default one, hides the database lists in app databases made before they were hidden, and checks that
 * the server keeps connection slots for the service.
 *
 * What cannot be done, as with DATABASE_URL a service's role that owns none of these databases, does
 * not fail the start: it comes back as warnings, one line each, for the caller to log.
 */
export async function protectServiceDatabases(pool: pg.Pool): Promise<string[]> {
  const warnings: string[] = [];
  const client = await pool.connect();
  try {
    const self = await client.query<{ user: string }>('select current_user as user');
    const user = client.escapeIdentifier(only(self.rows).user);
    const superuser = await isSuperuser(client);
    // Each step on its own: one that fails unexpectedly (a server that differs) leaves the others done.
    const step = (what: string, run: () => Promise<void>) =>
      run().catch((error: unknown) => {
        warnings.push(`could not ${what}: ${message(error)}`);
      });
    await step('close the service databases to app roles', () => closeServiceDatabases(client, user, warnings));
    await step('give app roles a connection limit', () => limitAppRoles(client, warnings));
    if (superuser)
      await step('hide the database lists in app databases', () => hideListsInAppDatabases(pool, client, warnings));
    await step('check the connection slots kept for the service', () =>
      checkReservedConnections(pool, client, user, warnings),
    );
  } finally {
    client.release();
  }
  return warnings;
}
