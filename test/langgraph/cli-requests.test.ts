/**
 * What LangChain's `langgraph deploy --remote` sends, request by request (docs/langgraph.md), answered
 * as it needs: an empty create, an upload URL that authenticates itself once, the PUT without an API
 * key, the PATCH with `langgraph_config_path`, revision polling, logs in its shape, and the image path
 * refused with a message that says what to do. The build itself runs in deploy-example.test.ts.
 */
import assert from 'node:assert/strict';
import { createHash, randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { gzipSync } from 'node:zlib';
import { UPLOAD_URL_TTL_MS } from '../../src/service/uploads.ts';
import { appendRevisionLogs } from '../../src/store/revision-logs.ts';
import { ADMIN_KEY, client, createTestApp, type TestApp } from '../helpers.ts';
import { createTestClock } from '../support/clock.ts';

let t: TestApp;
let api: ReturnType<typeof client>;
/** The headers the CLI sends with every request. */
const CLI = { accept: 'application/json' };
/** The service's clock: a test moves it past an upload URL's expiry instead of waiting. */
const clock = createTestClock();

before(async () => {
  t = await createTestApp({}, { now: clock.now });
  api = client(t.app);
});
after(() => t.close());

/** A gzipped tar holding one file (enough for the upload checks; nothing builds it here). */
function tarball(text = 'graph'): Buffer {
  const body = Buffer.from(text);
  const header = Buffer.alloc(512);
  header.write('langgraph.json', 0);
  header.write('0000644\0', 100);
  header.write('0000000\0', 108);
  header.write('0000000\0', 116);
  header.write(`${body.length.toString(8).padStart(11, '0')}\0`, 124);
  header.write(
    `${Math.floor(Date.now() / 1000)
      .toString(8)
      .padStart(11, '0')}\0`,
    136,
  );
  header.write('        ', 148);
  header.write('0', 156);
  header.write('ustar\0', 257);
  header.write('00', 263);
  let sum = 0;
  for (const byte of header) sum += byte;
  header.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148);
  return gzipSync(Buffer.concat([header, body, Buffer.alloc(512 - body.length), Buffer.alloc(1024)]));
}

/** The PUT of the CLI's `_upload_to_gcs`: no API key, gzip content type, the signed URL as it is. */
async function put(uploadUrl: string, body: Buffer, contentType = 'application/gzip') {
  const url = new URL(uploadUrl);
  const res = await t.app.inject({
    method: 'PUT',
    url: `${url.pathname}${url.search}`,
    headers: { 'content-type': contentType, 'x-goog-content-length-range': '0,209715200' },
    payload: body,
  });
  return { status: res.statusCode, body: res.body === '' ? undefined : JSON.parse(res.body) };
}

/** What the database holds of uploads: rows and chunks. */
async function stored(database = t.database): Promise<{ rows: number; chunks: number }> {
  const { rows } = await database.pool.query(
    'select (select count(*)::int from source_uploads) as rows, (select count(*)::int from upload_chunks) as chunks',
  );
  return { rows: rows[0].rows, chunks: rows[0].chunks };
}

/** Steps 1 and 2 of the CLI: no deployment of that name, so an empty create. */
async function createLikeTheCli(name: string): Promise<string> {
  const found = await api.get(`/v2/deployments?name_contains=${name}`, CLI);
  assert.equal(found.status, 200);
  assert.equal(found.body.resources.filter((d: { name: string }) => d.name === name).length, 0);
  const created = await api.post(
    '/v2/deployments',
    {
      name,
      source: 'internal_source',
      source_config: { deployment_type: 'dev' },
      source_revision_config: {},
      secrets: [{ name: 'REPLY_PREFIX', value: 'From secret' }],
    },
    CLI,
  );
  assert.equal(created.status, 201, JSON.stringify(created.body));
  assert.equal(created.body.latest_revision_id, null, 'no source yet, so no revision');
  return created.body.id;
}

