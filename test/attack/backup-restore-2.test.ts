/**
 * Attack on `slipway restore` by an app's own code: an app owns its database and may put anything in
 * it, such as a CHECK constraint calling a function of its own. pg_restore loads the rows with COPY,
 * which runs that function; a restore logged in as the service's (superuser) role and only SET ROLE to
 * the app's role lets the function RESET ROLE back to the superuser and make the app's role a superuser
 * of the whole server (every tenant's database, the service's own). The restore must log in as the app's
 * role, so that there is nothing to go back to.
 *
 * And on `slipway backup`: an app that holds a lock on its own tables (a transaction left open) must not
 * keep every backup of the service from finishing: pg_dump waits for its locks, forever unless told;
 * the backup is written without that app's data, and says so.
 * Nor may an app whose data refuses to load (its own CHECK failing on purpose during pg_restore) make
 * the restore of the whole service fail: the others' data and the service's rows come back.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import pg from 'pg';
import pino from 'pino';
import { buildApp } from '../../src/app.ts';
import { bootstrap } from '../../src/bootstrap.ts';
import { loadConfig } from '../../src/config.ts';
import { openSecretBox } from '../../src/crypto/key-check.ts';
import type { EncryptionKeys } from '../../src/crypto/secret-box.ts';
import { databaseUrl, withClient } from '../../src/db/admin-client.ts';
import { appDatabaseUrl, createAppDatabase, dropAppDatabase } from '../../src/dataplane/app-database.ts';
import { findPgTools, serverMajor } from '../../src/ops/app-database-dump.ts';
import { createBackup } from '../../src/ops/backup.ts';
import { restoreBackup } from '../../src/ops/restore.ts';
import { cliUser } from '../cli/cli-runner.ts';
import { saveDeploymentRuntime } from '../../src/store/deployment-runtimes.ts';
import { ADMIN_KEY, createTestDatabase, type TestDatabase } from '../helpers.ts';

const key = randomBytes(32);
const keys: EncryptionKeys = { current: key, previous: [], source: 'SLIPWAY_ENCRYPTION_KEY', file: null };
const silent = pino({ level: 'silent' });
const cleanups: (() => Promise<unknown>)[] = [];
let source: TestDatabase;
let appDatabase: { name: string; role: string; password: string };
let deploymentId: string;
let archive: string;
let dumpable = false;
let first: { workspaceId: string };
let box: Awaited<ReturnType<typeof openSecretBox>>;
let service: Awaited<ReturnType<typeof buildApp>>;

function adminUrl(): string {
  const url = process.env.SLIPWAY_TEST_ADMIN_URL;
  if (!url) throw new Error('Run tests with `npm test`.');
  return url;
}

async function tempDir(prefix: string): Promise<string> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), prefix));
  cleanups.push(() => fs.rm(dir, { recursive: true, force: true }));
  return dir;
}

/** What the app writes into its own database: a row whose CHECK runs its function, which tries to become superuser. */
const HOSTILE_SCHEMA = String.raw`
create function public.take_over(value text) returns boolean language plpgsql as $f$
declare
  app_role text := current_user;
begin
  begin
    reset role;
    execute format('alter role %I superuser', app_role);
  exception when others then
    null; -- As the app itself (an ordinary insert) this is refused: nothing to do.
  end;
  return true;
end
$f$;
create table public.notes (text text not null check (public.take_over(text)));
insert into public.notes values ('a note');
`;

