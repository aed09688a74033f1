/**
 * CI's second pass of the SQL (against DATABASE_URL) runs a cover of what the first pass recorded
 * (scripts/sql-record.ts): every statement some file ran, in the fewest files. A cover that left a
 * statement out, or a record that gave a statement to the wrong file, would let SQL that fails on the
 * operator's server pass CI unseen.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import pino from 'pino';
import { databaseUrl, withClient } from '../src/db/admin-client.ts';
import { startScratchServer, type ScratchServer } from '../scripts/scratch-server.ts';
import {
  coverOf,
  coverOfTier,
  normalizeStatement,
  preparedStatements,
  readRecord,
  RECORD_SETTINGS,
  type SqlRecord,
} from '../scripts/sql-record.ts';

test('a statement is one however many values it had', () => {
  assert.equal(
    normalizeStatement('select *\n  from t where id in ($1, $2,$3) and a = $4'),
    normalizeStatement('select * from t where id in ($7) and a = $1'),
  );
  assert.equal(
    normalizeStatement('insert into t (a, b) values ($1, $2), ($3, $4), ($5, $6)'),
    normalizeStatement('insert into t (a, b) values ($1, $2)'),
  );
  // Other statements stay apart.
  assert.notEqual(
    normalizeStatement('select a from t where b = $1'),
    normalizeStatement('select a from t where c = $1'),
  );
});

test("a function's arguments or a row's width are no list of values: statements that differ in them stay apart", () => {
  // current_setting(name, missing_ok) is how a statement reads a setting older servers lack
  // (reserved_connections, PostgreSQL 16): without missing_ok it fails there.
  assert.notEqual(
    normalizeStatement('select current_setting($1)::int as reserved'),
    normalizeStatement('select current_setting($1, $2)::int as reserved'),
  );
  assert.notEqual(normalizeStatement('select pg_notify($1, $2)'), normalizeStatement('select pg_notify($1)'));
  // A row of three values is not one of two with the third left to its default.
  assert.notEqual(
    normalizeStatement('insert into t values ($1, $2), ($3, $4)'),
    normalizeStatement('insert into t values ($1, $2, $3)'),
  );
  // Lists of values stay one statement however long, in any case and with NOT IN.
  assert.equal(
    normalizeStatement('select a from t where b NOT IN ($1, $2) and c in ($3)'),
    normalizeStatement('select a from t where b NOT IN ($1) and c in ($2, $3, $4)'),
  );
});

const record = (files: Record<string, [number | undefined, string[]]>): SqlRecord => ({
  files: Object.fromEntries(Object.entries(files).map(([f, [seconds, statements]]) => [f, { seconds, statements }])),
});

test('the cover runs every statement, in the cheapest files that do', () => {
  const r = record({
    'test/a.test.ts': [10, ['s1', 's2', 's3']],
    // Everything a has, but cheaper in two files.
    'test/b.test.ts': [2, ['s1', 's2']],
    'test/c.test.ts': [2, ['s3', 's4']],
    // Nothing the others lack.
    'test/d.test.ts': [1, ['s1']],
    // Its one statement is its own: it must run, however slow.
    'test/e.test.ts': [60, ['s5']],
  });
  const cover = coverOf(r, Object.keys(r.files), []);
  assert.deepEqual(cover.files, ['test/b.test.ts', 'test/c.test.ts', 'test/e.test.ts']);
  assert.equal(cover.statements, 5);
  assert.deepEqual(cover.unrecorded, []);
  assert.deepEqual(cover.seconds, { all: 75, chosen: 64 });
});

test('a forced file counts for what it runs; a file the record lacks runs', () => {
  const r = record({
    'test/a.test.ts': [5, ['s1', 's2']],
    'test/b.test.ts': [5, ['s2', 's3']],
    'test/apps.test.ts': [100, ['s1', 's2', 's3']],
  });
  const cover = coverOf(r, ['test/a.test.ts', 'test/b.test.ts', 'test/new.test.ts'], ['test/apps.test.ts']);
  assert.deepEqual(cover.files, ['test/apps.test.ts', 'test/new.test.ts']);
  assert.deepEqual(cover.unrecorded, ['test/new.test.ts']);
});

test('statements the other server prepared need no file to run them; the rest still do', () => {
  const r = record({
    'test/a.test.ts': [10, ['s1', 's2']],
    'test/b.test.ts': [2, ['s1', 's3']],
    'test/c.test.ts': [1, ['s2']],
  });
  // s1 and s3 prepared: only s2 is left, and the cheaper file that runs it.
  const cover = coverOf(r, Object.keys(r.files), [], new Set(['s1', 's3']));
  assert.deepEqual(cover.files, ['test/c.test.ts']);
  assert.equal(cover.statements, 3);
  assert.equal(cover.settled, 2);
  // Everything prepared: no file runs but the forced ones.
  assert.deepEqual(coverOf(r, Object.keys(r.files), ['test/apps.test.ts'], new Set(['s1', 's2', 's3'])).files, [
    'test/apps.test.ts',
  ]);
});

test('a record the server dropped statements from covers nothing: every file runs', () => {
  // pg_stat_statements made room by dropping its least used statements: whose they were, the record
  // cannot say, so a cover made from it might leave out the only file that runs one of them.
  const r: SqlRecord = {
    ...record({ 'test/a.test.ts': [5, ['s1', 's2']], 'test/b.test.ts': [5, ['s1']] }),
    dropped: 2,
  };
  const cover = coverOf(r, ['test/a.test.ts', 'test/b.test.ts'], ['test/apps.test.ts']);
  assert.deepEqual(cover.files, ['test/a.test.ts', 'test/apps.test.ts', 'test/b.test.ts']);
});

test('a file that makes databases of its own on the test server runs in every cover', async () => {
  // app-slugs.test.ts migrates a database of its own to an older version, fills it as that version did,
  // then upgrades it: the record sees only what ran in its clones of the template, so a cover that
  // trusted the record would drop it whenever other files ran those.
  const own = 'test/store/app-slugs.test.ts';
  const other = 'test/store/work-leases.test.ts';
  const r = record({ [own]: [5, ['s1']], [other]: [1, ['s1', 's2']] });
  const cover = await coverOfTier(r, [own, other], []);
  assert.deepEqual(cover.files, [own, other]);
  assert.deepEqual(cover.ownDatabases, [own]);
  // Only files that reach the server themselves: the harness's clones are in the record.
  assert.deepEqual((await coverOfTier(r, [other], [])).ownDatabases, []);
});

test("a file that makes apps' databases runs in every cover", async () => {
  // createAppDatabase's roles, grants and databases are made in the maintenance database, by statements
  // that differ with the server's version (PostgreSQL 16's grant options): the record sees none of it.
  const apps = 'test/attack/database-budgets.test.ts';
  const other = 'test/store/work-leases.test.ts';
  const r = record({ [apps]: [38, ['s1']], [other]: [1, ['s1', 's2']] });
  const cover = await coverOfTier(r, [apps, other], []);
  assert.deepEqual(cover.files, [apps, other]);
  assert.deepEqual(cover.ownDatabases, [apps]);
});

let server: ScratchServer;
let dir: string;

before(async () => {
  dir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-sql-record-'));
  server = await startScratchServer(undefined, pino({ level: 'silent' }), 'slipway-sql-record', RECORD_SETTINGS);
});

after(async () => {
  await server?.stop();
  await fs.rm(dir, { recursive: true, force: true });
});

test("the record gives each file the statements its own database ran, and nothing of the server's own", async () => {
  const databases = path.join(dir, 'databases.jsonl');
  const lines: string[] = [];
  const runIn = async (name: string, file: string | null, statements: string[]) => {
    await withClient(server.adminUrl, (c) => c.query(`create database ${name}`));
    if (file !== null) {
      const oid = await withClient(server.adminUrl, (c) =>
        c.query<{ oid: number }>('select oid::int as oid from pg_database where datname = $1', [name]),
      );
      lines.push(JSON.stringify({ database: oid.rows[0]!.oid, file }));
    }
    await withClient(databaseUrl(server.adminUrl, name), async (c) => {
      await c.query('create table t (id int primary key, a text)');
      for (const s of statements) await c.query(s, s.includes('$1') ? [1] : []);
    });
  };
  await runIn('one', 'test/one.test.ts', ['insert into t values ($1, null)', 'select a from t where id = $1']);
  await runIn('two', 'test/two.test.ts', ['select a from t where id = $1', "update t set a = 'x' where id = 2"]);
  // A database no test file cloned (an app's own): none of its statements is a file's.
  await runIn('other', null, ['delete from t where id = $1']);
  await fs.writeFile(databases, `${lines.join('\n')}\n`);

  const { record: got, dropped } = await readRecord(server.adminUrl, databases, new Map([['test/one.test.ts', 3]]));
  assert.equal(dropped, 0);
  assert.equal(got.dropped, 0);
  assert.deepEqual(Object.keys(got.files), ['test/one.test.ts', 'test/two.test.ts']);
  assert.equal(got.files['test/one.test.ts']!.seconds, 3);
  const one = got.files['test/one.test.ts']!.statements;
  const two = got.files['test/two.test.ts']!.statements;
  // null is a constant too; the row keeps its width.
  assert.ok(one.includes('insert into t values ($, $)'), one.join('\n'));
  assert.ok(one.includes('select a from t where id = $'), one.join('\n'));
  // Constants are taken out: the update is one statement whatever it set.
  assert.ok(two.includes('update t set a = $ where id = $'), two.join('\n'));
  assert.ok(!one.some((s) => s.startsWith('update')) && ![...one, ...two].some((s) => s.startsWith('delete')));
  // DDL is not tracked (its names are made per test); the migrations run on both servers anyway.
  assert.ok(![...one, ...two].some((s) => /create table/i.test(s)));
  // Each statement's text as the server kept it, its values numbered, to prepare on another server.
  assert.equal(got.texts?.['select a from t where id = $'], 'select a from t where id = $1');
  assert.match(got.texts?.['update t set a = $ where id = $'] ?? '', /^update t set a = \$1 where id = \$2$/);
  assert.equal(Object.keys(got.texts ?? {}).length, new Set([...one, ...two]).size);
});

test('the other server prepares what it accepts, runs none of it, and names why it refused the rest', async () => {
  await withClient(server.adminUrl, (c) => c.query('create database judged'));
  const url = databaseUrl(server.adminUrl, 'judged');
  await withClient(url, (c) => c.query('create table t (id int primary key, a text)'));
  const texts: Record<string, string> = {
    insert: 'insert into t values ($1, $2)',
    select: 'select a from t where id = $1 and a is distinct from $2',
    delete: 'delete from t where id = any($1)',
    // `interval '1 day'` as the server keeps it: the literal's value taken out.
    interval: 'select a from t where id < extract(day from interval $1)',
    // What only a test made (its own table), what cannot be typed without its value, what is refused.
    'own table': 'select * from made_by_a_test where id = $1',
    untyped: 'select $1 is null',
    'no such function': 'select not_a_function_anywhere($1::int)',
    syntax: 'select a from t wher id = $1',
  };
  const { accepted, refused } = await preparedStatements(url, { files: {}, texts });
  assert.deepEqual([...accepted].sort(), ['delete', 'insert', 'interval', 'select']);
  assert.deepEqual([...refused.keys()].sort(), ['no such function', 'own table', 'syntax', 'untyped']);
  assert.match(refused.get('own table')!, /relation "made_by_a_test" does not exist/);
  assert.match(refused.get('untyped')!, /could not determine data type of parameter \$1/);
  assert.match(refused.get('no such function')!, /function not_a_function_anywhere\(integer\) does not exist/);
  assert.match(refused.get('syntax')!, /syntax error/);
  // Prepared, not run: the insert left no row.
  const rows = await withClient(url, (c) => c.query('select count(*)::int as n from t'));
  assert.equal(rows.rows[0].n, 0);
});
