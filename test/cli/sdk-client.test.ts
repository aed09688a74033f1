/**
 * The client library against a real service over real HTTP: every page of a list through the
 * iterator, one error class with status, detail, code and request id, and the transport's retries
 * (Retry-After, one Idempotency-Key for every attempt of a POST), the last against a small HTTP server
 * that answers what the test needs.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, test } from 'node:test';
import { SlipwayClient, SlipwayError, collect } from '@slipway/sdk';
import { ADMIN_KEY, createTestApp, type TestApp } from '../helpers.ts';
import { freePort } from './cli-runner.ts';

let t: TestApp;
let client: SlipwayClient;
before(async () => {
  t = await createTestApp();
  await t.app.listen({ port: 0, host: '127.0.0.1' });
  const address = t.app.server.address();
  assert.ok(address && typeof address === 'object');
  client = new SlipwayClient({ baseUrl: `http://127.0.0.1:${address.port}`, apiKey: ADMIN_KEY });
});
after(() => t.close());

test('the page iterator walks every page of a list, newest first, and stops at the last', async () => {
  const made: string[] = [];
  for (let i = 0; i < 5; i++)
    made.push(
      (
        await client.listeners.create({
          compute_type: 'k8s',
          compute_id: `cluster-${i}`,
          compute_config: { k8s_namespaces: ['agents'] },
          version: '0.1.0',
        })
      ).id,
    );

  const pages = await collect(client.listeners.pages({ limit: 2 }));
  assert.deepEqual(
    pages.map((page) => page.resources.length),
    [2, 2, 1],
  );
  assert.deepEqual(
    pages.map((page) => page.offset),
    [2, 4, 5],
  );
  const all = await collect(client.listeners.all());
  assert.deepEqual(
    all.map((listener) => listener.id),
    [...made].reverse(),
  );
  assert.deepEqual(await client.listeners.list({ offset: 3 }), all.slice(3));

  // Lists of another shape page the same way: an empty list is one empty page.
  assert.deepEqual(await collect(client.deployments.pages()), [{ resources: [], offset: 0 }]);
});

test('a failed request throws one error class with the status, detail, code and request id', async () => {
  const missing = '00000000-0000-4000-8000-000000000000';
  const error = await client.deployments.get(missing).then(
    () => assert.fail('expected a 404'),
    (e: unknown) => e,
  );
  assert.ok(error instanceof SlipwayError);
  assert.equal(error.status, 404);
  assert.equal(error.code, 'not_found');
  assert.equal(error.detail, `Deployment ID ${missing} not found.`);
  assert.match(error.requestId ?? '', /\S/);

  // The request id is the one the service logged: a request sending its own gets it back.
  const own = await client.api.GET('/v2/deployments/{deployment_id}', {
    params: { path: { deployment_id: missing } },
    headers: { 'x-request-id': 'trace-me-123' },
  });
  assert.equal(SlipwayError.fromAnswer(own.response, own.error).requestId, 'trace-me-123');

  // A 422 keeps the list of issues.
  const invalid = await client.deployments
    .create({ name: 'Not A DNS Label', source: 'internal_source' })
    .catch((e: unknown) => e);
  assert.ok(invalid instanceof SlipwayError);
  assert.equal(invalid.status, 422);
  assert.equal(invalid.code, 'validation_failed');
  assert.deepEqual(invalid.issues[0]?.loc, ['body', 'name']);

  const unauthenticated = await new SlipwayClient({
    baseUrl: client.baseUrl,
    apiKey: 'slw_wrong_0000000000000000000000',
  }).deployments
    .page()
    .catch((e: unknown) => e);
  assert.ok(unauthenticated instanceof SlipwayError);
  assert.equal(unauthenticated.status, 401);
  assert.equal(unauthenticated.code, 'unauthenticated');

  const unreachable = await new SlipwayClient({
    baseUrl: `http://127.0.0.1:${await freePort()}`,
    apiKey: ADMIN_KEY,
    maxRetries: 0,
  }).deployments
    .page()
    .catch((e: unknown) => e);
  assert.ok(unreachable instanceof SlipwayError);
  assert.equal(unreachable.status, null);
  assert.equal(unreachable.code, 'connection_failed');
});

/** An HTTP server answering from a script of responses, recording what it was sent. */
async function scriptedServer(
  answers: { status: number; headers?: Record<string, string>; body?: unknown; hang?: boolean }[],
) {
  const seen: { method: string; url: string; headers: http.IncomingHttpHeaders }[] = [];
  const server = http.createServer((request, response) => {
    seen.push({ method: request.method ?? '', url: request.url ?? '', headers: request.headers });
    request.resume();
    const answer = answers[Math.min(seen.length - 1, answers.length - 1)]!;
    if (answer.hang) return;
    response.writeHead(answer.status, {
      'content-type': 'application/json',
      'x-request-id': `req-${seen.length}`,
      ...answer.headers,
    });
    response.end(JSON.stringify(answer.body ?? {}));
  });
  const port = await freePort();
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  return {
    seen,
    client: (options: { maxRetries?: number; timeoutMs?: number } = {}) =>
      new SlipwayClient({
        baseUrl: `http://127.0.0.1:${port}`,
        apiKey: 'k',
        tenantId: 'ws-1',
        initialDelayMs: 1,
        ...options,
      }),
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

test('retries honour Retry-After, and a retried POST carries the same Idempotency-Key', async () => {
  const busy = {
    status: 503,
    headers: { 'retry-after': '0' },
    body: { detail: 'Service unavailable', code: 'unavailable' },
  };
  const page = { status: 200, body: { resources: [], offset: 0 } };
  const server = await scriptedServer([
    busy,
    { status: 429, headers: { 'retry-after': '0' }, body: { detail: 'slow down', code: 'too_many_requests' } },
    page,
  ]);
  try {
    assert.deepEqual(await server.client().listeners.list(), []);
    assert.equal(server.seen.length, 3);
    assert.equal(server.seen[0]!.headers['x-api-key'], 'k');
    assert.equal(server.seen[0]!.headers['x-tenant-id'], 'ws-1');
    assert.equal(server.seen[0]!.headers['idempotency-key'], undefined, 'a GET needs no key');
  } finally {
    await server.close();
  }

  const created = { status: 201, body: { id: 'x' } };
  const posts = await scriptedServer([busy, created]);
  try {
    await posts.client().apiKeys.create({ name: 'ci' });
    assert.equal(posts.seen.length, 2);
    const keys = posts.seen.map((s) => String(s.headers['idempotency-key']));
    assert.match(keys[0] ?? '', /^[0-9a-f-]{36}$/);
    assert.equal(keys[1], keys[0]);
  } finally {
    await posts.close();
  }

  // A 500 or a 409 "still running" to a POST is asked again with the same key: the service keeps no
  // key of a failed answer, and answers a repeat of a finished one with its first answer.
  const recovering = await scriptedServer([
    { status: 500, body: { detail: 'Internal server error', code: 'internal' } },
    {
      status: 409,
      headers: { 'retry-after': '0' },
      body: { detail: 'still running', code: 'idempotency_key_in_progress' },
    },
    created,
  ]);
  try {
    await recovering.client().apiKeys.create({ name: 'ci' });
    assert.equal(recovering.seen.length, 3);
    assert.equal(new Set(recovering.seen.map((s) => s.headers['idempotency-key'])).size, 1);
  } finally {
    await recovering.close();
  }

  // When the retries run out, the last answer is the error, with its request id.
  const failing = await scriptedServer([{ status: 500, body: { detail: 'Internal server error', code: 'internal' } }]);
  try {
    const error = await failing
      .client({ maxRetries: 1 })
      .apiKeys.create({ name: 'ci' })
      .catch((e: unknown) => e);
    assert.ok(error instanceof SlipwayError);
    assert.equal(error.status, 500);
    assert.equal(error.requestId, 'req-2');
    assert.equal(failing.seen.length, 2);
  } finally {
    await failing.close();
  }

  const silent = await scriptedServer([{ status: 200, hang: true }]);
  try {
    const error = await silent
      .client({ timeoutMs: 100, maxRetries: 1 })
      .listeners.list()
      .catch((e: unknown) => e);
    assert.ok(error instanceof SlipwayError);
    assert.equal(error.code, 'timeout');
    assert.equal(silent.seen.length, 2);
  } finally {
    await silent.close();
  }
});
