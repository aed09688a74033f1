/**
 * Upgrades (docs/operations.md, "Upgrade"): a database made by an earlier version (its own code through
 * its API: test/fixtures/upgrade-from-*.sql, made by scripts/make-upgrade-fixture.ts) is migrated to this
 * version and everything reads back through the API, secrets open with the key of that time; migrations
 * run once however many processes start at once; a failing migration leaves the database as it was and
 * is tried again at the next start.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import pg from 'pg';
import pino from 'pino';
import { buildApp } from '../../src/app.ts';
import { loadConfig } from '../../src/config.ts';
import { openSecretBox } from '../../src/crypto/key-check.ts';
import { databaseUrl, withClient } from '../../src/db/admin-client.ts';
import { connect } from '../../src/db/database.ts';
import { migrate, readMigrations } from '../../src/db/migrate.ts';
import { createLogger } from '../../src/logger.ts';
import { createBackup } from '../../src/ops/backup.ts';
import { restoreBackup } from '../../src/ops/restore.ts';
import { FIXTURE_API_KEY, FIXTURE_ENCRYPTION_KEY } from '../fixtures/upgrade-fixture-keys.ts';

const FIXTURES = path.resolve(import.meta.dirname, '../fixtures');
const cleanups: (() => Promise<void>)[] = [];

after(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
});

function adminUrl(): string {
  const url = process.env.SLIPWAY_TEST_ADMIN_URL;
  if (!url) throw new Error('Run tests with `npm test` (it prepares the test server).');
  return url;
}

/** A new database with nothing in it, dropped after the file. */
async function emptyDatabase(): Promise<string> {
  const name = `slipway_upgrade_${randomBytes(4).toString('hex')}`;
  await withClient(adminUrl(), (c) => c.query(`create database ${name}`));
  cleanups.push(() =>
    withClient(adminUrl(), (c) => c.query(`drop database if exists ${name} with (force)`)).then(() => undefined),
  );
  return databaseUrl(adminUrl(), name);
}

function pool(url: string): pg.Pool {
  const opened = new pg.Pool({ connectionString: url, max: 2 });
  // The databases are dropped (connections terminated) at the end of the file: not an error here.
  opened.on('error', () => undefined);
  cleanups.push(() => opened.end());
  return opened;
}

async function migrationsDir(files: Record<string, string>): Promise<string> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-migrations-'));
  cleanups.push(() => fs.rm(dir, { recursive: true, force: true }));
  for (const [name, sql] of Object.entries(files)) await fs.writeFile(path.join(dir, name), sql);
  return dir;
}

async function tablesOf(url: string): Promise<string[]> {
  return withClient(url, async (c) =>
    (
      await c.query<{ name: string }>(
        'select tablename as name from pg_tables where schemaname = current_schema() order by 1',
      )
    ).rows.map((r) => r.name),
  );
}

