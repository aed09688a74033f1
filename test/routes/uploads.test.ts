/**
 * Source uploads for internal_source deployments (docs/api.md, "Sources"): a gzipped tarball goes in,
 * a source_tarball_path comes out, and only paths made this way, in the caller's workspace, are usable.
 * The tarball is kept in the database, whole or not at all, and nothing in the replica's data directory.
 */
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { gunzipSync, gzipSync } from 'node:zlib';
import { Readable } from 'node:stream';
import { createUploadService, UPLOAD_CHUNK_BYTES } from '../../src/service/uploads.ts';
import { ADMIN_KEY, client, createTestApp, type TestApp, type TestDatabase, newWorkspace } from '../support/harness.ts';

let t: TestApp;
let api: ReturnType<typeof client>;

before(async () => {
  t = await createTestApp();
  api = client(t.app);
});
after(() => t.close());

/** A minimal ustar archive of the given files (what `tar cf` writes, without owner names). */
function tar(files: Record<string, string>): Buffer {
  const blocks: Buffer[] = [];
  for (const [name, content] of Object.entries(files)) {
    const body = Buffer.from(content, 'utf8');
    const header = Buffer.alloc(512);
    header.write(name, 0, 100, 'utf8');
    header.write('0000644\0', 100, 8, 'ascii');
    header.write('0000000\0', 108, 8, 'ascii');
    header.write('0000000\0', 116, 8, 'ascii');
    header.write(`${body.length.toString(8).padStart(11, '0')}\0`, 124, 12, 'ascii');
    header.write(
      `${Math.floor(Date.now() / 1000)
        .toString(8)
        .padStart(11, '0')}\0`,
      136,
      12,
      'ascii',
    );
    header.write('        ', 148, 8, 'ascii');
    header.write('0', 156, 1, 'ascii');
    header.write('ustar\0', 257, 6, 'ascii');
    header.write('00', 263, 2, 'ascii');
    let sum = 0;
    for (const byte of header) sum += byte;
    header.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148, 8, 'ascii');
    blocks.push(header, body, Buffer.alloc((512 - (body.length % 512)) % 512));
  }
  blocks.push(Buffer.alloc(1024));
  return Buffer.concat(blocks);
}

const sourceTarball = () =>
  gzipSync(
    tar({
      'agent.json': JSON.stringify({ graphs: { agent: './agent.py:graph' } }),
      'agent.py': 'graph = None\n',
      'requirements.txt': 'langgraph\n',
    }),
  );

async function upload(
  body: Buffer,
  options: { key?: string | null; tenant?: string; contentType?: string | null } = {},
) {
  const key = options.key === undefined ? ADMIN_KEY : options.key;
  const contentType = options.contentType === undefined ? 'application/gzip' : options.contentType;
  const res = await t.app.inject({
    method: 'POST',
    url: '/v2/uploads',
    headers: {
      ...(key ? { 'x-api-key': key } : {}),
      ...(options.tenant ? { 'x-tenant-id': options.tenant } : {}),
      ...(contentType ? { 'content-type': contentType } : {}),
    },
    payload: body,
  });
  return { status: res.statusCode, body: res.body === '' ? undefined : JSON.parse(res.body), headers: res.headers };
}

/** What the database holds of uploads: rows and chunks. */
/** What uploads leave behind: rows, chunks, and bodies still spooled in the data directory. */
async function storedUploads(
  database: TestDatabase = t.database,
  dataDir: string = t.dataDir,
): Promise<{ rows: number; chunks: number; spooled: number }> {
  const { rows } = await database.pool.query(
    'select (select count(*)::int from source_uploads) as rows, (select count(*)::int from upload_chunks) as chunks',
  );
  const spooled = (await fs.readdir(path.join(dataDir, 'tmp')).catch(() => [])).length;
  return { rows: rows[0].rows, chunks: rows[0].chunks, spooled };
}