before(async () => {
  source = await createTestDatabase();
  cleanups.push(() => source.drop());
  box = await openSecretBox(source.db, keys);
  first = await bootstrap(source.db, ADMIN_KEY);
  const config = loadConfig({
    SLIPWAY_DATA_DIR: await tempDir('slipway-attack-'),
    LOG_LEVEL: 'silent',
    SLIPWAY_APPS_PORT: '0',
  });
  service = await buildApp({ config, db: source.db, secretBox: box, logger: silent });
  cleanups.push(() => service.close());
  const created = await service.inject({
    method: 'POST',
    url: '/v2/deployments',
    headers: { 'x-api-key': ADMIN_KEY },
    payload: {
      name: 'hostile-app',
      source: 'internal_container',
      source_revision_config: { image_uri: 'registry.example.com/hostile:1' },
    },
  });
  assert.equal(created.statusCode, 201, created.body);
  deploymentId = created.json<{ id: string }>().id;
  appDatabase = await createAppDatabase(source.pool);
  cleanups.push(() => dropAppDatabase(source.pool, appDatabase.name).catch(() => undefined));
  await saveDeploymentRuntime(source.db, deploymentId, first.workspaceId, {
    databaseName: appDatabase.name,
    roleName: appDatabase.role,
    databasePasswordSealed: box.seal(appDatabase.password),
  });
  await withClient(appDatabaseUrl(source.url, appDatabase), (c) => c.query(HOSTILE_SCHEMA));

  const tools = await findPgTools();
  dumpable = tools !== null && tools.major >= (await withClient(source.url, (c) => serverMajor(c)));
  archive = path.join(await tempDir('slipway-attack-archive-'), 'backup.tar.gz');
  await createBackup({
    database: { url: source.url, pool: source.pool, db: source.db, embedded: false, close: async () => undefined },
    keys,
    dataDir: await tempDir('slipway-attack-data-'),
    output: archive,
    slipwayVersion: '0.0.0-test',
    withoutAppData: !dumpable,
    say: () => undefined,
  });
});

after(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
});

test("restoring an app's database does not let the app's functions run as the service's superuser", async (t) => {
  if (!dumpable) return t.skip('no pg_dump fits the server: the backup holds no app data to restore');
  const superuser = () =>
    withClient(adminUrl(), (c) =>
      c.query<{ super: boolean }>('select rolsuper as super from pg_roles where rolname = $1', [appDatabase.role]),
    ).then((r) => r.rows[0]?.super);
  assert.equal(await superuser(), false, 'the app is no superuser before');

  // The server lost the app's database; the operator restores the backup into an empty database.
  await dropAppDatabase(source.pool, appDatabase.name);
  const name = `slipway_restore_${randomBytes(4).toString('hex')}`;
  await withClient(adminUrl(), (c) => c.query(`create database ${name}`));
  cleanups.push(() => withClient(adminUrl(), (c) => c.query(`drop database if exists ${name} with (force)`)));
  const target = databaseUrl(adminUrl(), name);
  await restoreBackup({
    archive,
    config: loadConfig({
      DATABASE_URL: target,
      SLIPWAY_ENCRYPTION_KEY: key.toString('hex'),
      SLIPWAY_DATA_DIR: await tempDir('slipway-restored-'),
    }),
    keys,
    logger: silent,
    say: () => undefined,
  });

  assert.equal(await superuser(), false, "the app's role became a superuser of the server during the restore");
  // The honest part: the app's data is back, and its role reads it.
  const notes = await withClient(appDatabaseUrl(target, appDatabase), (c) => c.query('select text from notes'));
  assert.deepEqual(notes.rows, [{ text: 'a note' }]);
});

test("an app holding a lock on its tables does not hang the service's backups", { timeout: 300_000 }, async (t) => {
  if (!dumpable) return t.skip('no pg_dump fits the server: the backup dumps no app database');
  // The previous test dropped it (and its restore made it again on the same server): start from a fresh one.
  await dropAppDatabase(source.pool, appDatabase.name);
  const made = await createAppDatabase(source.pool, appDatabase.name, appDatabase.password);
  const app = new pg.Client({ connectionString: appDatabaseUrl(source.url, made) });
  await app.connect();
  try {
    await app.query('create table public.ledger (entry text)');
    await app.query('begin');
    await app.query('lock table public.ledger in access exclusive mode');
    const output = path.join(await tempDir('slipway-attack-locked-'), 'backup.tar.gz');
    const lines: string[] = [];
    const { manifest } = await createBackup({
      database: { url: source.url, pool: source.pool, db: source.db, embedded: false, close: async () => undefined },
      keys,
      dataDir: await tempDir('slipway-attack-data-'),
      output,
      slipwayVersion: '0.0.0-test',
      withoutAppData: false,
      say: (line) => lines.push(line),
      lockWaitSeconds: 2,
    });
    // The backup is written, with the service's rows; the locking app's database is listed as left out.
    assert.ok((await fs.stat(output)).size > 0);
    assert.ok(manifest.entries.some((e) => e.kind === 'table' && e.subject === 'deployments'));
    assert.deepEqual(
      manifest.appDatabases.filter((a) => a.name === made.name),
      [{ name: made.name, deploymentId, included: false }],
    );
    assert.ok(
      lines.some((line) => line.includes(made.name) && line.includes(deploymentId) && /lock/.test(line)),
      `the backup names the app it left out: ${lines.join(' | ')}`,
    );
  } finally {
    await app.end();
  }
});

