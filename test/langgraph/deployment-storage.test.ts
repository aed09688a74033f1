/**
 * `GET /v2/deployments/{id}/storage` (docs/langgraph.md, "How much space the state takes"): the size of
 * a deployment's own database and, for a LangGraph deployment, the rows and bytes of each table of its
 * state and the TTLs its instances apply.
 *
 * The databases here are made as the local data plane makes them (createAppDatabase, the runtime row
 * with the sealed password); their LangGraph tables as the launcher makes them, by its own schema
 * migrations, written into as the app's role.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import pg from 'pg';
import { appDatabaseUrl, createAppDatabase, type AppDatabase } from '../../src/dataplane/app-database.ts';
import { saveDeploymentRuntime } from '../../src/store/deployment-runtimes.ts';
import {
  buildReplicaApp,
  client,
  createTestApp,
  dropAppDatabases,
  newWorkspaceAdmin,
  type TestApp,
} from '../helpers.ts';

let t: TestApp;
let app: FastifyInstance;

before(async () => {
  t = await createTestApp();
  // The service as main.ts builds it: with its pool, on whose server the apps' databases are.
  app = await buildReplicaApp(t, { pool: t.database.pool });
});

after(async () => {
  await app?.close();
  if (t) await dropAppDatabases(t.database);
  await t?.close();
});

async function newDeployment(name: string): Promise<string> {
  const made = await client(app).post('/v2/deployments', { name, source: 'internal_source' });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  return made.body.id;
}

/** The deployment's database, as the data plane makes it on first deploy. */
async function giveDatabase(deploymentId: string): Promise<AppDatabase> {
  const database = await createAppDatabase(t.database.pool);
  await saveDeploymentRuntime(t.database.db, deploymentId, t.workspaceId, {
    databaseName: database.name,
    roleName: database.role,
    databasePasswordSealed: t.secretBox.seal(database.password),
  });
  return database;
}

/** Runs `sql` in the app's database as the app's own role, as its code would. */
async function asApp(database: AppDatabase, ...statements: string[]): Promise<void> {
  const connection = new pg.Client({ connectionString: appDatabaseUrl(t.database.url, database) });
  await connection.connect();
  try {
    for (const statement of statements) await connection.query(statement);
  } finally {
    await connection.end();
  }
}

/** What the launcher makes (a part of it): the threads, runs and settings tables, with the TTLs row. */
const LANGGRAPH_TABLES = [
  'create schema langgraph',
  `create table langgraph.threads (thread_id uuid primary key, "values" jsonb)`,
  `create table langgraph.runs (run_id uuid primary key, thread_id uuid references langgraph.threads)`,
  `create table langgraph.settings (name text primary key, value jsonb not null, updated_at timestamptz not null default now())`,
];

test("another workspace's key gets 404 for the storage of a deployment, as for the deployment", async () => {
  const id = await newDeployment('storage-of-another-workspace');
  await giveDatabase(id);
  const { id: otherWorkspace } = await client(app, t.orgKey)
    .post('/v2/workspaces', { name: 'storage-intruders' })
    .then((r) => r.body as { id: string });
  const intruder = await newWorkspaceAdmin({ app, orgKey: t.orgKey }, otherWorkspace, 'storage-intruder');
  const answer = await client(app, intruder.key).get(`/v2/deployments/${id}/storage`);
  assert.equal(answer.status, 404);
  assert.equal(answer.body.detail, `Deployment ID ${id} not found.`);
  assert.equal(answer.body.database, undefined, 'nothing of it is told');
  // Without a key: 401, nothing measured.
  assert.equal((await client(app, null).get(`/v2/deployments/${id}/storage`)).status, 401);
  assert.equal((await client(app).get('/v2/deployments/not-a-uuid/storage')).status, 422);
});