/** The bytes stored for an upload, its chunks joined in order. */
async function storedBytes(id: string): Promise<Buffer> {
  const { rows } = await t.database.pool.query('select data from upload_chunks where upload_id = $1 order by seq', [
    id,
  ]);
  return Buffer.concat(rows.map((r: { data: Buffer }) => r.data));
}

describe('POST /v2/uploads', () => {
  test('a gzipped tarball is stored and answered 201 with its source_tarball_path', async () => {
    const tarball = sourceTarball();
    assert.ok(gunzipSync(tarball).length % 512 === 0, 'the fixture is a real tar archive');
    const res = await upload(tarball);
    assert.equal(res.status, 201, JSON.stringify(res.body));
    assert.equal(typeof res.body.source_tarball_path, 'string');
    assert.ok(res.body.source_tarball_path.length > 0);
    assert.equal(res.body.size_bytes, tarball.length);
    assert.equal(res.body.sha256, createHash('sha256').update(tarball).digest('hex'));
    assert.match(res.body.id, /^[0-9a-f-]{36}$/);
    assert.equal(typeof res.headers['x-request-id'], 'string');
    assert.deepEqual(await storedBytes(res.body.id), tarball);
    const files = await fs.readdir(path.join(t.dataDir, 'uploads')).catch(() => [] as string[]);
    assert.deepEqual(files, [], 'nothing is kept in the data directory of the replica that received it');

    const again = await upload(tarball, { contentType: 'application/x-gzip' });
    assert.equal(again.status, 201);
    assert.notEqual(again.body.source_tarball_path, res.body.source_tarball_path, 'every upload gets its own path');
  });

  test('an internal_source deployment built from the upload gets revision 1 with that path', async () => {
    const uploaded = await upload(sourceTarball());
    assert.equal(uploaded.status, 201);
    const path = uploaded.body.source_tarball_path;
    const created = await api.post('/v2/deployments', {
      name: 'from-upload',
      source: 'internal_source',
      source_revision_config: { source_tarball_path: path, framework_config_path: 'agent.json' },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    assert.notEqual(created.body.latest_revision_id, null);
    assert.equal(created.body.source_revision_config.source_tarball_path, path);
    assert.equal(created.body.source_revision_config.framework_config_path, 'agent.json');

    const revisions = await api.get(`/v2/deployments/${created.body.id}/revisions`);
    assert.equal(revisions.body.resources.length, 1);
    const [revision] = revisions.body.resources;
    assert.equal(revision.id, created.body.latest_revision_id);
    assert.equal(revision.source, 'internal_source');
    assert.equal(revision.status, 'QUEUED');
    assert.equal(revision.source_revision_config.source_tarball_path, path);

    // A new upload patched in makes revision 2; the framework_config_path carries over.
    const next = await upload(sourceTarball());
    const patched = await api.patch(`/v2/deployments/${created.body.id}`, {
      source_revision_config: { source_tarball_path: next.body.source_tarball_path },
    });
    assert.equal(patched.status, 200, JSON.stringify(patched.body));
    assert.notEqual(patched.body.latest_revision_id, created.body.latest_revision_id);
    assert.equal(patched.body.source_revision_config.source_tarball_path, next.body.source_tarball_path);
    assert.equal(patched.body.source_revision_config.framework_config_path, 'agent.json');
    assert.equal((await api.get(`/v2/deployments/${created.body.id}/revisions`)).body.resources.length, 2);
  });

  test('an internal_source revision needs an upload path and a framework_config_path', async () => {
    const uploaded = await upload(sourceTarball());
    const noConfig = await api.post('/v2/deployments', {
      name: 'no-config-path',
      source: 'internal_source',
      source_revision_config: { source_tarball_path: uploaded.body.source_tarball_path },
    });
    assert.equal(noConfig.status, 400);
    assert.match(noConfig.body.detail, /framework_config_path/);
    for (const made of [
      '/etc/passwd',
      'uploads/../../etc/passwd',
      `${uploaded.body.source_tarball_path}x`,
      `/${uploaded.body.source_tarball_path}`,
    ]) {
      const res = await api.post('/v2/deployments', {
        name: 'made-up-path',
        source: 'internal_source',
        source_revision_config: { source_tarball_path: made, framework_config_path: 'agent.json' },
      });
      assert.equal(res.status, 400, `${made} -> ${res.status}`);
      assert.match(res.body.detail, /source_tarball_path/);
    }
    assert.deepEqual((await api.get('/v2/deployments?name=made-up-path')).body.resources, []);
  });

  test('a body that is not gzip is 400 and nothing is stored', async () => {
    const before = await storedUploads();
    for (const body of [
      Buffer.from('just some text, not a tarball'),
      tar({ 'a.txt': 'uncompressed tar' }),
      Buffer.from([0x1f]),
      Buffer.alloc(0),
    ]) {
      const res = await upload(body);
      assert.equal(res.status, 400, `${body.length} bytes -> ${res.status} ${JSON.stringify(res.body)}`);
      assert.equal(typeof res.body.detail, 'string');
    }
    assert.deepEqual(await storedUploads(), before);
  });

  test('a body sent as JSON or without a tarball content type is 415 and nothing is stored', async () => {
    const before = await storedUploads();
    const asJson = await upload(Buffer.from(JSON.stringify({ tarball: 'H4sI' })), { contentType: 'application/json' });
    assert.equal(asJson.status, 415, JSON.stringify(asJson.body));
    const asText = await upload(sourceTarball(), { contentType: 'text/plain' });
    assert.equal(asText.status, 415);
    const none = await upload(sourceTarball(), { contentType: null });
    assert.equal(none.status, 415);
    assert.deepEqual(await storedUploads(), before);
  });

  test('an upload needs an API key', async () => {
    const res = await upload(sourceTarball(), { key: null });
    assert.equal(res.status, 401);
  });

  test('a path uploaded in another workspace is refused with 400', async () => {
    const ws = await newWorkspace(t, 'other');
    const theirs = await upload(sourceTarball(), { key: t.orgKey, tenant: ws.id });
    assert.equal(theirs.status, 201, JSON.stringify(theirs.body));

    const res = await api.post('/v2/deployments', {
      name: 'borrowed-upload',
      source: 'internal_source',
      source_revision_config: {
        source_tarball_path: theirs.body.source_tarball_path,
        framework_config_path: 'agent.json',
      },
    });
    assert.equal(res.status, 400);
    assert.match(res.body.detail, /source_tarball_path/);
    assert.deepEqual((await api.get('/v2/deployments?name=borrowed-upload')).body.resources, []);

    // Nor may a patch switch an existing deployment to it.
    const mine = await upload(sourceTarball());
    const created = await api.post('/v2/deployments', {
      name: 'own-upload',
      source: 'internal_source',
      source_revision_config: {
        source_tarball_path: mine.body.source_tarball_path,
        framework_config_path: 'agent.json',
      },
    });
    assert.equal(created.status, 201);
    const patched = await api.patch(`/v2/deployments/${created.body.id}`, {
      source_revision_config: { source_tarball_path: theirs.body.source_tarball_path },
    });
    assert.equal(patched.status, 400);
    const after = await api.get(`/v2/deployments/${created.body.id}`);
    assert.equal(after.body.source_revision_config.source_tarball_path, mine.body.source_tarball_path);
    assert.equal(after.body.latest_revision_id, created.body.latest_revision_id);

    // In its own workspace the path works.
    const inTheirs = await ws.api.post('/v2/deployments', {
      name: 'borrowed-upload',
      source: 'internal_source',
      source_revision_config: {
        source_tarball_path: theirs.body.source_tarball_path,
        framework_config_path: 'agent.json',
      },
    });
    assert.equal(inTheirs.status, 201, JSON.stringify(inTheirs.body));
  });
});

describe('upload size limit', () => {
  let small: TestApp;
  before(async () => {
    small = await createTestApp({ SLIPWAY_UPLOAD_LIMIT_BYTES: '4096' });
  });
  after(() => small.close());

  test('a tarball over the configured limit is 413 and nothing is stored', async () => {
    const big = gzipSync(tar({ 'noise.bin': randomBytes(16 * 1024).toString('base64') }));
    assert.ok(big.length > 4096);
    const res = await small.app.inject({
      method: 'POST',
      url: '/v2/uploads',
      headers: { 'x-api-key': ADMIN_KEY, 'content-type': 'application/gzip' },
      payload: big,
    });
    assert.equal(res.statusCode, 413, res.body);
    assert.equal(typeof JSON.parse(res.body).detail, 'string');
    assert.deepEqual(await storedUploads(small.database, small.dataDir), { rows: 0, chunks: 0, spooled: 0 });

    const fits = await small.app.inject({
      method: 'POST',
      url: '/v2/uploads',
      headers: { 'x-api-key': ADMIN_KEY, 'content-type': 'application/gzip' },
      payload: sourceTarball(),
    });
    assert.equal(fits.statusCode, 201);
  });
});

describe('uploads larger than one chunk', () => {
  /** Random bytes do not compress: the gzip is about as large as they are. */
  const bigTarball = (bytes: number) => gzipSync(tar({ 'noise.bin': randomBytes(bytes).toString('base64') }));

  test('a tarball of several chunks is stored whole, in order', async () => {
    const tarball = bigTarball(2 * UPLOAD_CHUNK_BYTES);
    assert.ok(tarball.length > 2 * UPLOAD_CHUNK_BYTES);
    const res = await upload(tarball);
    assert.equal(res.status, 201, JSON.stringify(res.body));
    assert.equal(res.body.size_bytes, tarball.length);
    assert.deepEqual(await storedBytes(res.body.id), tarball);
    const { rows } = await t.database.pool.query('select count(*)::int as n from upload_chunks where upload_id = $1', [
      res.body.id,
    ]);
    assert.equal(rows[0].n, Math.ceil(tarball.length / UPLOAD_CHUNK_BYTES));
  });

  test('a tarball that passes the limit after some chunks were written leaves no row and no chunk', async () => {
    const limitBytes = 2 * UPLOAD_CHUNK_BYTES + 1000;
    const uploads = createUploadService({
      db: t.database.db,
      dataDir: t.dataDir,
      limitBytes,
      publicUrl: t.config.publicUrl,
    });
    const before = await storedUploads();
    const tarball = bigTarball(3 * UPLOAD_CHUNK_BYTES);
    // Sent in small pieces, as a request body arrives: the limit is only passed after two chunks.
    const pieces = Array.from({ length: Math.ceil(tarball.length / 65536) }, (_, i) =>
      tarball.subarray(i * 65536, (i + 1) * 65536),
    );
    await assert.rejects(uploads.upload(t.workspaceId, Readable.from(pieces)), { code: 'payload_too_large' });
    assert.deepEqual(await storedUploads(), before);

    // A body that breaks off after two chunks (the client went away): nothing left.
    const broken = Readable.from(
      (async function* () {
        yield* pieces.slice(0, 32);
        throw new Error('connection reset');
      })(),
    );
    await assert.rejects(uploads.upload(t.workspaceId, broken), /connection reset/);
    assert.deepEqual(await storedUploads(), before);

    // Not gzip, over one chunk: 400, nothing left either.
    await assert.rejects(
      uploads.upload(t.workspaceId, Readable.from([randomBytes(UPLOAD_CHUNK_BYTES + 10).fill(0x20)])),
      { code: 'invalid_request' },
    );
    assert.deepEqual(await storedUploads(), before);
  });
});
