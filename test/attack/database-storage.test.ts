/**
 * Attacker's test of the database storage limit (issue 33, items 1 and 4): an app that writes into its
 * own PostgreSQL database without end would fill the disk that holds the control plane's database and
 * every other app's. On a service whose limit per database is small, the app's writes stop once its
 * database is over its limit (it is made read-only, reads still work); an app that lifts read-only for
 * itself (`default_transaction_read_only = off`) and keeps writing is cut off; another deployment's
 * database keeps taking writes and the control plane keeps working throughout; a raised limit gives the
 * app its writes back.
 *
 * What main did before: nothing measured app databases, so the app wrote all it set out to write.
 * The writer stops by itself after WRITE_MAX_MB, so that the test cannot fill a host's disk when the
 * limit does not hold.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before } from 'node:test';
import { test } from '../support/limited-test.ts';
import {
  deployApp,
  oneFileApp,
  requestApp,
  startTestService,
  type DeployedApp,
  type TestService,
} from '../dataplane/data-plane-harness.ts';
import { eventually, pause } from '../support/wait.ts';
import { DATABASE_STORAGE_ROUND_LOCK } from '../../src/db/advisory-locks.ts';

const MIB = 1024 * 1024;
/** The default (and each app's) limit: 24 MiB; the maximum lets a patch raise it to 1 GiB. */
const LIMIT_GI = 0.0234375;
const LIMIT_BYTES = Math.floor(LIMIT_GI * 1024 * MIB);
/** The margin past which a database that lifted read-only is cut off: 16 MiB at this size. */
const MARGIN_BYTES = 16 * MIB;
const WRITE_MAX_MB = 200;
/**
 * The writer's pause between two 1 MiB writes. The service measures every second, so what an app writes
 * past its limit before it is made read-only is what it writes in about one interval: at 100 ms a
 * write, at most about 10 MiB, within the margin. (At 25 ms, on a quiet machine the writer outran the
 * margin in one interval: a property of the writer's pace, not of the service, which promises only
 * the next measure.)
 */
const WRITE_PAUSE_MS = 100;

const PG_LITE = fs.readFileSync(
  path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../examples/agent-app/pg-lite.js'),
  'utf8',
);

/**
 * GET /write?override=1: one new connection, 1 MiB of random (incompressible, untoasted-uncompressed)
 * bytes in one row; with override=1 it first lifts read-only for its session. GET /read counts the rows,
 * GET /truncate empties the table in a read-write transaction (what a user does to make room).
 */
const SERVER = `
import http from 'node:http';
import { connect } from './pg-lite.js';

async function run(statements) {
  const db = await connect(process.env.DATABASE_URL, { timeoutMs: 5000 });
  try {
    let last;
    for (const sql of statements) last = await db.query(sql);
    return last.rows;
  } finally {
    await db.end().catch(() => undefined);
  }
}
await run(['create table if not exists fill (b text)', 'alter table fill alter column b set storage external']);

const WRITE = "insert into fill select string_agg(md5(random()::text), '') from generate_series(1, 32768)";
http.createServer(async (req, res) => {
  const url = new URL(req.url, 'http://app');
  const statements =
    url.pathname === '/write' ? [...(url.searchParams.get('override') ? ['set default_transaction_read_only = off'] : []), WRITE]
    : url.pathname === '/read' ? ['select count(*)::int as rows from fill']
    : url.pathname === '/truncate' ? ['begin read write', 'truncate fill', 'commit']
    : ['select 1 as ok'];
  try {
    const rows = await run(statements);
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ ok: true, rows }));
  } catch (e) {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ ok: false, code: e.code, message: e.message }));
  }
}).listen(Number(process.env.PORT), process.env.HOST);
`;

let service: TestService;
let filler: DeployedApp;
let keeper: DeployedApp;

