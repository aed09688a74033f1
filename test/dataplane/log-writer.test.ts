/**
 * The log writer keeps storing lines however they arrive (issue 23, defect 8): a line that arrives
 * while a batch is being inserted, followed by a pause longer than the flush interval, once left the
 * writer believing a write loop was still running, so every later line was lost and followers froze.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { KyselyPlugin, PluginTransformQueryArgs, PluginTransformResultArgs, QueryId } from 'kysely';
import { createLogWriter } from '../../src/dataplane/log-writer.ts';
import { createLogger } from '../../src/logger.ts';
import { createOwnPlaneReports } from '../../src/service/lifecycle-reports.ts';
import { client, createTestApp, type TestApp } from '../support/harness.ts';

let t: TestApp;

before(async () => {
  t = await createTestApp();
});
after(() => t.close());

/** The own data plane's reports, as its worker gets them (the lifecycle's): the log writer stores through them. */
const reportsOf = (db: Parameters<typeof createOwnPlaneReports>[0]) =>
  createOwnPlaneReports(db, { owner: { id: 'test-node/1', nodePrefix: 'test-node/' }, leaseSeconds: 30 });

/**
 * Holds the first insert until `release()` (a database slow to answer), and says when it started, so
 * that output can arrive while a batch is being written.
 */
function firstInsertHeld() {
  const inserts = new WeakSet<QueryId>();
  let held = 0;
  let started!: () => void;
  let release!: () => void;
  const insertStarted = new Promise<void>((resolve) => (started = resolve));
  const released = new Promise<void>((resolve) => (release = resolve));
  const plugin: KyselyPlugin = {
    transformQuery({ node, queryId }: PluginTransformQueryArgs) {
      if (JSON.stringify(node).includes('"InsertQueryNode"')) inserts.add(queryId);
      return node;
    },
    async transformResult({ result, queryId }: PluginTransformResultArgs) {
      if (inserts.has(queryId) && held++ === 0) {
        started();
        await released;
      }
      return result;
    },
  };
  return { plugin, insertStarted, release };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function newRevision(name: string): Promise<string> {
  const created = await client(t.app).post('/v2/deployments', {
    name,
    source: 'internal_container',
    source_revision_config: { image_uri: 'reg.example.com/a:1' },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  return created.body.latest_revision_id;
}

async function storedLines(revisionId: string): Promise<string[]> {
  const rows = await t.database.db
    .selectFrom('revision_logs')
    .select('line')
    .where('revision_id', '=', revisionId)
    .orderBy('id')
    .execute();
  return rows.map((row) => row.line);
}

test('a line during a slow insert, then silence, then more lines: every line is stored', async () => {
  const revisionId = await newRevision('log-writer-quiet-app');
  const flushIntervalMs = 50;
  const held = firstInsertHeld();
  const log = createLogWriter({
    db: t.database.db,
    reports: reportsOf(t.database.db.withPlugin(held.plugin)),
    revisionId,
    type: 'deploy',
    maxLines: 1000,
    redact: [],
    logger: createLogger('silent'),
    flushIntervalMs,
  });

  log.write('stdout', 'health check passed\n');
  await held.insertStarted; // the first batch is being inserted
  log.write('stdout', 'during the insert\n'); // its timer fires after the loop has written it
  held.release();
  await sleep(flushIntervalMs * 4); // the app is quiet
  log.write('stdout', 'after a quiet moment\n');
  await sleep(flushIntervalMs * 4);
  assert.deepEqual(
    await storedLines(revisionId),
    ['health check passed', 'during the insert', 'after a quiet moment'],
    'stored by the timer, without waiting for close()',
  );
  log.write('stdout', 'much later\n');
  await log.close();
  assert.deepEqual(await storedLines(revisionId), [
    'health check passed',
    'during the insert',
    'after a quiet moment',
    'much later',
  ]);
});

test('a flush with nothing to write does not stop later lines from being stored', async () => {
  const revisionId = await newRevision('log-writer-empty-flush');
  const log = createLogWriter({
    db: t.database.db,
    reports: reportsOf(t.database.db),
    revisionId,
    type: 'build',
    maxLines: 1000,
    redact: [],
    logger: createLogger('silent'),
    flushIntervalMs: 60_000,
  });
  await log.flush();
  log.write('stdout', 'first\n');
  await log.flush();
  await log.flush();
  log.write('stdout', 'second\n');
  await log.close();
  assert.deepEqual(await storedLines(revisionId), ['first', 'second']);
});
