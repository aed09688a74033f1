/**
 * Retention: old events are pruned, and uploads that no revision uses are removed (row and chunks, and
 * the file of an upload made before uploads were stored in the database) once old enough, while an
 * upload a revision uses stays. Ages go by the clock each prune is given, set just before and just
 * after a limit, never by dating rows or files back.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import path from 'node:path';
import { gzipSync } from 'node:zlib';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import type { Clock } from '../../src/clock.ts';
import { SPOOL_STALE_MS, pruneEvents, pruneSpooledUploads, pruneUploads } from '../../src/pipeline/retention.ts';
import { ADMIN_KEY, client, createTestApp, type TestApp } from '../support/harness.ts';

let t: TestApp;
before(async () => {
  t = await createTestApp();
});
after(() => t.close());

const quiet = { warn: () => undefined };
const HOUR_MS = 60 * 60 * 1000;

/** A clock `hours` ahead of the real time. */
const hoursLater =
  (hours: number): Clock =>
  () =>
    new Date(Date.now() + hours * HOUR_MS);

async function upload(): Promise<string> {
  const response = await t.app.inject({
    method: 'POST',
    url: '/v2/uploads',
    headers: { 'x-api-key': ADMIN_KEY, 'content-type': 'application/gzip' },
    payload: gzipSync(Buffer.from('x')),
  });
  return JSON.parse(response.body).source_tarball_path;
}

test('events older than the retention are pruned; newer ones stay', async () => {
  const api = client(t.app);
  const created = await api.post('/v2/deployments', {
    name: 'chatty',
    source: 'internal_container',
    source_revision_config: { image_uri: 'a:1' },
  });
  const id = created.body.id;
  const count = async () => (await api.get(`/v2/deployments/${id}/events?limit=100`)).body.resources.length as number;
  const before = await count();
  assert.ok(before >= 3);
  assert.equal(await pruneEvents(t.database.db, 0, hoursLater(100 * 24)), 0, '0 keeps everything');
  assert.equal(await pruneEvents(t.database.db, 90, hoursLater(89 * 24)), 0, '89 days later they stay');
  assert.equal(await count(), before);
  assert.ok((await pruneEvents(t.database.db, 90, hoursLater(91 * 24))) >= before, '91 days later they go');
  assert.equal(await count(), 0);
});

/** Whether the upload at `path` is still stored: its row, and how many chunks. */
async function kept(path: string): Promise<{ row: boolean; chunks: number }> {
  const { rows } = await t.database.pool.query(
    `select (select count(*)::int from source_uploads where path = $1) as rows,
            (select count(*)::int from upload_chunks c join source_uploads u on u.id = c.upload_id where u.path = $1) as chunks`,
    [path],
  );
  return { row: rows[0].rows === 1, chunks: rows[0].chunks };
}

test('an unused upload goes after its retention, chunks included; one a revision uses stays', async () => {
  const api = client(t.app);
  const unused = await upload();
  const used = await upload();
  assert.deepEqual(await kept(unused), { row: true, chunks: 1 });
  const created = await api.post('/v2/deployments', {
    name: 'uses-upload',
    source: 'internal_source',
    source_revision_config: { source_tarball_path: used, framework_config_path: 'slipway.json' },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  assert.equal(await pruneUploads(t.database.db, t.dataDir, 24, quiet, hoursLater(23)), 0, 'young uploads stay');
  assert.equal(await pruneUploads(t.database.db, t.dataDir, 24, quiet, hoursLater(25)), 1);
  assert.deepEqual(await kept(unused), { row: false, chunks: 0 });
  assert.deepEqual(await kept(used), { row: true, chunks: 1 });

  // Deleted with its deployment (nothing ran it), the upload is unused now and goes at the next sweep.
  assert.equal((await api.delete(`/v2/deployments/${created.body.id}`)).status, 204);
  assert.equal(await pruneUploads(t.database.db, t.dataDir, 24, quiet, hoursLater(25)), 1);
  assert.deepEqual(await kept(used), { row: false, chunks: 0 });
});

test('an old upload made before uploads were stored in the database goes with its file', async () => {
  // What an earlier version left: a row without chunks, and the file in the data directory.
  const id = randomUUID();
  const legacy = `uploads/${id}.tar.gz`;
  await fs.mkdir(path.join(t.dataDir, 'uploads'), { recursive: true });
  await fs.writeFile(path.join(t.dataDir, legacy), gzipSync(Buffer.from('x')));
  await t.database.db
    .insertInto('source_uploads')
    .values({ id, workspace_id: t.workspaceId, path: legacy, size_bytes: 21, sha256: 'x' })
    .execute();
  assert.equal(await pruneUploads(t.database.db, t.dataDir, 24, quiet, hoursLater(25)), 1);
  assert.deepEqual(await kept(legacy), { row: false, chunks: 0 });
  await assert.rejects(fs.access(path.join(t.dataDir, legacy)), { code: 'ENOENT' });
});

test('an upload body left spooled by a stopped replica goes once stale, not before; other files stay', async () => {
  const dir = path.join(t.dataDir, 'tmp');
  await fs.mkdir(dir, { recursive: true });
  const spooled = path.join(dir, `upload-${randomUUID()}`);
  const other = path.join(dir, 'not-an-upload');
  for (const file of [spooled, other]) await fs.writeFile(file, 'partial body');
  const minute = 60 * 1000;
  assert.equal(await pruneSpooledUploads(t.dataDir, Date.now() + SPOOL_STALE_MS - minute), 0, 'it may still arrive');
  assert.equal(await pruneSpooledUploads(t.dataDir, Date.now() + SPOOL_STALE_MS + minute), 1);
  assert.deepEqual(await fs.readdir(dir), ['not-an-upload']);
});