test('a LangGraph deployment: its database size, each state table with rows and bytes, and the TTLs in force', async () => {
  const id = await newDeployment('storage-of-langgraph');
  const database = await giveDatabase(id);
  await asApp(
    database,
    ...LANGGRAPH_TABLES,
    `insert into langgraph.threads select gen_random_uuid(), jsonb_build_object('text', repeat('x', 2000)) from generate_series(1, 3)`,
    `insert into langgraph.runs select gen_random_uuid(), thread_id from langgraph.threads limit 2`,
    `insert into langgraph.settings (name, value) values ('ttl', '{"checkpointer": {"strategy": "delete", "default_ttl": 43200, "sweep_interval_minutes": 10}, "store": null}')`,
  );
  const answer = await client(app).get(`/v2/deployments/${id}/storage`);
  assert.equal(answer.status, 200, JSON.stringify(answer.body));
  const { database: measured, langgraph } = answer.body;
  assert.equal(measured.name, database.name);
  assert.ok(measured.size_bytes > 1_000_000, `a database has its catalogs: ${measured.size_bytes}`);
  const tables = Object.fromEntries(langgraph.tables.map((table: { name: string }) => [table.name, table]));
  assert.deepEqual(Object.keys(tables), ['runs', 'settings', 'threads']);
  assert.equal(tables.threads.rows, 3);
  assert.equal(tables.threads.rows_estimated, false);
  assert.equal(tables.runs.rows, 2);
  assert.ok(tables.threads.size_bytes > 0);
  assert.equal(
    langgraph.size_bytes,
    langgraph.tables.reduce((sum: number, table: { size_bytes: number }) => sum + table.size_bytes, 0),
  );
  assert.deepEqual(langgraph.ttl.checkpointer, { strategy: 'delete', default_ttl: 43200, sweep_interval_minutes: 10 });
  assert.equal(langgraph.ttl.store, null);
});

test('a deployment without LangGraph state gets its database size and no langgraph section; one without a database neither', async () => {
  const plain = await newDeployment('storage-of-plain-app');
  await giveDatabase(plain);
  const answer = await client(app).get(`/v2/deployments/${plain}/storage`);
  assert.equal(answer.status, 200, JSON.stringify(answer.body));
  assert.ok(answer.body.database.size_bytes > 0);
  assert.equal(answer.body.langgraph, null);

  const none = await newDeployment('storage-of-no-database');
  const empty = await client(app).get(`/v2/deployments/${none}/storage`);
  assert.equal(empty.status, 200, JSON.stringify(empty.body));
  assert.equal(empty.body.database, null);
  assert.equal(empty.body.langgraph, null);
});

test("the app's own tables cannot hang or break the answer, nor run its code with the service's rights", async () => {
  const id = await newDeployment('storage-of-hostile-app');
  const database = await giveDatabase(id);
  await asApp(
    database,
    ...LANGGRAPH_TABLES,
    `insert into langgraph.threads values (gen_random_uuid(), null)`,
    // Counting threads would wait a minute, and would make a superuser if the service's role ran it.
    `create function langgraph.slow() returns boolean language plpgsql as $$
       begin
         perform pg_sleep(60);
         execute 'alter role ' || quote_ident(session_user) || ' superuser';
         return true;
       end $$`,
    'alter table langgraph.threads enable row level security',
    'alter table langgraph.threads force row level security',
    'create policy everything on langgraph.threads using (langgraph.slow())',
    // TTLs that are not TTLs.
    `insert into langgraph.settings (name, value) values ('ttl', '{"checkpointer": {"default_ttl": "forever"}, "store": [1]}')`,
  );
  const answer = await client(app).get(`/v2/deployments/${id}/storage`);
  assert.equal(answer.status, 200, JSON.stringify(answer.body));
  const threads = answer.body.langgraph.tables.find((table: { name: string }) => table.name === 'threads');
  assert.equal(threads.rows_estimated, true, 'the count gave up; the estimate is given and said to be one');
  assert.equal(answer.body.langgraph.ttl.checkpointer, null);
  assert.equal(answer.body.langgraph.ttl.store, null);
  const roles = await t.database.pool.query<{ super: boolean }>(
    'select rolsuper as super from pg_roles where rolname = $1',
    [database.role],
  );
  assert.deepEqual(roles.rows, [{ super: false }]);
});