test('an app whose data refuses to load does not fail the restore of the service and the other apps', async (t) => {
  if (!dumpable) return t.skip('no pg_dump fits the server: the backup holds no app data to restore');
  // The hostile app: its rows load as usual, but fail their CHECK while pg_restore loads them.
  await dropAppDatabase(source.pool, appDatabase.name);
  const hostile = await createAppDatabase(source.pool, appDatabase.name, appDatabase.password);
  await withClient(appDatabaseUrl(source.url, hostile), (c) =>
    c.query(String.raw`
      create function public.not_in_restore(value text) returns boolean language sql as $f$
        select current_setting('application_name') <> 'pg_restore'
      $f$;
      create table public.trap (value text check (public.not_in_restore(value)));
      insert into public.trap values ('armed');
    `),
  );
  // An honest app of another tenant, with data.
  const created = await service.inject({
    method: 'POST',
    url: '/v2/deployments',
    headers: { 'x-api-key': ADMIN_KEY },
    payload: {
      name: 'honest-app',
      source: 'internal_container',
      source_revision_config: { image_uri: 'r.example/h:1' },
    },
  });
  assert.equal(created.statusCode, 201, created.body);
  const honestId = created.json<{ id: string }>().id;
  const honest = await createAppDatabase(source.pool);
  cleanups.push(() => dropAppDatabase(source.pool, honest.name).catch(() => undefined));
  await saveDeploymentRuntime(source.db, honestId, first.workspaceId, {
    databaseName: honest.name,
    roleName: honest.role,
    databasePasswordSealed: box.seal(honest.password),
  });
  await withClient(appDatabaseUrl(source.url, honest), (c) =>
    c.query("create table public.orders (item text); insert into public.orders values ('tea')"),
  );
  const output = path.join(await tempDir('slipway-attack-trap-'), 'backup.tar.gz');
  await createBackup({
    database: { url: source.url, pool: source.pool, db: source.db, embedded: false, close: async () => undefined },
    keys,
    dataDir: await tempDir('slipway-attack-data-'),
    output,
    slipwayVersion: '0.0.0-test',
    withoutAppData: false,
    say: () => undefined,
  });

  // The server lost everything; the operator restores into an empty database.
  await dropAppDatabase(source.pool, hostile.name);
  await dropAppDatabase(source.pool, honest.name);
  const name = `slipway_restore_${randomBytes(4).toString('hex')}`;
  await withClient(adminUrl(), (c) => c.query(`create database ${name}`));
  cleanups.push(() => withClient(adminUrl(), (c) => c.query(`drop database if exists ${name} with (force)`)));
  const target = databaseUrl(adminUrl(), name);
  // The operator's command, as a cron job would run it: it must not look like a clean restore.
  const cli = await cliUser();
  cleanups.push(() => cli.remove());
  const restored = await cli.run(['restore', output], {
    env: {
      DATABASE_URL: target,
      SLIPWAY_ENCRYPTION_KEY: key.toString('hex'),
      SLIPWAY_DATA_DIR: await tempDir('slipway-restored-'),
    },
  });
  assert.equal(restored.code, 1, `${restored.stdout}\n${restored.stderr}`);
  assert.match(restored.stderr, new RegExp(`1 app database\\(s\\) are empty.*${hostile.name}`));
  const lines = restored.stdout.split('\n');
  const orders = await withClient(appDatabaseUrl(target, honest), (c) => c.query('select item from orders'));
  assert.deepEqual(orders.rows, [{ item: 'tea' }], "the other app's data is back");
  const deployments = await withClient(target, (c) => c.query('select id from deployments order by id'));
  assert.deepEqual(deployments.rows.map((r: { id: string }) => r.id).sort(), [deploymentId, honestId].sort());
  // The hostile app's database is there, empty, and the operator is told so.
  const trap = await withClient(appDatabaseUrl(target, hostile), (c) =>
    c.query<{ exists: boolean }>("select to_regclass('public.trap') is not null as exists"),
  );
  assert.equal(trap.rows[0]!.exists, false);
  assert.ok(
    lines.some((line) => line.includes(hostile.name) && line.includes(deploymentId)),
    `the restore names the app whose data did not load: ${lines.join(' | ')}`,
  );
});
