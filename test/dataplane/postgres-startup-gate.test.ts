/**
 * An app's database forward (src/dataplane/host-forwards.ts with src/dataplane/postgres-startup-gate.ts)
 * lets a connection reach the PostgreSQL server only as the app's own role into its own database, even on
 * a server that would let anyone in (the CI's machine PostgreSQL trusts every local login): the
 * attacker's connections ask for the superuser, other databases, replication, a bad protocol and a huge
 * or endless start-up, and none of them reaches the server.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import pg from 'pg';
import pino from 'pino';
import {
  appDatabaseUrl,
  createAppDatabase,
  dropAppDatabase,
  type AppDatabase,
} from '../../src/dataplane/app-database.ts';
import { openHostForward, type HostForward } from '../../src/dataplane/host-forwards.ts';
import { createTestDatabase, type TestDatabase } from '../support/harness.ts';

let database: TestDatabase;
let app: AppDatabase;
let appUrl: URL;
let forward: HostForward;
let dir: string;
const warnings: string[] = [];

before(async () => {
  database = await createTestDatabase();
  app = await createAppDatabase(database.pool);
  appUrl = new URL(appDatabaseUrl(database.url, app));
  dir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-gate-'));
  const server = new URL(database.url);
  forward = await openHostForward(
    dir,
    {
      name: 'database',
      host: server.hostname,
      port: Number(server.port || 5432),
      insidePort: 5432,
      maxConnections: 10,
      postgresLogin: { user: app.role, database: app.name },
    },
    pino({ level: 'warn' }, { write: (line: string) => warnings.push((JSON.parse(line) as { msg: string }).msg) }),
  );
  await fs.symlink(forward.socketPath, path.join(dir, '.s.PGSQL.5432'));
});

after(async () => {
  await forward.close();
  await fs.rm(dir, { recursive: true, force: true });
  await dropAppDatabase(database.pool, app.name);
  await database.drop();
});

/** Logs in through the forward; the session's user and database, or the refusal. */
async function login(
  parts: { user?: string; password?: string; database?: string; ssl?: boolean; replication?: string } = {},
): Promise<{ user: string; database: string } | Error> {
  const client = new pg.Client({
    user: parts.user ?? app.role,
    password: parts.password ?? decodeURIComponent(appUrl.password),
    database: parts.database ?? app.name,
    ssl: parts.ssl ? { rejectUnauthorized: false } : false,
    ...(parts.replication ? { replication: parts.replication } : {}),
    // pg reaches a Unix socket as <directory>/.s.PGSQL.<port>: a link there leads to the forward.
    host: dir,
    port: 5432,
  });
  try {
    await client.connect();
    const who = await client.query<{ user: string; database: string }>(
      'select current_user as user, current_database() as database',
    );
    await client.end();
    return who.rows[0]!;
  } catch (error) {
    await client.end().catch(() => undefined);
    return error as Error;
  }
}

/** Sends raw bytes through the forward; what comes back before it closes (or after 2 s). */
async function raw(bytes: Buffer, keepOpenMs = 0): Promise<Buffer> {
  return await new Promise((resolve, reject) => {
    const socket = net.createConnection(forward.socketPath);
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => {
      socket.destroy();
      resolve(Buffer.concat(chunks));
    }, 2_000 + keepOpenMs);
    socket.on('data', (c) => chunks.push(c));
    socket.on('close', () => {
      clearTimeout(timer);
      resolve(Buffer.concat(chunks));
    });
    socket.on('error', reject);
    socket.write(bytes);
  });
}

function startup(parameters: Record<string, string>, protocol = 196608): Buffer {
  const body = Buffer.from(
    Object.entries(parameters)
      .map(([k, v]) => `${k}\0${v}\0`)
      .join('') + '\0',
  );
  const head = Buffer.alloc(8);
  head.writeInt32BE(body.length + 8, 0);
  head.writeInt32BE(protocol, 4);
  return Buffer.concat([head, body]);
}

/** Sessions the server has for the app's role or in its database (other test files share the server). */
async function appSessions(): Promise<number> {
  const rows = await database.pool.query<{ n: string }>(
    'select count(*) as n from pg_stat_activity where (usename = $1 or datname = $2) and pid <> pg_backend_pid()',
    [app.role, app.name],
  );
  return Number(rows.rows[0]!.n);
}

test('the app logs in as its own role to its own database through the forward', async () => {
  assert.deepEqual(await login(), { user: app.role, database: app.name });
  assert.deepEqual(await login(), { user: app.role, database: app.name });
});

test('another role, another database, a superuser or replication is refused before the server sees it', async () => {
  const superuser = new URL(database.url).username || 'postgres';
  const serviceDatabase = new URL(database.url).pathname.slice(1);
  const attempts = [
    { user: superuser, password: '', database: serviceDatabase },
    { user: superuser, password: '', database: 'postgres' },
    { user: superuser, database: app.name },
    { database: 'postgres' },
    { database: 'template1' },
    { database: serviceDatabase },
    { replication: 'database' },
    { replication: 'true' },
  ];
  for (const parts of attempts) {
    const result = await login(parts);
    assert.ok(result instanceof Error, `logged in with ${JSON.stringify(parts)}: ${JSON.stringify(result)}`);
    assert.match(result.message, /may connect only as role|replication connections are not allowed/);
    assert.equal((result as pg.DatabaseError).code, '28000');
  }
  assert.ok(warnings.some((w) => /another login; refused/.test(w)));
});

test('an SSL request is answered "no" and the start-up after it is still checked', async () => {
  const withSsl = await login({ ssl: true });
  assert.ok(withSsl instanceof Error);
  assert.match(withSsl.message, /does not support SSL/);

  const ssl = Buffer.alloc(8);
  ssl.writeInt32BE(8, 0);
  ssl.writeInt32BE(80877103, 4);
  const answer = await raw(Buffer.concat([ssl, startup({ user: 'postgres', database: 'postgres' })]));
  assert.equal(answer.subarray(0, 1).toString(), 'N');
  assert.equal(answer.subarray(1, 2).toString(), 'E');
  assert.match(answer.toString('utf8'), /28000/);
});

test('a malformed, oversized or old-protocol start-up is closed without reaching the server', async () => {
  const huge = Buffer.alloc(8);
  huge.writeInt32BE(1 << 30, 0);
  huge.writeInt32BE(196608, 4);
  assert.match((await raw(huge)).toString('utf8'), /invalid startup packet length/);

  const v2 = startup({ user: app.role, database: app.name }, 2 << 16);
  assert.match((await raw(v2)).toString('utf8'), /unsupported frontend protocol/);

  const unterminated = startup({ user: app.role, database: app.name }).subarray(0, 20);
  const truncated = Buffer.from(unterminated);
  truncated.writeInt32BE(truncated.length, 0);
  assert.match((await raw(truncated)).toString('utf8'), /invalid startup packet layout/);

  const twice = startup({ user: app.role, database: app.name });
  const doubled = Buffer.concat([twice.subarray(0, twice.length - 1), Buffer.from(`user\0postgres\0\0`)]);
  doubled.writeInt32BE(doubled.length, 0);
  assert.match((await raw(doubled)).toString('utf8'), /given twice/);

  // None of them holds a connection open (the forward sees each close a moment after the client) or
  // reached the server.
  for (let i = 0; i < 100 && forward.open > 0; i++) await new Promise((r) => setTimeout(r, 20));
  assert.equal(forward.open, 0);
  assert.equal(await appSessions(), 0);
});
