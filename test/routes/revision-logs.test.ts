/**
 * Revision logs (docs/logs.md): what the data plane's log writer stores (batched, whole lines, clean,
 * secrets masked, capped), and what a user reads back through GET .../logs, as pages or followed live.
 */
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { after, before, describe } from 'node:test';
import { createLogWriter, MAX_LINE_CHARS, type LogWriter } from '../../src/dataplane/log-writer.ts';
import type { Change, ChangeFeed } from '../../src/db/change-feed.ts';
import type { RevisionStatus } from '../../src/domain/states.ts';
import { createLogger } from '../../src/logger.ts';
import { transitionRevision, type Failure } from '../../src/service/lifecycle.ts';
import { createOwnPlaneReports } from '../../src/service/lifecycle-reports.ts';
import { appendRevisionLogs } from '../../src/store/revision-logs.ts';
import { lockRevision } from '../../src/store/revisions.ts';
import type { RevisionLogType } from '../../src/store/schema.ts';
import {
  ADMIN_KEY,
  buildReplicaApp,
  client,
  createTestApp,
  listen,
  startReplica,
  type Replica,
  type TestApp,
  newWorkspace,
  newWorkspaceAdmin,
} from '../support/harness.ts';
import { eventually } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';

let t: TestApp;
let api: ReturnType<typeof client>;
let feed: ChangeFeed;
/** A replica with the change feed, listening on a port, for following logs over real HTTP. */
let live: Replica;
let liveUrl: string;
const silent = createLogger('silent');

before(async () => {
  t = await createTestApp();
  api = client(t.app);
  live = await startReplica(t);
  feed = live.changes;
  liveUrl = live.url;
});
after(async () => {
  await live.close();
  await t.close();
});

let names = 0;
/** A new deployment; resolves to its id and its first revision's (QUEUED). */
async function newRevision(): Promise<{ deploymentId: string; revisionId: string }> {
  names += 1;
  const res = await api.post('/v2/deployments', {
    name: `logs-${names}`,
    source: 'internal_container',
    source_revision_config: { image_uri: 'reg.example.com/a:1' },
  });
  assert.equal(res.status, 201, JSON.stringify(res.body));
  return { deploymentId: res.body.id, revisionId: res.body.latest_revision_id };
}

/** Moves a revision through `statuses` in one transaction, the last with `failure`. */
async function move(revisionId: string, statuses: RevisionStatus[], failure: Failure | null = null): Promise<void> {
  await t.database.db.transaction().execute(async (trx) => {
    for (const [i, to] of statuses.entries()) {
      const revision = await lockRevision(trx, revisionId);
      assert.ok(revision);
      await transitionRevision(trx, revision, to, i === statuses.length - 1 ? failure : null);
    }
  });
}

async function storedLines(revisionId: string, type: RevisionLogType = 'build') {
  return t.database.db
    .selectFrom('revision_logs')
    .select(['stream', 'line'])
    .where('revision_id', '=', revisionId)
    .where('type', '=', type)
    .orderBy('id')
    .execute();
}

/** The own data plane's reports, as its worker gets them (the lifecycle's): the log writer stores through them. */
const reportsOf = (db: Parameters<typeof createOwnPlaneReports>[0]) =>
  createOwnPlaneReports(db, { owner: { id: 'test-node/1', nodePrefix: 'test-node/' }, leaseSeconds: 30 });

function writer(
  revisionId: string,
  options: { type?: RevisionLogType; maxLines?: number; redact?: string[]; flushIntervalMs?: number } = {},
): LogWriter {
  return createLogWriter({
    db: t.database.db,
    reports: reportsOf(t.database.db),
    revisionId,
    type: options.type ?? 'build',
    maxLines: options.maxLines ?? 1000,
    redact: options.redact ?? [],
    logger: silent,
    flushIntervalMs: options.flushIntervalMs,
  });
}

const logsUrl = (r: { deploymentId: string; revisionId: string }, query = '') =>
  `/v2/deployments/${r.deploymentId}/revisions/${r.revisionId}/logs${query}`;

