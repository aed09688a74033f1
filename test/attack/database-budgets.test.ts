/**
 * Apps reach the service's PostgreSQL through forwards that share budgets (src/dataplane/host-forwards.ts):
 * one per workspace and one for all apps. A tenant whose apps hold every connection their workspace may
 * have must leave other tenants' apps able to log in, and connections that never log in (a raw socket
 * that says nothing, or a start-up that stalls before its password) must neither count against a budget
 * nor be held for long. What the old code did: one budget for all apps, counted from the accept and held
 * for 15 s before a start-up was due, so six apps of one tenant holding 25 connections each closed every
 * other tenant's new connections, and unauthenticated sockets held slots as well as real logins.
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
import { openHostForward, type ConnectionBudget, type HostForward } from '../../src/dataplane/host-forwards.ts';
import { createTestDatabase, type TestDatabase } from '../support/harness.ts';

let database: TestDatabase;
const WORKSPACE_MAX = 6;
const allApps: ConnectionBudget = { name: 'all apps together', max: 10, open: 0 };
const budgetA: ConnectionBudget = { name: "workspace A's apps", max: WORKSPACE_MAX, open: 0 };
const budgetB: ConnectionBudget = { name: "workspace B's apps", max: WORKSPACE_MAX, open: 0 };

interface App {
  db: AppDatabase;
  url: URL;
  forward: HostForward;
  dir: string;
}
const apps: App[] = [];

async function appWith(budget: ConnectionBudget): Promise<App> {
  const db = await createAppDatabase(database.pool);
  const url = new URL(appDatabaseUrl(database.url, db));
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-budget-'));
  const server = new URL(database.url);
  const forward = await openHostForward(
    dir,
    {
      name: 'database',
      host: server.hostname,
      port: Number(server.port || 5432),
      insidePort: 5432,
      maxConnections: 15,
      budgets: [budget, allApps],
      postgresLogin: { user: db.role, database: db.name },
    },
    pino({ level: 'silent' }),
  );
  await fs.symlink(forward.socketPath, path.join(dir, '.s.PGSQL.5432'));
  const app = { db, url, forward, dir };
  apps.push(app);
  return app;
}

before(async () => {
  database = await createTestDatabase();
});
after(async () => {
  for (const app of apps) {
    await app.forward.close();
    await fs.rm(app.dir, { recursive: true, force: true });
    await dropAppDatabase(database.pool, app.db.name);
  }
  await database.drop();
});

async function connect(app: App): Promise<pg.Client | Error> {
  const client = new pg.Client({
    user: app.db.role,
    password: decodeURIComponent(app.url.password),
    database: app.db.name,
    host: app.dir,
    port: 5432,
  });
  client.on('error', () => undefined);
  try {
    await client.connect();
    await client.query('select 1');
    return client;
  } catch (error) {
    await client.end().catch(() => undefined);
    return error as Error;
  }
}

/** A socket to the forward that never says anything; resolves when the forward closes it. */
function silentSocket(app: App): { closed: Promise<void>; socket: net.Socket } {
  const socket = net.createConnection(app.forward.socketPath);
  socket.on('error', () => undefined);
  return { socket, closed: new Promise((resolve) => socket.once('close', () => resolve())) };
}

test("one workspace holding its whole budget leaves another workspace's app able to log in", async () => {
  const [a1, a2] = [await appWith(budgetA), await appWith(budgetA)];
  const b = await appWith(budgetB);
  const held: pg.Client[] = [];
  // Workspace A's two apps take every connection their workspace may have, and then some.
  let refused: Error | null = null;
  for (let i = 0; i < WORKSPACE_MAX + 3 && !refused; i++) {
    const got = await connect(i % 2 === 0 ? a1 : a2);
    if (got instanceof Error) refused = got;
    else held.push(got);
  }
  assert.equal(held.length, WORKSPACE_MAX, 'workspace A held its budget');
  assert.match(String(refused?.message), /too many connections: workspace A's apps may hold 6 database connections/);
  // Workspace B still logs in.
  const fromB = await connect(b);
  assert.ok(!(fromB instanceof Error), 'workspace B was refused');
  await fromB.end();
  for (const client of held) await client.end();
});

test('connections that never log in count against no budget and are closed within seconds', async () => {
  const a = await appWith(budgetA);
  const silent = Array.from({ length: 12 }, () => silentSocket(a));
  // Meanwhile logins go through: the silent ones take no budget.
  const client = await connect(a);
  assert.ok(!(client instanceof Error), 'a login was refused');
  await client.end();
  // And the forward closes them, having never counted them.
  await Promise.all(silent.map((s) => s.closed));
  assert.equal(budgetA.open, 0);
  assert.equal(allApps.open, 0);
});
