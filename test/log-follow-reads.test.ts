/**
 * Followers of one revision share their reads (docs/logs.md, "Following"): when new lines wake them,
 * the lines are read once for all of them, not once per follower. Counted on the queries the server
 * sends to PostgreSQL.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { Kysely, PostgresDialect } from 'kysely';
import { openChangeFeed, type ChangeFeed } from '../src/db/change-feed.ts';
import { createLogger } from '../src/logger.ts';
import { appendRevisionLogs } from '../src/store/revision-logs.ts';
import type { Database } from '../src/store/schema.ts';
import { ADMIN_KEY, buildReplicaApp, client, createTestApp, listen, type TestApp } from './support/harness.ts';

const FOLLOWERS = 6;
const silent = createLogger('silent');

let t: TestApp;
let feed: ChangeFeed;
let app: FastifyInstance;
let base: string;
/** Queries that read log lines, as the followed app sent them. */
let lineReads = 0;

before(async () => {
  t = await createTestApp();
  feed = await openChangeFeed(t.database.url, silent);
  const counted = new Kysely<Database>({
    dialect: new PostgresDialect({ pool: t.database.pool }),
    log(event) {
      const text = event.query.sql.trimStart().toLowerCase();
      if (text.startsWith('select') && text.includes('from "revision_logs"')) lineReads += 1;
    },
  });
  app = await buildReplicaApp(t, { db: counted, logger: silent, changes: feed });
  base = await listen(app);
});
after(async () => {
  await app.close();
  await feed.close();
  await t.close();
});

/** An event stream read event by event (comments skipped). */
async function openStream(url: string) {
  const response = await fetch(url, { headers: { 'x-api-key': ADMIN_KEY } });
  assert.equal(response.status, 200);
  const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  return {
    async next(): Promise<{ event: string; data: Record<string, unknown> }> {
      for (;;) {
        const end = buffer.indexOf('\n\n');
        if (end !== -1) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const fields = new Map(
            block
              .split('\n')
              .filter((line) => !line.startsWith(':'))
              .map((line) => [line.slice(0, line.indexOf(': ')), line.slice(line.indexOf(': ') + 2)] as const),
          );
          if (!fields.has('event')) continue;
          return { event: fields.get('event')!, data: JSON.parse(fields.get('data')!) as Record<string, unknown> };
        }
        const chunk = await reader.read();
        assert.ok(!chunk.done, 'the stream ended');
        buffer += chunk.value;
      }
    },
    cancel: () => reader.cancel(),
  };
}

test('new lines are read once per wake-up for all the followers of a revision', async () => {
  const created = await client(t.app).post('/v2/deployments', {
    name: 'many-followers',
    source: 'internal_container',
    source_revision_config: { image_uri: 'reg.example.com/a:1' },
  });
  assert.equal(created.status, 201);
  const url = `${base}/v2/deployments/${created.body.id}/revisions/${created.body.latest_revision_id}/logs?follow=true`;
  const revisionId = created.body.latest_revision_id as string;

  const streams = [];
  for (let i = 0; i < FOLLOWERS; i++) {
    const stream = await openStream(url);
    // Caught up: the (empty) backlog was read and the status sent; the follower now waits.
    assert.equal((await stream.next()).event, 'status');
    streams.push(stream);
  }

  for (const line of ['first wake-up', 'second wake-up']) {
    const before = lineReads;
    await appendRevisionLogs(t.database.db, revisionId, 'build', [{ stream: 'stdout', line, at: new Date() }]);
    for (const stream of streams) {
      const event = await stream.next();
      assert.deepEqual([event.event, event.data.message], ['log', line]);
    }
    assert.equal(lineReads - before, 1, `${FOLLOWERS} followers read the new line with ${lineReads - before} queries`);
  }
  for (const stream of streams) await stream.cancel();
});
