/**
 * Ctrl-C drops no request in flight (docs/operations.md): the terminal signals the whole foreground
 * process group, but the embedded PostgreSQL is not in it, so it keeps running until the service has
 * finished its requests and stops it. And an upload that fails for any reason, a database failure half
 * way included, leaves nothing behind.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import http from 'node:http';
import path from 'node:path';
import { after } from 'node:test';
import { gzipSync } from 'node:zlib';
import { sql } from 'kysely';
import { ADMIN_KEY, createTestApp } from '../support/harness.ts';
import { alive, cleanUp, makeDataDir, postgresPid, startService, withDeadline } from '../support/service-harness.ts';
import { eventually, pause } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';

const KEY = 'slw_ops_interrupt_key_0123456789';

after(cleanUp);

test(
  'Ctrl-C during a slow upload: the upload completes with 201, then the service and its database stop',
  { timeout: 120_000 },
  async () => {
    const dataDir = await makeDataDir();
    // Its own process group, as a terminal's foreground job: Ctrl-C signals every process in it.
    const service = await startService(dataDir, { SLIPWAY_BOOTSTRAP_API_KEY: KEY }, { group: true });
    const server = (await postgresPid(dataDir))!;
    const body = gzipSync(randomBytes(256 * 1024));

    const request = http.request({
      host: '127.0.0.1',
      port: service.port,
      method: 'POST',
      path: '/v2/uploads',
      headers: { 'x-api-key': KEY, 'content-type': 'application/gzip', 'content-length': body.length },
    });
    const response = new Promise<{ status: number; body: string }>((resolve, reject) => {
      request.on('error', reject);
      request.on('response', (res) => {
        let text = '';
        res.on('data', (chunk: Buffer) => (text += chunk.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
      });
    });
    request.write(body.subarray(0, 4096));
    await pause(500, 'the upload is under way in the service (its first bytes sent) when the Ctrl-C comes');

    process.kill(-service.child.pid!, 'SIGINT');
    // The scenario: a second after the Ctrl-C nothing has stopped (a pause that is the test, not a wait).
    await pause(1_000, 'a second after the Ctrl-C, nothing has stopped');
    assert.ok(alive(server), 'the database server did not take the Ctrl-C meant for the service');
    assert.equal(service.child.exitCode, null, 'the service waits for the request in flight');

    request.end(body.subarray(4096));
    const answer = await withDeadline('the upload', response, 20_000);
    assert.equal(answer.status, 201, answer.body);
    const uploaded = JSON.parse(answer.body) as { source_tarball_path: string; size_bytes: number };
    assert.equal(uploaded.size_bytes, body.length);

    const exit = await withDeadline('exit after Ctrl-C', service.exited, 30_000);
    assert.deepEqual(exit, { code: 0, signal: null }, service.stderr());
    await eventually('the service to stop its database server last', () => !alive(server));
    assert.match(uploaded.source_tarball_path, /^uploads\/[0-9a-f-]{36}\.tar\.gz$/);
  },
);

test('an upload the database fails to record leaves nothing behind', async () => {
  const t = await createTestApp();
  try {
    // The upload's row cannot be written, so neither can its chunks.
    await sql`alter table source_uploads rename to source_uploads_unavailable`.execute(t.database.db);
    const res = await t.app.inject({
      method: 'POST',
      url: '/v2/uploads',
      headers: { 'x-api-key': ADMIN_KEY, 'content-type': 'application/gzip' },
      payload: gzipSync(randomBytes(64 * 1024)),
    });
    assert.equal(res.statusCode, 500, res.body);
    const { rows } = await t.database.pool.query('select count(*)::int as n from upload_chunks');
    assert.equal(rows[0].n, 0, 'no chunk without its row');
    assert.deepEqual(await fs.readdir(path.join(t.dataDir, 'uploads')).catch(() => []), [], 'no file either');
  } finally {
    await t.close();
  }
});