for (const fixture of (await fs.readdir(FIXTURES)).filter((f) => /^upgrade-from-\w+\.sql$/.test(f))) {
  test(`a database made by ${fixture.slice('upgrade-from-'.length, -4)} is migrated to this version and reads back`, async () => {
    const url = await emptyDatabase();
    await withClient(url, async (c) => c.query(await fs.readFile(path.join(FIXTURES, fixture), 'utf8')));
    const before = await withClient(url, async (c) =>
      (await c.query<{ id: number }>('select id from slipway_migrations')).rows.map((r) => r.id),
    );
    const latest = (await readMigrations()).map((m) => m.id);
    assert.ok(before.length < latest.length, 'the fixture is of an earlier schema');

    const { db, pool: servicePool } = connect(url, 4);
    cleanups.push(() => db.destroy());
    const applied = await migrate(servicePool);
    assert.deepEqual(
      applied,
      latest.filter((id) => !before.includes(id)),
      'exactly the later migrations ran',
    );
    assert.deepEqual(await migrate(servicePool), [], 'and never again');

    // The start's key check passes with the key of that time, and its secrets open.
    const key = Buffer.from(FIXTURE_ENCRYPTION_KEY, 'hex');
    const secretBox = await openSecretBox(db, { current: key, previous: [], source: 'the fixture', file: null });
    const stored = await db.selectFrom('deployments').select(['name', 'secrets']).orderBy('name').execute();
    const opened = stored.map((d) => ({
      name: d.name,
      secrets: (d.secrets as { name: string; value: string }[]).map((s) => [s.name, secretBox.open(s.value)]),
    }));
    assert.deepEqual(opened, [
      { name: 'cluster-agent', secrets: [['OPENAI_API_KEY', 'sk-fixture-cluster-secret']] },
      { name: 'local-agent', secrets: [['GREETING', 'hello-from-the-old-version']] },
    ]);
    const provider = await db.selectFrom('oauth_providers').select('client_secret_encrypted').executeTakeFirstOrThrow();
    assert.equal(secretBox.open(provider.client_secret_encrypted!), 'client-secret-of-the-old-version');

    // Through this version's API, with the API key of that time.
    const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-upgrade-'));
    cleanups.push(() => fs.rm(dataDir, { recursive: true, force: true }));
    const config = loadConfig({ SLIPWAY_DATA_DIR: dataDir, LOG_LEVEL: 'silent', SLIPWAY_APPS_PORT: '0' });
    const app = await buildApp({ config, db, secretBox, logger: createLogger('silent') });
    cleanups.push(() => app.close());
    const get = async (url: string) => {
      const res = await app.inject({ method: 'GET', url, headers: { 'x-api-key': FIXTURE_API_KEY } });
      assert.equal(res.statusCode, 200, `${url}: ${res.body}`);
      return res.json();
    };
    const deployments = (await get('/v2/deployments')).resources;
    assert.deepEqual(
      deployments.map((d: any) => [d.name, d.source, d.secrets]),
      [
        ['local-agent', 'internal_container', [{ name: 'GREETING', value: '********' }]],
        ['cluster-agent', 'external_container', [{ name: 'OPENAI_API_KEY', value: '********' }]],
      ],
    );
    const local = deployments.find((d: any) => d.name === 'local-agent');
    const revisions = (await get(`/v2/deployments/${local.id}/revisions`)).resources;
    assert.deepEqual(
      revisions.map((r: any) => r.source_revision_config.image_uri),
      ['registry.example.com/local-agent:2', 'registry.example.com/local-agent:1'],
    );
    const cluster = deployments.find((d: any) => d.name === 'cluster-agent');
    assert.deepEqual(cluster.secret_references, [{ name: 'DB_PASSWORD', secret_name: 'db', secret_key: 'password' }]);
    const listener = await get(`/v2/listeners/${cluster.source_config.listener_id}`);
    assert.deepEqual(listener.compute_config.k8s_namespaces, ['agents', 'staging']);
    const tagged = await get(`/v2/deployments/${local.id}/tags`);
    assert.equal(JSON.stringify(tagged).includes('support'), true, JSON.stringify(tagged));
  });
}

test('a failing migration leaves the database as it was, and is tried again at the next start', async () => {
  const url = await emptyDatabase();
  const migrations = {
    '001_first.sql': 'create table first_table (id int); insert into first_table values (1);',
    '002_broken.sql':
      'create table second_table (id int); insert into first_table values (2); alter table first_table add column note text; select 1 / 0;',
  };
  const dir = await migrationsDir(migrations);
  const target = pool(url);
  await assert.rejects(migrate(target, { dir }), /Migration 2_broken failed: division by zero/);
  assert.deepEqual(await tablesOf(url), ['first_table', 'slipway_migrations']);
  await withClient(url, async (c) => {
    assert.deepEqual((await c.query('select * from first_table')).rows, [{ id: 1 }], 'no row, no column of 002');
    assert.deepEqual((await c.query('select id from slipway_migrations')).rows, [{ id: 1 }]);
  });
  // The next start tries it again (it is not marked done); fixed, it applies, once.
  await assert.rejects(migrate(target, { dir }), /Migration 2_broken failed/);
  await fs.writeFile(
    path.join(dir, '002_broken.sql'),
    'create table second_table (id int); insert into first_table values (2);',
  );
  assert.deepEqual(await migrate(target, { dir }), [2]);
  assert.deepEqual(await tablesOf(url), ['first_table', 'second_table', 'slipway_migrations']);
});