describe('the log writer', () => {
  test('batches lines: write() returns at once, and a batch lands as one insert with one notification', async () => {
    const r = await newRevision();
    const notified: Change[] = [];
    const unsubscribe = feed.subscribe((change) => {
      if (change.kind === 'log' && change.revision_id === r.revisionId) notified.push(change);
    });
    const log = writer(r.revisionId, { flushIntervalMs: 100 });
    for (let i = 0; i < 20; i += 1) log.write('stdout', `line ${i}\n`);
    assert.equal((await storedLines(r.revisionId)).length, 0, 'nothing is written while the process writes');
    const rows = await eventually('the 20 lines to be stored', async () => {
      const stored = await storedLines(r.revisionId);
      return stored.length === 20 && stored;
    });
    assert.deepEqual(
      rows.map((row) => row.line),
      Array.from({ length: 20 }, (_, i) => `line ${i}`),
    );
    await eventually('a wake-up for followers', () => notified.length >= 1, { everyMs: 25 });
    // The scenario: a while without another wake-up (one flush interval), not a wait for something.
    await new Promise((resolve) => setTimeout(resolve, 100));
    assert.equal(notified.length, 1, 'one batch, one wake-up for followers');
    unsubscribe();
    await log.close();
  });

  test('a full batch is written without waiting for the timer', async () => {
    const r = await newRevision();
    const log = writer(r.revisionId, { flushIntervalMs: 60_000 });
    log.write('stdout', Array.from({ length: 600 }, (_, i) => `n${i}\n`).join(''));
    await eventually('a full batch to be stored', async () => (await storedLines(r.revisionId)).length >= 500, {
      everyMs: 25,
    });
    await log.close();
    assert.equal((await storedLines(r.revisionId)).length, 600);
  });

  test('partial lines wait for their newline or flush; characters split across chunks stay whole', async () => {
    const r = await newRevision();
    const log = writer(r.revisionId);
    log.write('stdout', 'hel');
    log.write('stderr', 'warn: ');
    log.write('stdout', 'lo wor');
    log.write('stdout', 'ld\nsecond');
    log.write('stderr', 'disk almost full\r\n');
    const bytes = Buffer.from('naïve café\n');
    log.write('stdout', bytes.subarray(0, 3));
    log.write('stdout', bytes.subarray(3));
    await log.flush();
    log.write('stdout', 'after flush\n');
    await log.close();
    assert.deepEqual(await storedLines(r.revisionId), [
      { stream: 'stdout', line: 'hello world' },
      { stream: 'stderr', line: 'warn: disk almost full' },
      { stream: 'stdout', line: 'secondnaïve café' },
      { stream: 'stdout', line: 'after flush' },
    ]);
  });

  test('colours and control characters are removed, the text stays; a progress bar keeps its last state', async () => {
    const r = await newRevision();
    const log = writer(r.revisionId);
    log.write('stdout', '\u001b[1m\u001b[31mERROR\u001b[0m build\u0000 failed\u0007\n');
    log.write('stdout', 'fetch 10%\rfetch 60%\rfetch done\n');
    log.write('stdout', '\u001b]0;window title\u0007\u001b[2Kdone\ttabs kept\n');
    await log.close();
    assert.deepEqual(
      (await storedLines(r.revisionId)).map((row) => row.line),
      ['ERROR build failed', 'fetch done', 'done\ttabs kept'],
    );
  });

  test('secret values never reach the log or tail(), even split across chunks or colours', async () => {
    const r = await newRevision();
    const pem = '-----BEGIN KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END KEY-----';
    const log = writer(r.revisionId, { redact: ['sk-live-4242', '', pem] });
    log.write('stdout', 'token=sk-live-4242 again sk-live-4242\n');
    log.write('stderr', 'split sk-li');
    log.write('stderr', 've-4242 here\n');
    log.write('stdout', 'coloured sk-\u001b[32mlive-4242\u001b[0m\n');
    log.write('stdout', 'key line MIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n');
    log.system('Running: deploy --token sk-live-4242');
    log.write('stdout', 'unterminated sk-live-4242');
    const tail = log.tail(10);
    await log.close();
    const lines = (await storedLines(r.revisionId)).map((row) => row.line);
    assert.deepEqual(lines, [
      'token=******** again ********',
      'split ******** here',
      'coloured ********',
      'key line ********',
      'Running: deploy --token ********',
      'unterminated ********',
    ]);
    for (const text of [...lines, ...tail, ...log.tail(100)])
      assert.ok(!text.includes('4242') && !text.includes('MIIEvQ'), text);
    assert.deepEqual(log.tail(2), ['Running: deploy --token ********', 'unterminated ********']);
  });

  test('a very long line is cut and marked, without leaving part of a secret; the next line is whole', async () => {
    const r = await newRevision();
    const secret = 'SECRET-abcdefghij';
    const log = writer(r.revisionId, { redact: [secret] });
    // One line of 40 KiB written in pieces, with a secret across the cut.
    const long = 'x'.repeat(MAX_LINE_CHARS - 5) + secret + 'y'.repeat(24_000);
    for (let i = 0; i < long.length; i += 1000) log.write('stdout', long.slice(i, i + 1000));
    log.write('stdout', '\nnext line\n');
    await log.close();
    const [cut, next] = (await storedLines(r.revisionId)).map((row) => row.line);
    assert.ok(cut !== undefined && cut.length <= MAX_LINE_CHARS + 100, `cut to ${cut?.length}`);
    assert.match(cut, /^x+ \[line cut: longer than 16384 characters\]$/);
    assert.ok(!cut.includes('SECRET') && !cut.includes('y'));
    assert.equal(next, 'next line');
  });

  test('a build log keeps its first maxLines lines, says it was cut, and still keeps platform lines', async () => {
    const r = await newRevision();
    const log = writer(r.revisionId, { maxLines: 100 });
    log.system('Running: npm run build');
    for (let i = 1; i <= 250; i += 1) log.write('stdout', `out ${i}\n`);
    log.system('Build failed: exit code 1');
    assert.deepEqual(log.tail(2), ['out 250', 'Build failed: exit code 1'], 'tail has the real end of the output');
    await log.close();
    const rows = await storedLines(r.revisionId);
    assert.equal(rows.length, 102);
    assert.deepEqual(rows[0], { stream: 'system', line: 'Running: npm run build' });
    assert.deepEqual(rows[99], { stream: 'stdout', line: 'out 99' });
    assert.deepEqual(rows[100], {
      stream: 'system',
      line: 'Log cut: only the first 100 lines of build output are kept.',
    });
    assert.deepEqual(rows[101], { stream: 'system', line: 'Build failed: exit code 1' });

    // A later attempt at the same build (a worker took it over) does not grow the log past the cap.
    const again = writer(r.revisionId, { maxLines: 100 });
    again.write('stdout', 'retry output\n');
    await again.close();
    assert.equal((await storedLines(r.revisionId)).length, 102);
  });

  test('a deploy log keeps the newest maxLines lines', async () => {
    const r = await newRevision();
    const log = writer(r.revisionId, { type: 'deploy', maxLines: 100, flushIntervalMs: 10 });
    for (let i = 0; i < 1000; i += 1) {
      log.write('stdout', `request ${i}\n`);
      if (i % 100 === 99) await log.flush();
    }
    await log.flush();
    const whileRunning = await storedLines(r.revisionId, 'deploy');
    assert.ok(whileRunning.length <= 100 + 100 + 100, `trimmed as it runs: ${whileRunning.length} lines`);
    await log.close();
    const rows = await storedLines(r.revisionId, 'deploy');
    assert.equal(rows.length, 100);
    assert.equal(rows[0]!.line, 'request 900');
    assert.equal(rows[99]!.line, 'request 999');
    assert.equal((await storedLines(r.revisionId, 'build')).length, 0, 'the build log is another log');
  });

  test('a failed insert is logged, and the writer keeps going', async () => {
    const logged: string[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _encoding, callback) {
        logged.push(chunk.toString());
        callback();
      },
    });
    const log = createLogWriter({
      db: t.database.db,
      reports: reportsOf(t.database.db),
      revisionId: '00000000-0000-4000-8000-000000000000',
      type: 'build',
      maxLines: 100,
      redact: [],
      logger: createLogger('error', sink),
    });
    log.write('stdout', 'nowhere to go\n');
    await log.flush();
    log.write('stdout', 'still nowhere\n');
    await log.close();
    assert.equal(logged.filter((line) => line.includes('could not store revision log lines')).length, 2);
    assert.deepEqual(log.tail(5), ['nowhere to go', 'still nowhere']);
  });
});

