/**
 * The service's PostgreSQL is safe from the apps that get a database on it (src/dataplane/app-database.ts),
 * seen from an app's code with its DATABASE_URL: it connects to its own database and no other, holds at
 * most its role's connection limit while the service keeps running queries, and cannot list the other
 * apps' databases. On an embedded server of its own: a service role that is no superuser (as with
 * DATABASE_URL) still makes app databases and says what it could not protect, and apps taking every
 * connection slot they can leave the service the slots reserved for it.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import pg from 'pg';
import pino from 'pino';
import { withClient } from '../../src/db/admin-client.ts';
import { connect } from '../../src/db/database.ts';
import {
  SERVICE_RESERVED_CONNECTIONS,
  startEmbeddedPostgres,
  type EmbeddedPostgres,
} from '../../src/db/embedded-postgres.ts';
import {
  APP_ROLE_CONNECTION_LIMIT,
  appDatabaseUrl,
  createAppDatabase,
  dropAppDatabase,
  protectServiceDatabases,
  type AppDatabase,
} from '../../src/dataplane/app-database.ts';
import { createTestDatabase, type TestDatabase } from '../support/harness.ts';

/** Connects, or returns the server's refusal (any other failure is thrown). */
async function tryConnect(url: string): Promise<pg.Client | pg.DatabaseError> {
  const client = new pg.Client({ connectionString: url });
  try {
    await client.connect();
    return client;
  } catch (error) {
    if (error instanceof pg.DatabaseError) return error;
    throw error;
  }
}

async function refusal(url: string): Promise<pg.DatabaseError> {
  const result = await tryConnect(url);
  if (result instanceof pg.Client) {
    await result.end();
    assert.fail(`connected to ${new URL(url).pathname}`);
  }
  return result;
}

/** Opens connections until the server refuses one (at most `max`); returns them and the refusal. */
async function connectUntilRefused(
  url: string,
  max: number,
): Promise<{ clients: pg.Client[]; refused: pg.DatabaseError | null }> {
  const clients: pg.Client[] = [];
  while (clients.length < max) {
    const result = await tryConnect(url);
    if (result instanceof pg.DatabaseError) return { clients, refused: result };
    clients.push(result);
  }
  return { clients, refused: null };
}

function withDatabase(url: string, database: string): string {
  const out = new URL(url);
  out.pathname = `/${database}`;
  return out.toString();
}

let database: TestDatabase;
let warnings: string[];
const made: string[] = [];

async function makeApp(
  pool: pg.Pool,
  serviceUrl: string,
  options: { name?: string; password?: string; connectionLimit?: number } = {},
): Promise<{ app: AppDatabase; url: string }> {
  const app = await createAppDatabase(pool, options.name, options.password, options.connectionLimit);
  if (!made.includes(app.name)) made.push(app.name);
  return { app, url: appDatabaseUrl(serviceUrl, app) };
}

before(async () => {
  database = await createTestDatabase();
  warnings = await protectServiceDatabases(database.pool);
});

after(async () => {
  for (const name of made) await dropAppDatabase(database.pool, name);
  await database.drop();
});

test('an app role connects to its own database and to no other database of the server', async () => {
  // The test's admin connection is a superuser: every revoke it asks for is done.
  assert.deepEqual(
    warnings.filter((w) => w.includes('CONNECT')),
    [],
  );
  const { app, url } = await makeApp(database.pool, database.url);
  const other = await makeApp(database.pool, database.url);

  const own = new pg.Client({ connectionString: url });
  await own.connect();
  try {
    const who = await own.query<{ user: string; database: string }>(
      'select current_user as user, current_database() as database',
    );
    assert.deepEqual(who.rows, [{ user: app.role, database: app.name }]);
    await own.query('create table notes (id serial primary key, body text not null)');
    await own.query("insert into notes (body) values ('hello')");
    assert.equal((await own.query('select body from notes')).rows[0]?.body, 'hello');
  } finally {
    await own.end();
  }

  const serviceDatabase = new URL(database.url).pathname.slice(1);
  for (const name of ['postgres', 'template1', serviceDatabase, other.app.name]) {
    const error = await refusal(withDatabase(url, name));
    assert.equal(error.code, '42501', `${name}: ${error.message}`);
    assert.match(error.message, /permission denied for database/);
  }
  // Still refused after protecting again (it is idempotent, run at every start).
  assert.deepEqual(
    (await protectServiceDatabases(database.pool)).filter((w) => w.includes('CONNECT')),
    [],
  );
  assert.equal((await refusal(withDatabase(url, 'postgres'))).code, '42501');
});