before(async () => {
  service = await startTestService({
    SLIPWAY_MAX_DATABASE_STORAGE_GI: '1',
    SLIPWAY_APP_DATABASE_STORAGE_GI: String(LIMIT_GI),
    SLIPWAY_DATABASE_CHECK_SECONDS: '1',
  });
  const files = oneFileApp(SERVER, { health_check_path: '/' }, { 'pg-lite.js': PG_LITE });
  filler = await deployApp(service, files, 'filler');
  keeper = await deployApp(service, files, 'keeper');
});
after(async () => {
  await service?.close();
});

type Answer = { ok: boolean; code?: string; message?: string; rows?: { rows?: number }[] };

async function call(app: DeployedApp, pathname: string): Promise<Answer> {
  const answer = await requestApp(service, app.url, pathname);
  assert.equal(answer.status, 200, answer.body);
  return JSON.parse(answer.body) as Answer;
}

/** Writes 1 MiB at a time until a write fails (its answer) or WRITE_MAX_MB were written (null). */
async function writeUntilRefused(app: DeployedApp, override: boolean): Promise<{ refused: Answer | null; mb: number }> {
  for (let mb = 0; mb < WRITE_MAX_MB; mb++) {
    const answer = await call(app, override ? '/write?override=1' : '/write');
    // Its session was ended under it (57P01, or the connection closed: as the database was made
    // read-only); an app retries.
    const ended = answer.code === '57P01' || /closed the connection/.test(answer.message ?? '');
    if (!answer.ok && !ended) return { refused: answer, mb };
    // The pace of an app that writes steadily; the limit is measured every second.
    await new Promise((resolve) => setTimeout(resolve, WRITE_PAUSE_MS));
  }
  return { refused: null, mb: WRITE_MAX_MB };
}

/** The database's size as the host's PostgreSQL sees it. */
async function databaseBytes(deploymentId: string): Promise<number> {
  const result = await service.database.pool.query<{ size: string }>(
    `select pg_database_size(database_name)::text as size from deployment_runtimes where deployment_id = $1`,
    [deploymentId],
  );
  return Number(result.rows[0]!.size);
}

async function eventsOf(deploymentId: string, type: string): Promise<{ data: Record<string, unknown> }[]> {
  const answer = await service.api('GET', `/v2/deployments/${deploymentId}/events?limit=100`);
  const events: { type: string; data: Record<string, unknown> }[] = answer.body.resources ?? answer.body;
  return events.filter((event) => event.type === type);
}