interface LogPage {
  lines: { time: string; stream: string; message: string }[];
  next_cursor: string;
}

describe('GET .../logs', () => {
  let r: { deploymentId: string; revisionId: string };

  before(async () => {
    r = await newRevision();
    const at = new Date('2025-01-02T03:04:05.678Z');
    await appendRevisionLogs(
      t.database.db,
      r.revisionId,
      'build',
      Array.from({ length: 250 }, (_, i) => ({ stream: i % 10 === 0 ? 'stderr' : 'stdout', line: `build ${i}`, at })),
    );
    await appendRevisionLogs(t.database.db, r.revisionId, 'deploy', [
      { stream: 'stdout', line: 'listening on :8080', at },
    ]);
  });

  test('pages oldest first with an opaque cursor until no lines come, then the cursor stays', async () => {
    const first = await api.get<LogPage>(logsUrl(r));
    assert.equal(first.status, 200, JSON.stringify(first.body));
    assert.equal(first.body.lines.length, 100, 'default limit 100, default type build');
    assert.deepEqual(first.body.lines[0], { time: '2025-01-02T03:04:05.678Z', stream: 'stderr', message: 'build 0' });
    const seen = [...first.body.lines];
    let cursor = first.body.next_cursor;
    for (;;) {
      const page = await api.get<LogPage>(logsUrl(r, `?limit=70&cursor=${cursor}`));
      assert.equal(page.status, 200);
      if (page.body.lines.length === 0) {
        assert.equal(page.body.next_cursor, cursor, 'an empty page keeps the cursor');
        break;
      }
      seen.push(...page.body.lines);
      cursor = page.body.next_cursor;
    }
    assert.deepEqual(
      seen.map((l) => l.message),
      Array.from({ length: 250 }, (_, i) => `build ${i}`),
    );

    // Lines written later come after the cursor.
    await appendRevisionLogs(t.database.db, r.revisionId, 'build', [
      { stream: 'system', line: 'Build finished', at: new Date() },
    ]);
    const more = await api.get<LogPage>(logsUrl(r, `?cursor=${cursor}`));
    assert.deepEqual(
      more.body.lines.map((l) => l.message),
      ['Build finished'],
    );
    assert.notEqual(more.body.next_cursor, cursor);
    assert.match(more.body.lines[0]!.time, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  });

  test('type=deploy reads the app output; an empty log has a cursor too', async () => {
    const deploy = await api.get<LogPage>(logsUrl(r, '?type=deploy'));
    assert.deepEqual(
      deploy.body.lines.map((l) => l.message),
      ['listening on :8080'],
    );
    const empty = await newRevision();
    const none = await api.get<LogPage>(logsUrl(empty));
    assert.equal(none.status, 200);
    assert.deepEqual(none.body.lines, []);
    assert.equal(typeof none.body.next_cursor, 'string');
    const again = await api.get<LogPage>(logsUrl(empty, `?cursor=${none.body.next_cursor}`));
    assert.equal(again.body.next_cursor, none.body.next_cursor);
  });

  test('a malformed cursor is 422 at query.cursor; limit and type are checked', async () => {
    const good = (await api.get<LogPage>(logsUrl(r, '?limit=1'))).body.next_cursor;
    for (const cursor of [
      'garbage!',
      Buffer.from('log:abc').toString('base64url'),
      Buffer.from('page:5').toString('base64url'),
      `${good}==`,
      'bG9nOjk5OTk5OTk5OTk5OTk5OTk5OTk5OTk',
    ]) {
      const res = await api.get(logsUrl(r, `?cursor=${encodeURIComponent(cursor)}`));
      assert.equal(res.status, 422, cursor);
      assert.deepEqual(res.body.detail[0].loc, ['query', 'cursor']);
    }
    for (const query of ['?limit=0', '?limit=1001', '?type=runtime'])
      assert.equal((await api.get(logsUrl(r, query))).status, 422, query);
    assert.equal((await api.get(logsUrl(r, '?limit=1000'))).status, 200);
  });

  test('unknown or foreign deployments and revisions are 404 with the contract messages', async () => {
    const missing = '00000000-0000-4000-8000-000000000000';
    const noDeployment = await api.get(logsUrl({ deploymentId: missing, revisionId: r.revisionId }));
    assert.equal(noDeployment.status, 404);
    assert.equal(noDeployment.body.detail, `Deployment ID ${missing} not found.`);
    const noRevision = await api.get(logsUrl({ deploymentId: r.deploymentId, revisionId: missing }));
    assert.equal(noRevision.status, 404);
    assert.equal(noRevision.body.detail, `Revision ID ${missing} not found.`);
    const other = await newRevision();
    const wrongDeployment = await api.get(logsUrl({ deploymentId: other.deploymentId, revisionId: r.revisionId }));
    assert.equal(wrongDeployment.status, 404);
    assert.equal(wrongDeployment.body.detail, `Revision ID ${r.revisionId} not found.`);

    const ws = await newWorkspace(t, 'logs-b');
    const b = (await newWorkspaceAdmin(t, ws.id, 'logs-b')).api;
    for (const query of ['', '?follow=true']) {
      const foreign = await b.get(logsUrl(r, query));
      assert.equal(foreign.status, 404, query);
      assert.equal(foreign.body.detail, `Deployment ID ${r.deploymentId} not found.`);
      assert.ok(!JSON.stringify(foreign.body).includes('build 0'));
    }
  });
});

interface SseEvent {
  event: string;
  id?: string;
  data: Record<string, unknown>;
}

/** Opens an event stream and reads it event by event (heartbeat comments are skipped). */
async function openStream(base: string, path: string, headers: Record<string, string> = {}) {
  const response = await fetch(`${base}${path}`, { headers: { 'x-api-key': ADMIN_KEY, ...headers } });
  assert.equal(response.status, 200);
  assert.match(response.headers.get('content-type') ?? '', /^text\/event-stream/);
  const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  let closed = false;
  const read = async (timeoutMs: number): Promise<void> => {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>(
      (_, reject) =>
        (timer = setTimeout(
          () => reject(new Error(`no event within ${timeoutMs} ms; have ${JSON.stringify(buffer)}`)),
          timeoutMs,
        )),
    );
    try {
      const chunk = await Promise.race([reader.read(), timeout]);
      if (chunk.done) closed = true;
      else buffer += chunk.value;
    } finally {
      clearTimeout(timer);
    }
  };
  return {
    /** The next event, or null once the server closed the stream. */
    async next(timeoutMs = 5_000): Promise<SseEvent | null> {
      for (;;) {
        const end = buffer.indexOf('\n\n');
        if (end !== -1) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const fields = new Map<string, string>();
          for (const line of block.split('\n')) {
            if (line.startsWith(':')) continue;
            const colon = line.indexOf(': ');
            fields.set(line.slice(0, colon), line.slice(colon + 2));
          }
          if (!fields.has('event')) continue;
          return {
            event: fields.get('event')!,
            id: fields.get('id'),
            data: JSON.parse(fields.get('data') ?? 'null') as Record<string, unknown>,
          };
        }
        if (closed) return null;
        await read(timeoutMs);
      }
    },
    cancel: () => reader.cancel(),
  };
}

