/**
 * Attack by an app's own code on what its database login tells it of other tenants. The role catalogs
 * (pg_roles, pg_user) stay readable by every role, and name every app's role, which is its database's
 * name: those names must tell nothing of the deployments (src/dataplane/app-database.ts names them at
 * random; they were `slw_app_<deployment id>`, so any app could list every tenant's deployment ids).
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { withClient } from '../../src/db/admin-client.ts';
import { dropAppDatabase } from '../../src/dataplane/app-database.ts';
import { provisionAppResources } from '../../src/dataplane/app-provisioning.ts';
import type { AppConfig } from '../../src/domain/app-config.ts';
import { createOwnPlaneReports } from '../../src/service/lifecycle-reports.ts';
import { client, createTestApp, type TestApp } from '../support/harness.ts';

const APP_CONFIG: AppConfig = {
  runtime: 'node',
  install: null,
  build: null,
  start: 'node server.js',
  worker: null,
  healthCheckPath: '/',
  env: {},
  database: true,
};

let t: TestApp;
const WORKER = { id: 'test-node/1', nodePrefix: 'test-node/' };
const made: string[] = [];

/** What the own data plane's provisioning is given, its reports the lifecycle's as the worker's are. */
const provisioning = () => ({
  db: t.database.db,
  pool: t.database.pool,
  databaseUrl: t.database.url,
  secretBox: t.secretBox,
  reports: createOwnPlaneReports(t.database.db, {
    owner: WORKER,
    leaseSeconds: 30,
  }),
});

/** A deployment made through the API, with its database made as the data plane makes it. */
async function deploymentWithDatabase(name: string): Promise<{ id: string; databaseUrl: string }> {
  const created = await client(t.app).post('/v2/deployments', {
    name,
    source: 'internal_container',
    source_revision_config: { image_uri: 'registry.example.com/agent:1' },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const id: string = created.body.id;
  // Run by the worker whose reports these are: its facts rest on its lease (src/service/lifecycle-reports.ts).
  await t.database.pool.query('update deployments set runner_owner = $2 where id = $1', [id, WORKER.id]);
  const { databaseUrl } = await provisionAppResources(provisioning(), { id, workspace_id: t.workspaceId }, APP_CONFIG);
  assert.ok(databaseUrl);
  made.push(decodeURIComponent(new URL(databaseUrl).pathname.slice(1)));
  return { id, databaseUrl };
}

before(async () => {
  t = await createTestApp();
});
after(async () => {
  for (const name of made) await dropAppDatabase(t.database.pool, name).catch(() => undefined);
  await t?.close();
});

test("an app's database login tells it nothing of the other deployments: no id in any name it can list", async () => {
  const attacker = await deploymentWithDatabase('attacker');
  const victim = await deploymentWithDatabase('victim');
  const seen = await withClient(attacker.databaseUrl, async (db) => {
    const names: string[] = [];
    for (const query of [
      'select datname as name from pg_catalog.pg_database',
      'select rolname as name from pg_catalog.pg_roles',
      'select usename as name from pg_catalog.pg_user',
      'select usename as name from pg_catalog.pg_stat_activity where usename is not null',
    ]) {
      // A catalog the app may not read lists nothing.
      const rows = await db.query<{ name: string }>(query).then(
        (result) => result.rows,
        () => [],
      );
      names.push(...rows.map((row) => row.name));
    }
    // The honest part: the app's own login works and knows itself.
    const me = await db.query<{ me: string }>('select current_user as me');
    assert.equal(me.rows[0]!.me, decodeURIComponent(new URL(attacker.databaseUrl).username));
    return names;
  });
  assert.ok(seen.length > 0, 'the role catalogs are readable (what the test looks through)');
  const victimId = victim.id.replace(/-/g, '');
  for (const name of seen)
    assert.ok(
      !name.replace(/-/g, '').includes(victimId),
      `the app listed a name with another deployment's id: ${name}`,
    );
  // Its own id is not in its own name either: the names are random.
  assert.ok(!seen.some((name) => name.includes(attacker.id.replace(/-/g, ''))));
});

test('provisioning again finds the same database: its name and password are kept before it is made', async () => {
  const first = await deploymentWithDatabase('again');
  const id = (await t.database.pool.query<{ id: string }>("select id from deployments where name = 'again'")).rows[0]!
    .id;
  const second = await provisionAppResources(provisioning(), { id, workspace_id: t.workspaceId }, APP_CONFIG);
  assert.equal(second.databaseUrl, first.databaseUrl);
  const events = await t.database.pool.query(
    "select 1 from events where deployment_id = $1 and type = 'deployment.database_created'",
    [id],
  );
  assert.equal(events.rowCount, 1, 'one database_created event');
});