test('processes starting at once apply each migration exactly once', async () => {
  const url = await emptyDatabase();
  // Each migration records that it ran; the first takes a moment, so that the others arrive meanwhile.
  const dir = await migrationsDir({
    '001_counted.sql': 'create table runs (migration int); insert into runs values (1); select pg_sleep(0.3);',
    '002_counted.sql': 'insert into runs values (2);',
  });
  const results = await Promise.all([1, 2, 3, 4].map(() => migrate(pool(url), { dir })));
  assert.deepEqual(results.flat().sort(), [1, 2], 'each migration applied by one process');
  await withClient(url, async (c) => {
    assert.deepEqual((await c.query('select migration from runs order by 1')).rows, [
      { migration: 1 },
      { migration: 2 },
    ]);
  });
  // The real migrations too: two service starts on an empty database.
  const fresh = await emptyDatabase();
  const [a, b] = await Promise.all([migrate(pool(fresh)), migrate(pool(fresh))]);
  assert.deepEqual(
    [...a, ...b].sort((x, y) => x - y),
    (await readMigrations()).map((m) => m.id),
  );
});

test('a backup made on the earlier schema restores into this version, migrated on the way', async () => {
  const [fixture] = (await fs.readdir(FIXTURES)).filter((f) => /^upgrade-from-\w+\.sql$/.test(f));
  assert.ok(fixture, 'an upgrade fixture exists');
  const url = await emptyDatabase();
  await withClient(url, async (c) => c.query(await fs.readFile(path.join(FIXTURES, fixture), 'utf8')));
  const { db, pool: sourcePool } = connect(url, 4);
  cleanups.push(() => db.destroy());
  const key = Buffer.from(FIXTURE_ENCRYPTION_KEY, 'hex');
  const keys = { current: key, previous: [], source: 'SLIPWAY_ENCRYPTION_KEY', file: null };
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-old-backup-'));
  cleanups.push(() => fs.rm(dir, { recursive: true, force: true }));
  const archive = path.join(dir, 'old.tar.gz');
  const { manifest } = await createBackup({
    database: { url, pool: sourcePool, db, embedded: false, close: async () => undefined },
    keys,
    dataDir: dir,
    output: archive,
    slipwayVersion: 'earlier',
    withoutAppData: true,
    say: () => undefined,
  });
  const latest = (await readMigrations()).at(-1)!.id;
  assert.ok(manifest.schema.version < latest, 'made on the earlier schema');

  const target = await emptyDatabase();
  const lines: string[] = [];
  await restoreBackup({
    archive,
    config: loadConfig({ DATABASE_URL: target, SLIPWAY_ENCRYPTION_KEY: FIXTURE_ENCRYPTION_KEY, SLIPWAY_DATA_DIR: dir }),
    keys,
    logger: pino({ level: 'silent' }),
    say: (line) => lines.push(line),
  });
  assert.ok(lines.includes(`migrated from schema version ${manifest.schema.version} to ${latest}`), lines.join('\n'));
  const restored = await withClient(target, async (c) => ({
    migrations: (await c.query<{ id: number }>('select id from slipway_migrations order by id')).rows.map((r) => r.id),
    deployments: (await c.query<{ name: string }>('select name from deployments order by name')).rows.map(
      (r) => r.name,
    ),
  }));
  assert.deepEqual(
    restored.migrations,
    (await readMigrations()).map((m) => m.id),
  );
  assert.deepEqual(restored.deployments, ['cluster-agent', 'local-agent']);
});