async function assertOthersStillWrite(): Promise<void> {
  const kept = await call(keeper, '/write');
  assert.ok(kept.ok, `another deployment's database refused a write: ${JSON.stringify(kept)}`);
  const created = await service.api('POST', '/v2/deployments', {
    name: `control-plane-${Date.now()}`,
    source: 'internal_source',
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
}

test("an app that writes into its database without end is made read-only at its limit; reads and other tenants' writes go on", async () => {
  const { refused, mb } = await writeUntilRefused(filler, false);
  assert.ok(refused, `the app wrote ${mb} MiB into a database limited to ${LIMIT_BYTES / MIB} MiB`);
  assert.equal(refused.code, '25006', `refused as a read-only transaction: ${JSON.stringify(refused)}`);
  const full = await eventually(
    'the database_full event',
    async () => (await eventsOf(filler.id, 'deployment.database_full'))[0],
  );
  assert.equal(full.data.limit_bytes, LIMIT_BYTES);
  assert.ok(Number(full.data.size_bytes) > LIMIT_BYTES);
  assert.ok((await databaseBytes(filler.id)) < LIMIT_BYTES + MARGIN_BYTES, 'it stopped within the margin');
  // It still reads, and writes again refused: it stays read-only.
  const read = await call(filler, '/read');
  assert.ok(read.ok && Number(read.rows?.[0]?.rows) > 0, JSON.stringify(read));
  assert.equal((await call(filler, '/write')).code, '25006');
  await assertOthersStillWrite();
});

test('the app that makes room (a read-write transaction that empties its table) gets its writes back', async () => {
  const emptied = await call(filler, '/truncate');
  assert.ok(emptied.ok, JSON.stringify(emptied));
  await eventually(
    'the database_writable event',
    async () => (await eventsOf(filler.id, 'deployment.database_writable'))[0],
  );
  const written = await call(filler, '/write');
  assert.ok(written.ok, JSON.stringify(written));
});

test('an app that lifts read-only for itself and keeps writing is cut off, and a raised limit lets it back in', async () => {
  const { refused, mb } = await writeUntilRefused(filler, true);
  assert.ok(refused, `the app wrote ${mb} MiB past read-only into a database limited to ${LIMIT_BYTES / MIB} MiB`);
  const cut = await eventually(
    'the database_cut_off event',
    async () => (await eventsOf(filler.id, 'deployment.database_cut_off'))[0],
  );
  assert.equal(cut.data.limit_bytes, LIMIT_BYTES);
  // Its role may not log in any more: every write (and read) is refused until the limit is raised.
  const again = await call(filler, '/write?override=1');
  assert.equal(again.ok, false, JSON.stringify(again));
  const size = await databaseBytes(filler.id);
  assert.ok(size < LIMIT_BYTES + 3 * MARGIN_BYTES, `it wrote on to ${size} bytes`);
  await assertOthersStillWrite();

  const raised = await service.api('PATCH', `/v2/deployments/${filler.id}`, {
    source_config: { resource_spec: { db_storage_gi: 1 } },
  });
  assert.equal(raised.status, 200, JSON.stringify(raised.body));
  const writable = await eventually('the database_writable event after the cut-off', async () =>
    (await eventsOf(filler.id, 'deployment.database_writable')).find((e) => e.data.from === 'cut_off'),
  );
  assert.equal(writable.data.limit_bytes, 1024 * MIB);
  const written = await call(filler, '/write');
  assert.ok(written.ok, JSON.stringify(written));
});

/** What the control plane has written down of a database's size, and when. */
async function recorded(deploymentId: string): Promise<{ bytes: number | null; at: number | null }> {
  const result = await service.database.pool.query<{ bytes: string | null; at: Date | null }>(
    `select database_size_bytes::text as bytes, database_measured_at as at from deployment_runtimes
      where deployment_id = $1`,
    [deploymentId],
  );
  const row = result.rows[0]!;
  return { bytes: row.bytes === null ? null : Number(row.bytes), at: row.at?.getTime() ?? null };
}

/** Writes `mb` MiB into the keeper's database (well within its limit). */
async function keeperWrites(mb: number): Promise<void> {
  for (let i = 0; i < mb; i++) assert.ok((await call(keeper, '/write')).ok);
}

test('a database whose size does not move is not written down at every measure; one that grows is', async () => {
  await keeperWrites(2);
  const first = await eventually('the keeper’s new size written down', async () => {
    const now = await recorded(keeper.id);
    return now.bytes !== null && Math.abs(now.bytes - (await databaseBytes(keeper.id))) < MIB && now;
  });
  // The scenario is time passing with nothing written: three measures (one a second) change nothing.
  await pause(3_500, 'three measuring rounds of the service go by');
  assert.deepEqual(await recorded(keeper.id), first, 'a quiet database costs the control plane no write');
  await keeperWrites(2);
  await eventually('the grown size written down', async () => ((await recorded(keeper.id)).bytes ?? 0) > first.bytes!);
});

test('while another replica measures (it holds the round’s lock), this one measures nothing; after it, this one does', async () => {
  const other = await service.database.pool.connect();
  try {
    await other.query('select pg_advisory_lock($1)', [DATABASE_STORAGE_ROUND_LOCK.toString()]);
    const before = await recorded(keeper.id);
    await keeperWrites(3);
    // The scenario is rounds going by while the lock is held: three of them change nothing.
    await pause(3_500, 'three measuring rounds go by while the lock is held');
    assert.deepEqual(await recorded(keeper.id), before, 'no measure while another replica holds the round');
    await other.query('select pg_advisory_unlock($1)', [DATABASE_STORAGE_ROUND_LOCK.toString()]);
    await eventually(
      'a measure once the lock is free',
      async () => ((await recorded(keeper.id)).bytes ?? 0) > before.bytes!,
    );
  } finally {
    await other.query('select pg_advisory_unlock_all()').catch(() => undefined);
    other.release();
  }
});