async function uploadUrl(deploymentId: string): Promise<{ upload_url: string; object_path: string }> {
  // The CLI posts with no body at all.
  const res = await api.call('POST', `/v2/deployments/${deploymentId}/upload-url`, undefined, CLI);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body;
}

describe('the remote-build request sequence', () => {
  test('empty create, upload URL, PUT without a key, PATCH with langgraph_config_path, then polling', async () => {
    const deploymentId = await createLikeTheCli('cli-sequence');
    assert.deepEqual((await api.get(`/v2/deployments/${deploymentId}/revisions?limit=1`, CLI)).body.resources, []);

    const { upload_url: url, object_path: objectPath } = await uploadUrl(deploymentId);
    assert.ok(url.startsWith(`${t.config.publicUrl}/`), `${url} is on the public URL ${t.config.publicUrl}`);
    assert.match(objectPath, /^uploads\/[0-9a-f-]{36}\.tar\.gz$/);

    const body = tarball();
    const before = await stored();
    const uploaded = await put(url, body);
    assert.equal(uploaded.status, 200, JSON.stringify(uploaded.body));
    assert.equal(uploaded.body.source_tarball_path, objectPath);
    assert.equal(uploaded.body.sha256, createHash('sha256').update(body).digest('hex'));
    const after = await stored();
    assert.equal(after.rows, before.rows + 1);
    const { rows: bytes } = await t.database.pool.query(
      'select c.data from upload_chunks c join source_uploads u on u.id = c.upload_id where u.path = $1 order by c.seq',
      [objectPath],
    );
    assert.deepEqual(Buffer.concat(bytes.map((r: { data: Buffer }) => r.data)), body);

    const patched = await api.patch(
      `/v2/deployments/${deploymentId}`,
      {
        revision_source: 'internal_source',
        source_revision_config: { source_tarball_path: objectPath, langgraph_config_path: 'langgraph.json' },
        secrets: [{ name: 'REPLY_PREFIX', value: 'From secret' }],
        tracked_packages: ['langgraph'],
      },
      CLI,
    );
    assert.equal(patched.status, 200, JSON.stringify(patched.body));
    assert.equal(patched.body.source_revision_config.framework_config_path, 'langgraph.json');
    assert.equal(
      'langgraph_config_path' in patched.body.source_revision_config,
      false,
      'answers show framework_config_path only',
    );
    assert.notEqual(patched.body.latest_revision_id, null);

    // Polling: the newest revision first, already the one the PATCH made; then that revision by id.
    const latest = await api.get(`/v2/deployments/${deploymentId}/revisions?limit=1`, CLI);
    assert.equal(latest.body.resources.length, 1);
    assert.equal(latest.body.resources[0].id, patched.body.latest_revision_id);
    const revision = await api.get(`/v2/deployments/${deploymentId}/revisions/${patched.body.latest_revision_id}`, CLI);
    assert.equal(revision.status, 200);
    assert.equal(revision.body.status, 'QUEUED');
    assert.equal(revision.body.source_revision_config.framework_config_path, 'langgraph.json');

    // A second deploy of the same project: found by name, new URL, new revision, newest first.
    const found = await api.get('/v2/deployments?name_contains=cli-sequence', CLI);
    assert.equal(found.body.resources.find((d: { name: string }) => d.name === 'cli-sequence')?.id, deploymentId);
    const second = await uploadUrl(deploymentId);
    assert.equal((await put(second.upload_url, tarball('v2'))).status, 200);
    const repatched = await api.patch(
      `/v2/deployments/${deploymentId}`,
      {
        revision_source: 'internal_source',
        source_revision_config: { source_tarball_path: second.object_path, langgraph_config_path: 'langgraph.json' },
      },
      CLI,
    );
    assert.equal(repatched.status, 200, JSON.stringify(repatched.body));
    const newest = await api.get(`/v2/deployments/${deploymentId}/revisions?limit=1`, CLI);
    assert.equal(newest.body.resources[0].id, repatched.body.latest_revision_id);
  });

  test('langgraph_config_path and framework_config_path together must agree (422 otherwise)', async () => {
    const deploymentId = await createLikeTheCli('alias-conflict');
    const { upload_url: url, object_path: objectPath } = await uploadUrl(deploymentId);
    assert.equal((await put(url, tarball())).status, 200);
    const conflict = await api.patch(`/v2/deployments/${deploymentId}`, {
      revision_source: 'internal_source',
      source_revision_config: {
        source_tarball_path: objectPath,
        langgraph_config_path: 'langgraph.json',
        framework_config_path: 'slipway.json',
      },
    });
    assert.equal(conflict.status, 422, JSON.stringify(conflict.body));
    assert.equal(conflict.body.code, 'validation_failed');
    assert.deepEqual(conflict.body.detail[0].loc, ['body', 'source_revision_config', 'langgraph_config_path']);
    assert.match(conflict.body.detail[0].msg, /framework_config_path/);
    assert.equal((await api.get(`/v2/deployments/${deploymentId}`)).body.latest_revision_id, null, 'nothing was made');

    const same = await api.patch(`/v2/deployments/${deploymentId}`, {
      source_revision_config: {
        source_tarball_path: objectPath,
        langgraph_config_path: 'apps/agent/langgraph.json',
        framework_config_path: 'apps/agent/langgraph.json',
      },
    });
    assert.equal(same.status, 200, JSON.stringify(same.body));
    assert.equal(same.body.source_revision_config.framework_config_path, 'apps/agent/langgraph.json');

    // On a create too, and with the same path rules as framework_config_path.
    const created = await api.post('/v2/deployments', {
      name: 'alias-create',
      source: 'internal_source',
      source_revision_config: { source_tarball_path: objectPath, langgraph_config_path: 'langgraph.json' },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    assert.equal(created.body.source_revision_config.framework_config_path, 'langgraph.json');
    const escaping = await api.patch(`/v2/deployments/${deploymentId}`, {
      source_revision_config: { source_tarball_path: objectPath, langgraph_config_path: '../langgraph.json' },
    });
    assert.equal(escaping.status, 422);
  });
});

describe('upload URLs', () => {
  test('a tampered token, a token for another upload, and a missing token are 403 and nothing is stored', async () => {
    const deploymentId = await createLikeTheCli('tampered-token');
    const { upload_url: url } = await uploadUrl(deploymentId);
    const other = await uploadUrl(deploymentId);
    const before = await stored();
    const token = new URL(url).searchParams.get('token')!;
    const flipped = `${token.slice(0, -1)}${token.endsWith('A') ? 'B' : 'A'}`;
    const tampered = new URL(url);
    tampered.searchParams.set('token', flipped);
    const forged = new URL(url);
    forged.searchParams.set('token', 'slw-made-up-token');
    const swapped = new URL(url);
    swapped.searchParams.set('token', new URL(other.upload_url).searchParams.get('token')!);
    const unknownId = new URL(url);
    unknownId.pathname = `/v2/uploads/${randomUUID()}`;
    for (const attempt of [tampered, forged, swapped, unknownId]) {
      const res = await put(attempt.toString(), tarball());
      assert.equal(res.status, 403, `${attempt} -> ${res.status} ${JSON.stringify(res.body)}`);
      assert.match(res.body.detail, /upload URL is not valid/);
    }
    const withoutToken = new URL(url);
    withoutToken.search = '';
    assert.equal((await put(withoutToken.toString(), tarball())).status, 422);
    assert.deepEqual(await stored(), before);
    // The real URLs still work: a refused attempt does not use them up.
    assert.equal((await put(url, tarball())).status, 200);
    assert.equal((await put(other.upload_url, tarball())).status, 200);
  });

  test('a token is good for one upload: a reused URL is 403, and a failed upload uses it up leaving nothing', async () => {
    const deploymentId = await createLikeTheCli('reused-token');
    const { upload_url: url } = await uploadUrl(deploymentId);
    assert.equal((await put(url, tarball())).status, 200);
    const before = await stored();
    const again = await put(url, tarball('other'));
    assert.equal(again.status, 403);
    assert.deepEqual(await stored(), before);

    const failing = await uploadUrl(deploymentId);
    const notGzip = await put(failing.upload_url, Buffer.from('not a tarball'));
    assert.equal(notGzip.status, 400, JSON.stringify(notGzip.body));
    assert.deepEqual(await stored(), before, 'a failed upload leaves no row and no chunk');
    assert.equal((await put(failing.upload_url, tarball())).status, 403);
    // A wrong content type is refused before the token is looked at, so the URL stays usable.
    const typed = await uploadUrl(deploymentId);
    assert.equal((await put(typed.upload_url, tarball(), 'application/json')).status, 415);
    assert.equal((await put(typed.upload_url, tarball())).status, 200);
  });

  test('an upload over the upload limit is 413 and nothing is stored, as for POST /v2/uploads', async () => {
    const small = await createTestApp({ SLIPWAY_UPLOAD_LIMIT_BYTES: '4096' });
    try {
      const smallApi = client(small.app);
      const created = await smallApi.post('/v2/deployments', {
        name: 'small-limit',
        source: 'internal_source',
        source_config: { deployment_type: 'dev' },
        source_revision_config: {},
      });
      const target = await smallApi.call('POST', `/v2/deployments/${created.body.id}/upload-url`);
      const url = new URL(target.body.upload_url);
      const big = gzipSync(Buffer.from(Array.from({ length: 4000 }, (_, i) => `${i}:${Math.random()}`).join('\n')));
      assert.ok(big.length > 4096);
      const res = await small.app.inject({
        method: 'PUT',
        url: `${url.pathname}${url.search}`,
        headers: { 'content-type': 'application/gzip' },
        payload: big,
      });
      assert.equal(res.statusCode, 413, res.body);
      assert.deepEqual(await stored(small.database), { rows: 0, chunks: 0 });
    } finally {
      await small.close();
    }
  });

  test('an expired token is 403 and nothing is stored', async () => {
    const deploymentId = await createLikeTheCli('expired-token');
    const { upload_url: url } = await uploadUrl(deploymentId);
    clock.advance(UPLOAD_URL_TTL_MS + 1000);
    const before = await stored();
    const res = await put(url, tarball());
    assert.equal(res.status, 403);
    assert.deepEqual(await stored(), before);
  });

  test('only the token is stored, as a hash, and only for a deployment of the caller', async () => {
    const deploymentId = await createLikeTheCli('hashed-token');
    const { upload_url: url } = await uploadUrl(deploymentId);
    const token = new URL(url).searchParams.get('token')!;
    const { rows } = await t.database.pool.query('select token_hash from upload_tokens');
    assert.ok(rows.length > 0);
    for (const row of rows) assert.equal(Buffer.from(row.token_hash).toString('utf8').includes(token), false);
    assert.ok(rows.some((row) => Buffer.from(row.token_hash).equals(createHash('sha256').update(token).digest())));

    const unknown = await api.call('POST', `/v2/deployments/${randomUUID()}/upload-url`);
    assert.equal(unknown.status, 404);
    assert.match(unknown.body.detail, /Deployment ID .* not found/);
    const anonymous = await client(t.app, null).call('POST', `/v2/deployments/${deploymentId}/upload-url`);
    assert.equal(anonymous.status, 401);
  });
});

describe('the image path', () => {
  test('an internal_docker create, a push token and an image patch all say to use --remote', async () => {
    const created = await api.post(
      '/v2/deployments',
      {
        name: 'image-deploy',
        source: 'internal_docker',
        source_config: { deployment_type: 'dev' },
        source_revision_config: {},
        secrets: [],
      },
      CLI,
    );
    assert.equal(created.status, 400, JSON.stringify(created.body));
    assert.match(created.body.detail, /langgraph deploy --remote/);
    assert.deepEqual((await api.get('/v2/deployments?name=image-deploy')).body.resources, []);

    const deploymentId = await createLikeTheCli('image-then-push');
    const token = await api.call('POST', `/v2/deployments/${deploymentId}/push-token`, undefined, CLI);
    assert.equal(token.status, 400);
    assert.match(token.body.detail, /langgraph deploy --remote/);
    const patched = await api.patch(
      `/v2/deployments/${deploymentId}`,
      {
        revision_source: 'internal_docker',
        source_revision_config: { image_uri: 'registry.example/agent@sha256:abc' },
      },
      CLI,
    );
    assert.equal(patched.status, 400);
    assert.match(patched.body.detail, /langgraph deploy --remote/);
    assert.equal((await api.call('POST', `/v2/deployments/${randomUUID()}/push-token`)).status, 404);
  });
});

describe('logs in the shape of langgraph deploy', () => {
  test('build_logs pages with order, limit and offset; deploy_logs filter by level, query and time', async () => {
    const deploymentId = await createLikeTheCli('log-shapes');
    const { upload_url: url, object_path: objectPath } = await uploadUrl(deploymentId);
    await put(url, tarball());
    const patched = await api.patch(`/v2/deployments/${deploymentId}`, {
      revision_source: 'internal_source',
      source_revision_config: { source_tarball_path: objectPath, langgraph_config_path: 'langgraph.json' },
    });
    const revisionId: string = patched.body.latest_revision_id;
    const early = new Date('2026-01-01T10:00:00.000Z');
    const late = new Date('2026-01-01T10:05:00.000Z');
    await appendRevisionLogs(t.database.db, revisionId, 'build', [
      { stream: 'system', line: 'Running the install command: npm ci', at: early },
      { stream: 'stdout', line: 'added 22 packages in 2s', at: early },
      { stream: 'stderr', line: 'npm warn deprecated glob@7', at: early },
      { stream: 'system', line: 'Build finished', at: late },
    ]);
    await appendRevisionLogs(t.database.db, revisionId, 'deploy', [
      { stream: 'stdout', line: 'info:    ▪ Starting server...', at: early },
      { stream: 'stdout', line: 'error:   ▪ Error: Failed to load graph agent', at: late },
      { stream: 'stderr', line: 'WARNING: low memory', at: late },
      { stream: 'stderr', line: 'Traceback (most recent call last):', at: late },
    ]);
    const base = `/v1/projects/${deploymentId}/revisions/${revisionId}`;

    // What the CLI sends while it waits: asc, 50 at a time, then from next_offset.
    const first = await api.post(`${base}/build_logs`, { order: 'asc', limit: 3 }, CLI);
    assert.equal(first.status, 200, JSON.stringify(first.body));
    assert.deepEqual(
      first.body.logs.map((l: { message: string }) => l.message),
      ['Running the install command: npm ci', 'added 22 packages in 2s', 'npm warn deprecated glob@7'],
    );
    for (const entry of first.body.logs) {
      assert.equal(typeof entry.id, 'string');
      assert.equal(entry.timestamp, early.getTime());
    }
    assert.deepEqual(
      first.body.logs.map((l: { level: string }) => l.level),
      ['INFO', 'INFO', 'ERROR'],
    );
    const rest = await api.post(`${base}/build_logs`, { order: 'asc', limit: 3, offset: first.body.next_offset });
    assert.deepEqual(
      rest.body.logs.map((l: { message: string }) => l.message),
      ['Build finished'],
    );
    const nothingNew = await api.post(`${base}/build_logs`, { order: 'asc', limit: 3, offset: rest.body.next_offset });
    assert.deepEqual(nothingNew.body, { logs: [], next_offset: rest.body.next_offset });
    // After a failure: the last lines, newest first.
    const tail = await api.post(`${base}/build_logs`, { order: 'desc', limit: 2 });
    assert.deepEqual(
      tail.body.logs.map((l: { message: string }) => l.message),
      ['Build finished', 'npm warn deprecated glob@7'],
    );
    const older = await api.post(`${base}/build_logs`, { order: 'desc', limit: 2, offset: tail.body.next_offset });
    assert.deepEqual(
      older.body.logs.map((l: { message: string }) => l.message),
      ['added 22 packages in 2s', 'Running the install command: npm ci'],
    );

    // `langgraph deploy logs`: the revision's or the deployment's app output, filtered.
    const levels = await api.post(`${base}/deploy_logs`, { order: 'asc', limit: 100 });
    assert.deepEqual(
      levels.body.logs.map((l: { level: string }) => l.level),
      ['INFO', 'ERROR', 'WARNING', 'ERROR'],
    );
    const errors = await api.post(`${base}/deploy_logs`, { limit: 100, order: 'desc', level: 'ERROR' });
    assert.deepEqual(
      errors.body.logs.map((l: { message: string }) => l.message),
      ['Traceback (most recent call last):', 'error:   ▪ Error: Failed to load graph agent'],
    );
    const query = await api.post(`/v1/projects/${deploymentId}/deploy_logs`, {
      limit: 100,
      order: 'desc',
      query: 'FAILED TO load',
    });
    assert.deepEqual(
      query.body.logs.map((l: { message: string }) => l.message),
      ['error:   ▪ Error: Failed to load graph agent'],
    );
    const since = await api.post(`/v1/projects/${deploymentId}/deploy_logs`, {
      limit: 100,
      order: 'asc',
      start_time: new Date(late.getTime()).toISOString().replace('Z', '000+00:00'),
    });
    assert.equal(since.body.logs.length, 3, 'start_time is inclusive, and takes what datetime.isoformat() prints');
    const until = await api.post(`/v1/projects/${deploymentId}/deploy_logs`, {
      limit: 100,
      order: 'asc',
      end_time: '2026-01-01T10:01:00Z',
    });
    assert.deepEqual(
      until.body.logs.map((l: { message: string }) => l.message),
      ['info:    ▪ Starting server...'],
    );

    // Mistakes read well.
    const badOffset = await api.post(`${base}/build_logs`, { order: 'asc', offset: 'not-an-offset' });
    assert.equal(badOffset.status, 422);
    assert.deepEqual(badOffset.body.detail[0].loc, ['body', 'offset']);
    const badTime = await api.post(`${base}/deploy_logs`, { start_time: 'yesterday' });
    assert.equal(badTime.status, 422);
    assert.deepEqual(badTime.body.detail[0].loc, ['body', 'start_time']);
    const badLevel = await api.post(`${base}/deploy_logs`, { level: 'LOUD' });
    assert.equal(badLevel.status, 422);
    const unknownRevision = await api.post(`/v1/projects/${deploymentId}/revisions/${randomUUID()}/build_logs`, {
      order: 'asc',
    });
    assert.equal(unknownRevision.status, 404);
    assert.match(unknownRevision.body.detail, /Revision ID .* not found/);
    const unknownDeployment = await api.post(`/v1/projects/${randomUUID()}/deploy_logs`, {});
    assert.equal(unknownDeployment.status, 404);
    assert.match(unknownDeployment.body.detail, /Deployment ID .* not found/);
    const noKey = await client(t.app, null).post(`${base}/build_logs`, { order: 'asc' });
    assert.equal(noKey.status, 401);
    assert.ok(ADMIN_KEY);
  });

  test('a deployment without any revision has no deploy logs yet', async () => {
    const deploymentId = await createLikeTheCli('no-logs-yet');
    const res = await api.post(`/v1/projects/${deploymentId}/deploy_logs`, { limit: 100, order: 'desc' });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.deepEqual(res.body, { logs: [], next_offset: null });
  });
});
