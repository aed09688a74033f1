/**
 * Back up and restore with DATABASE_URL (docs/operations.md, "Back up and restore"), on the test's
 * PostgreSQL: the service's rows, a file of the data directory and an app's own database (its data
 * when this machine's pg_dump fits the server, else refused unless --without-app-data, and made empty).
 * A restore refuses a database that is not empty, and a server that already has the backup's app
 * databases (another Slipway's), before changing anything.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import pino from 'pino';
import { buildApp } from '../../src/app.ts';
import { bootstrap } from '../../src/bootstrap.ts';
import { loadConfig } from '../../src/config.ts';
import { openSecretBox } from '../../src/crypto/key-check.ts';
import { createSecretBox, type EncryptionKeys } from '../../src/crypto/secret-box.ts';
import { databaseUrl, withClient } from '../../src/db/admin-client.ts';
import { appDatabaseUrl, createAppDatabase, dropAppDatabase } from '../../src/dataplane/app-database.ts';
import { findPgTools, serverMajor } from '../../src/ops/app-database-dump.ts';
import { createBackup } from '../../src/ops/backup.ts';
import type { OperatorDatabase } from '../../src/ops/operator-database.ts';
import { restoreBackup } from '../../src/ops/restore.ts';
import { saveDeploymentRuntime } from '../../src/store/deployment-runtimes.ts';
import { ADMIN_KEY, createTestDatabase, type TestDatabase } from '../support/harness.ts';

const key = randomBytes(32);
const keys: EncryptionKeys = { current: key, previous: [], source: 'SLIPWAY_ENCRYPTION_KEY', file: null };
const cleanups: (() => Promise<unknown>)[] = [];
const silent = pino({ level: 'silent' });
let source: TestDatabase;
let dataDir: string;
let deploymentId: string;
let appDatabase: { name: string; role: string; password: string };
let archive: string;
let appDataIncluded: boolean;

function adminUrl(): string {
  const url = process.env.SLIPWAY_TEST_ADMIN_URL;
  if (!url) throw new Error('Run tests with `npm test`.');
  return url;
}

async function emptyDatabase(): Promise<string> {
  const name = `slipway_restore_${randomBytes(4).toString('hex')}`;
  await withClient(adminUrl(), (c) => c.query(`create database ${name}`));
  cleanups.push(() => withClient(adminUrl(), (c) => c.query(`drop database if exists ${name} with (force)`)));
  return databaseUrl(adminUrl(), name);
}

async function tempDir(prefix: string): Promise<string> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), prefix));
  cleanups.push(() => fs.rm(dir, { recursive: true, force: true }));
  return dir;
}

function restoreConfig(url: string, dir: string) {
  return loadConfig({ DATABASE_URL: url, SLIPWAY_ENCRYPTION_KEY: key.toString('hex'), SLIPWAY_DATA_DIR: dir });
}

before(async () => {
  source = await createTestDatabase();
  cleanups.push(() => source.drop());
  dataDir = await tempDir('slipway-backup-url-');
  const box = await openSecretBox(source.db, keys);
  const first = await bootstrap(source.db, ADMIN_KEY);
  const config = loadConfig({ SLIPWAY_DATA_DIR: dataDir, LOG_LEVEL: 'silent', SLIPWAY_APPS_PORT: '0' });
  const app = await buildApp({ config, db: source.db, secretBox: box, logger: silent });
  cleanups.push(() => app.close());
  const created = await app.inject({
    method: 'POST',
    url: '/v2/deployments',
    headers: { 'x-api-key': ADMIN_KEY },
    payload: {
      name: 'notes-app',
      source: 'internal_container',
      source_revision_config: { image_uri: 'registry.example.com/notes:1' },
      secrets: [{ name: 'TOKEN', value: 'kept-in-the-backup' }],
    },
  });
  assert.equal(created.statusCode, 201, created.body);
  deploymentId = created.json<{ id: string }>().id;
  // The app's own database, as the data plane makes it, with something the app wrote.
  appDatabase = await createAppDatabase(source.pool);
  cleanups.push(() => dropAppDatabase(source.pool, appDatabase.name).catch(() => undefined));
  await saveDeploymentRuntime(source.db, deploymentId, first.workspaceId, {
    databaseName: appDatabase.name,
    roleName: appDatabase.role,
    databasePasswordSealed: box.seal(appDatabase.password),
  });
  await withClient(appDatabaseUrl(source.url, appDatabase), async (c) => {
    await c.query('create table notes (text text not null)');
    await c.query("insert into notes values ('remember the milk')");
  });
  // An upload an earlier version kept as a file.
  await fs.mkdir(path.join(dataDir, 'uploads'));
  await fs.writeFile(path.join(dataDir, 'uploads', 'legacy.tar.gz'), 'legacy upload bytes');
});

after(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
});

test('backup: the rows, the data directory file, and the app database when a pg_dump fits the server', async () => {
  const database: OperatorDatabase = {
    url: source.url,
    pool: source.pool,
    db: source.db,
    embedded: false,
    close: async () => undefined,
  };
  archive = path.join(await tempDir('slipway-archive-'), 'backup.tar.gz');
  const lines: string[] = [];
  const options = {
    database,
    keys,
    dataDir,
    output: archive,
    slipwayVersion: '0.0.0-test',
    say: (line: string) => lines.push(line),
  };
  const tools = await findPgTools();
  const major = await withClient(source.url, (c) => serverMajor(c));
  appDataIncluded = tools !== null && tools.major >= major;
  if (!appDataIncluded) {
    await assert.rejects(
      createBackup({ ...options, withoutAppData: false }),
      new RegExp(`1 app database\\(s\\) need pg_dump ${major} or newer`),
    );
    await assert.rejects(fs.stat(archive), 'nothing written');
  }
  const { manifest } = await createBackup({ ...options, withoutAppData: !appDataIncluded });
  assert.deepEqual(manifest.appDatabases, [{ name: appDatabase.name, deploymentId, included: appDataIncluded }]);
  assert.deepEqual(
    manifest.entries.filter((e) => e.kind !== 'table').map((e) => e.name),
    ['files/uploads/legacy.tar.gz', ...(appDataIncluded ? [`app-databases/${appDatabase.name}.dump`] : [])],
  );
});

test('restore refuses a database that is not empty, and a server that has the app databases already', async () => {
  const say = () => undefined;
  await assert.rejects(
    restoreBackup({ archive, config: restoreConfig(source.url, await tempDir('r-')), keys, logger: silent, say }),
    /DATABASE_URL: the database is not empty \(it holds public\./,
  );
  const target = await emptyDatabase();
  await assert.rejects(
    restoreBackup({ archive, config: restoreConfig(target, await tempDir('r-')), keys, logger: silent, say }),
    new RegExp(`already has app databases or roles of this backup \\(${appDatabase.name}\\)`),
  );
  const tables = await withClient(target, (c) =>
    c.query("select count(*)::int as n from pg_tables where schemaname = 'public'"),
  );
  assert.equal(tables.rows[0].n, 0, 'nothing made');
  const wrongKeys = { ...keys, current: randomBytes(32) };
  await assert.rejects(
    restoreBackup({
      archive,
      config: restoreConfig(target, await tempDir('r-')),
      keys: wrongKeys,
      logger: silent,
      say,
    }),
    /is not the key this backup's secrets are sealed with/,
  );
});

test('restore into an empty database after the server lost the app database: rows, secrets, file and app data back', async () => {
  await dropAppDatabase(source.pool, appDatabase.name);
  const target = await emptyDatabase();
  const targetDir = await tempDir('slipway-restored-');
  const { rows } = await restoreBackup({
    archive,
    config: restoreConfig(target, targetDir),
    keys,
    logger: silent,
    say: () => undefined,
  });
  assert.ok(rows > 0);
  cleanups.push(() => dropAppDatabase(source.pool, appDatabase.name).catch(() => undefined));
  const box = createSecretBox(key);
  const restored = await withClient(target, (c) =>
    c.query<{ secrets: { name: string; value: string }[] }>('select secrets from deployments where id = $1', [
      deploymentId,
    ]),
  );
  assert.equal(box.open(restored.rows[0]!.secrets[0]!.value), 'kept-in-the-backup');
  assert.equal(await fs.readFile(path.join(targetDir, 'uploads', 'legacy.tar.gz'), 'utf8'), 'legacy upload bytes');
  // The app's role logs in with the password the service keeps for it; its data is back when it was in the archive.
  const notes = await withClient(appDatabaseUrl(target, appDatabase), (c) =>
    c.query<{ exists: boolean }>("select to_regclass('notes') is not null as exists"),
  );
  assert.equal(notes.rows[0]!.exists, appDataIncluded);
  if (appDataIncluded) {
    const text = await withClient(appDatabaseUrl(target, appDatabase), (c) => c.query('select text from notes'));
    assert.deepEqual(text.rows, [{ text: 'remember the milk' }]);
  }
});

test('interrupted (Ctrl-C): a backup leaves no archive and no staging files, a restore leaves the target as it was', async () => {
  const dir = await tempDir('slipway-interrupted-');
  const output = path.join(dir, 'interrupted.tar.gz');
  const aborter = new AbortController();
  await assert.rejects(
    createBackup({
      database: { url: source.url, pool: source.pool, db: source.db, embedded: false, close: async () => undefined },
      keys,
      dataDir,
      output,
      slipwayVersion: '0.0.0-test',
      withoutAppData: true,
      // The interrupt arrives once the tables are read.
      say: (line) => (line.startsWith('database:') ? aborter.abort(new Error('interrupted')) : undefined),
      signal: aborter.signal,
    }),
    /interrupted/,
  );
  assert.deepEqual(await fs.readdir(dir), [], 'no archive, no partial file, no staging directory');

  await dropAppDatabase(source.pool, appDatabase.name); // The previous test's restore made it again.
  const target = await emptyDatabase();
  const restoreAborter = new AbortController();
  await assert.rejects(
    restoreBackup({
      archive,
      config: restoreConfig(target, await tempDir('r-')),
      keys,
      logger: silent,
      say: (line) => (line.startsWith('archive checked') ? restoreAborter.abort(new Error('interrupted')) : undefined),
      signal: restoreAborter.signal,
    }),
    /interrupted/,
  );
  const tables = await withClient(target, (c) =>
    c.query("select count(*)::int as n from pg_tables where schemaname = 'public'"),
  );
  assert.equal(tables.rows[0].n, 0, 'nothing made');
  const made = await withClient(adminUrl(), (c) =>
    c.query('select 1 from pg_database where datname = $1', [appDatabase.name]),
  );
  assert.equal(made.rowCount, 0, 'no app database made');
});