test('an app role holds at most its connection limit while the service keeps running queries', async () => {
  const { app, url } = await makeApp(database.pool, database.url, { connectionLimit: 3 });
  const { clients, refused } = await connectUntilRefused(url, 10);
  try {
    assert.equal(clients.length, 3);
    assert.ok(refused, 'a connection beyond the limit was refused');
    assert.equal(refused.code, '53300');
    assert.match(refused.message, /too many connections for role/);
    // Meanwhile the service's pool runs queries, several at once.
    const answers = await Promise.all(
      Array.from({ length: 5 }, (_, i) => database.pool.query<{ n: number }>('select $1::int as n', [i])),
    );
    assert.deepEqual(
      answers.map((a) => a.rows[0]?.n),
      [0, 1, 2, 3, 4],
    );
    // The app cannot lift its own limit.
    const [first] = clients;
    assert.ok(first);
    await assert.rejects(
      first.query(`alter role ${first.escapeIdentifier(app.role)} connection limit -1`),
      (error: unknown) => error instanceof pg.DatabaseError && error.code === '42501',
    );
  } finally {
    await Promise.all(clients.map((c) => c.end()));
  }
});

test('app roles get the default connection limit, existing roles too when made again or protected', async () => {
  const limitOf = async (role: string) =>
    (
      await database.pool.query<{ limit: number }>('select rolconnlimit as limit from pg_roles where rolname = $1', [
        role,
      ])
    ).rows[0]?.limit;
  const { app } = await makeApp(database.pool, database.url);
  assert.equal(await limitOf(app.role), APP_ROLE_CONNECTION_LIMIT);

  // A role made before limits existed: provisioning again gives it the limit, and keeps its password.
  await database.pool.query(`alter role "${app.role}" connection limit -1`);
  const again = await makeApp(database.pool, database.url, { name: app.name, password: app.password });
  assert.equal(await limitOf(app.role), APP_ROLE_CONNECTION_LIMIT);
  const client = new pg.Client({ connectionString: again.url });
  await client.connect();
  await client.end();

  // The start of the service gives it to every app role without one.
  await database.pool.query(`alter role "${app.role}" connection limit -1`);
  await protectServiceDatabases(database.pool);
  assert.equal(await limitOf(app.role), APP_ROLE_CONNECTION_LIMIT);
});

test("an app role cannot list the server's other databases", async () => {
  const { url } = await makeApp(database.pool, database.url);
  const other = await makeApp(database.pool, database.url);
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    // Each catalog that lists databases by name: refused, or at least without the other app's.
    for (const query of [
      'select datname from pg_database',
      'select datname from pg_stat_database',
      'select datname from pg_stat_database_conflicts',
    ]) {
      const names: (string | null)[] = await client.query<{ datname: string | null }>(query).then(
        (result) => result.rows.map((r) => r.datname),
        (error: unknown) => {
          assert.ok(error instanceof pg.DatabaseError && error.code === '42501', `${query}: ${String(error)}`);
          return [];
        },
      );
      assert.ok(!names.includes(other.app.name), `${query} shows ${other.app.name}`);
    }
    // What the app needs from its connection still works.
    const own = await client.query<{ database: string; size: string }>(
      'select current_database() as database, pg_database_size(current_database())::text as size',
    );
    assert.equal(own.rows.length, 1);
  } finally {
    await client.end();
  }
});