type Stream = Awaited<ReturnType<typeof openStream>>;

async function nextOf(stream: Stream, name: string): Promise<SseEvent> {
  const event = await stream.next();
  assert.ok(event, `expected event ${name}, the stream closed`);
  assert.equal(event.event, name, JSON.stringify(event));
  return event;
}

describe('GET .../logs?follow=true', () => {
  test('sends the backlog, then lines as they are written, then ends when the build fails', async () => {
    const r = await newRevision();
    await appendRevisionLogs(t.database.db, r.revisionId, 'build', [
      { stream: 'system', line: 'queued behind 0 builds', at: new Date() },
    ]);
    const stream = await openStream(liveUrl, logsUrl(r, '?follow=true'));
    const backlog = await nextOf(stream, 'log');
    assert.equal(backlog.data.message, 'queued behind 0 builds');
    assert.equal(typeof backlog.id, 'string');
    assert.deepEqual((await nextOf(stream, 'status')).data, {
      status: 'QUEUED',
      failure_reason: null,
      failure_message: null,
    });

    await move(r.revisionId, ['AWAITING_BUILD', 'BUILDING']);
    assert.equal((await nextOf(stream, 'status')).data.status, 'BUILDING');

    // The follower wakes on the change feed: well before the 5 s safety poll.
    const started = Date.now();
    const log = writer(r.revisionId, { redact: ['hunter2'], flushIntervalMs: 20 });
    log.system('Running: npm run build');
    log.write('stderr', 'password is hunter2\n');
    const first = await nextOf(stream, 'log');
    assert.deepEqual(
      { stream: first.data.stream, message: first.data.message },
      { stream: 'system', message: 'Running: npm run build' },
    );
    assert.match(String(first.data.time), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    const second = await nextOf(stream, 'log');
    assert.deepEqual(
      { stream: second.data.stream, message: second.data.message },
      { stream: 'stderr', message: 'password is ********' },
    );
    assert.ok(Date.now() - started < 3_000, `woken in ${Date.now() - started} ms`);

    // The data plane closes its writer, then fails the revision: every line comes before the end.
    log.write('stdout', 'last words\n');
    await log.close();
    await move(r.revisionId, ['BUILD_FAILED'], {
      reason: 'build_command_failed',
      message: 'npm run build exited with 1',
    });
    assert.equal((await nextOf(stream, 'log')).data.message, 'last words');
    assert.deepEqual((await nextOf(stream, 'status')).data, {
      status: 'BUILD_FAILED',
      failure_reason: 'build_command_failed',
      failure_message: 'npm run build exited with 1',
    });
    assert.deepEqual((await nextOf(stream, 'end')).data, { status: 'BUILD_FAILED' });
    assert.equal(await stream.next(), null, 'the server closed the stream');

    // An event id is a cursor: nothing comes after the last one.
    const page = await api.get<LogPage>(logsUrl(r, `?cursor=${second.id}`));
    assert.deepEqual(
      page.body.lines.map((l) => l.message),
      ['last words'],
    );
  });

  test('resumes after Last-Event-ID; a finished build log streams what is left and ends', async () => {
    const r = await newRevision();
    await appendRevisionLogs(
      t.database.db,
      r.revisionId,
      'build',
      ['one', 'two', 'three'].map((line) => ({ stream: 'stdout' as const, line, at: new Date() })),
    );
    await move(r.revisionId, ['AWAITING_BUILD', 'BUILDING', 'BUILD_FAILED'], {
      reason: 'build_command_failed',
      message: 'exit 2',
    });
    const all = await openStream(liveUrl, logsUrl(r, '?follow=true'));
    const one = await nextOf(all, 'log');
    assert.equal(one.data.message, 'one');
    await all.cancel();

    const resumed = await openStream(liveUrl, logsUrl(r, '?follow=true&cursor=bm90LXRoaXM'), {
      'Last-Event-ID': one.id!,
    });
    assert.deepEqual(
      [(await nextOf(resumed, 'log')).data.message, (await nextOf(resumed, 'log')).data.message],
      ['two', 'three'],
    );
    assert.equal((await nextOf(resumed, 'status')).data.status, 'BUILD_FAILED');
    await nextOf(resumed, 'end');
    assert.equal(await resumed.next(), null);

    const bad = await fetch(`${liveUrl}${logsUrl(r, '?follow=true')}`, {
      headers: { 'x-api-key': ADMIN_KEY, 'last-event-id': 'nope' },
    });
    assert.equal(bad.status, 422);
    assert.deepEqual(((await bad.json()) as { detail: { loc: string[] }[] }).detail[0]!.loc, [
      'header',
      'last-event-id',
    ]);
  });

  test('a deploy log stays open while its revision serves, and ends when it no longer does', async () => {
    const r = await newRevision();
    await move(r.revisionId, ['AWAITING_DEPLOY', 'DEPLOYING', 'DEPLOYED']);
    await t.database.db
      .updateTable('deployments')
      .set({ active_revision_id: r.revisionId })
      .where('id', '=', r.deploymentId)
      .execute();
    const stream = await openStream(liveUrl, logsUrl(r, '?type=deploy&follow=true'));
    assert.equal((await nextOf(stream, 'status')).data.status, 'DEPLOYED');
    const log = writer(r.revisionId, { type: 'deploy', flushIntervalMs: 20 });
    log.write('stdout', 'GET /health 200\n');
    assert.equal((await nextOf(stream, 'log')).data.message, 'GET /health 200');
    await log.close();

    // Another revision takes over: this one's app output is over.
    await t.database.db
      .updateTable('deployments')
      .set({ active_revision_id: null })
      .where('id', '=', r.deploymentId)
      .execute();
    assert.deepEqual((await nextOf(stream, 'end')).data, { status: 'DEPLOYED' });
    assert.equal(await stream.next(), null);
  });

  test('without a change feed a follower polls, and still sees new lines', async () => {
    const base = await listen(t.app);
    const r = await newRevision();
    const stream = await openStream(base, logsUrl(r, '?follow=true'));
    await nextOf(stream, 'status');
    await appendRevisionLogs(t.database.db, r.revisionId, 'build', [
      { stream: 'stdout', line: 'polled', at: new Date() },
    ]);
    assert.equal((await nextOf(stream, 'log')).data.message, 'polled');
    await stream.cancel();
  });

  test('closing the server ends open streams instead of waiting for them', async () => {
    const app = await buildReplicaApp(t, { logger: silent, changes: feed });
    const base = await listen(app);
    const r = await newRevision();
    const stream = await openStream(base, logsUrl(r, '?follow=true'));
    await nextOf(stream, 'status');
    let timer: NodeJS.Timeout | undefined;
    const closing = await Promise.race([
      app.close().then(() => 'closed'),
      new Promise((resolve) => (timer = setTimeout(() => resolve('hung'), 5_000))),
    ]);
    clearTimeout(timer);
    assert.equal(closing, 'closed');
    assert.equal(await stream.next(), null, 'the client sees the stream end');
  });
});