describe('an embedded server of its own', () => {
  let dir: string;
  let server: EmbeddedPostgres;
  before(async () => {
    dir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-appdb-'));
    // The embedded server runs as 'postgres' when we are root: it must be able to enter the directory.
    await fs.chmod(dir, 0o711);
    server = await startEmbeddedPostgres({ clusterDir: path.join(dir, 'postgres'), logger: pino({ level: 'silent' }) });
  });
  after(async () => {
    // The server and its app databases go with the directory.
    await server.stop();
    await fs.rm(dir, { recursive: true, force: true });
  });

  test('a service role that is no superuser makes app databases and names what it cannot protect', async () => {
    // As with DATABASE_URL: a role with CREATEDB and CREATEROLE, owning its database and no other.
    const name = `slipway_svc_${randomBytes(4).toString('hex')}`;
    const password = randomBytes(12).toString('hex');
    await withClient(server.url, async (c) => {
      await c.query(`create role ${name} login createdb createrole password '${password}'`);
      await c.query(`create database ${name} owner ${name}`);
    });
    const url = new URL(server.url);
    url.username = name;
    url.password = password;
    url.pathname = `/${name}`;
    const service = connect(url.toString());
    try {
      const warnings = await protectServiceDatabases(service.pool);
      // postgres and template1 are the superuser's: still open to app roles, which it says, with the fix.
      const open = warnings.filter((w) => w.startsWith('app roles can connect'));
      assert.deepEqual(
        open.map((w) => /database "([^"]+)"/.exec(w)?.[1]),
        ['postgres', 'template1'],
      );
      assert.ok(open.every((w) => w.includes('REVOKE CONNECT, TEMPORARY ON DATABASE')));
      assert.ok(
        warnings.some((w) => w.includes('reserved_connections')),
        warnings.join('\n'),
      );

      const app = await createAppDatabase(service.pool);
      const appUrl = appDatabaseUrl(url.toString(), app);
      const own = new pg.Client({ connectionString: appUrl });
      await own.connect();
      await own.end();
      // Its own database it could close.
      assert.equal((await refusal(withDatabase(appUrl, name))).code, '42501');
      const limit = await service.pool.query('select rolconnlimit from pg_roles where rolname = $1', [app.role]);
      assert.equal(limit.rows[0]?.rolconnlimit, APP_ROLE_CONNECTION_LIMIT);
      // And it can drop what it made.
      await dropAppDatabase(service.pool, app.name);
      const left = await service.pool.query(
        'select 1 from pg_database where datname = $1 union all select 1 from pg_roles where rolname = $1',
        [app.name],
      );
      assert.equal(left.rowCount, 0);
    } finally {
      await service.db.destroy();
    }
  });

  test('apps taking every connection they can leave the service its reserved slots', async () => {
    // The service's pool as src/db/database.ts opens it.
    const service = connect(server.url);
    const held: pg.Client[] = [];
    try {
      assert.deepEqual(await protectServiceDatabases(service.pool), []);
      const settings = await service.pool.query<{ max: number; reserved: number }>(
        `select current_setting('max_connections')::int as max,
                current_setting('superuser_reserved_connections')::int as reserved`,
      );
      const { max, reserved } = settings.rows[0]!;
      assert.equal(reserved, SERVICE_RESERVED_CONNECTIONS);
      // Enough apps to ask for more than every slot the service does not keep.
      const count = Math.ceil((max - reserved) / APP_ROLE_CONNECTION_LIMIT) + 1;
      let last: pg.DatabaseError | null = null;
      for (let i = 0; i < count; i++) {
        const app = await createAppDatabase(service.pool);
        const { clients, refused } = await connectUntilRefused(
          appDatabaseUrl(server.url, app),
          APP_ROLE_CONNECTION_LIMIT + 1,
        );
        held.push(...clients);
        assert.ok(clients.length <= APP_ROLE_CONNECTION_LIMIT, `app ${i} holds ${clients.length} connections`);
        if (refused) last = refused;
      }
      assert.ok(last, 'the apps were refused connections');
      assert.equal(last.code, '53300');
      assert.match(last.message, /remaining connection slots are reserved/);

      // The service still gets its whole pool, each connection running a query, and one connection more.
      const pooled = await Promise.all(
        Array.from({ length: service.pool.options.max ?? 10 }, () => service.pool.connect()),
      );
      try {
        await Promise.all(pooled.map((c) => c.query('select 1')));
        const extra = new pg.Client({ connectionString: server.url });
        await extra.connect();
        await extra.end();
      } finally {
        for (const c of pooled) c.release();
      }
    } finally {
      await Promise.all(held.map((c) => c.end().catch(() => undefined)));
      await service.db.destroy();
    }
  });
});
