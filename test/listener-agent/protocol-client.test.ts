/**
 * The agent's protocol client is the SDK's HTTP layer (openapi-fetch over the generated types, the
 * retrying fetch, SlipwayError): a busy service is asked again within one call, honouring Retry-After;
 * a refusal is a SlipwayError sorted into permanent or not; a long-poll's 304 is "unchanged".
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { SlipwayError } from '../../packages/sdk/src/slipway-error.ts';
import { createProtocolClient, permanentRefusal } from '@slipway/listener/protocol-client';

const ID = '0b9e1c2d-0000-4000-8000-0000000000aa';
type Answer = { status: number; body?: unknown; headers?: Record<string, string> };
let answers: Answer[] = [];
const seen: { method: string; url: string; authorization: string | undefined; body: string }[] = [];
let server: http.Server;
let url: string;

before(async () => {
  server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      seen.push({
        method: req.method!,
        url: req.url!,
        authorization: req.headers.authorization,
        body: Buffer.concat(chunks).toString(),
      });
      const answer = answers.shift() ?? { status: 500, body: { detail: 'no answer planned' } };
      res.writeHead(answer.status, {
        ...(answer.body === undefined ? {} : { 'content-type': 'application/json' }),
        ...answer.headers,
      });
      res.end(answer.body === undefined ? undefined : JSON.stringify(answer.body));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
after(() => new Promise<void>((resolve) => server.close(() => resolve())));

const client = () => createProtocolClient({ baseUrl: url, listenerId: ID, credential: 'slwl_test' });
const signal = () => new AbortController().signal;

describe('the protocol client', () => {
  test('a busy service (503, Retry-After) is asked again within the call; the desired state is read', async () => {
    seen.length = 0;
    answers = [
      { status: 503, body: { detail: 'busy', code: 'service_unavailable' }, headers: { 'retry-after': '0' } },
      { status: 200, body: { protocol: 1, listener_id: ID, deployments: [] }, headers: { etag: '"e1"' } },
    ];
    const answer = await client().desiredState(null, 20, signal());
    assert.notEqual(answer, 'unchanged');
    assert.equal(answer !== 'unchanged' && answer.etag, '"e1"');
    assert.equal(seen.length, 2);
    assert.equal(seen[1]!.url, `/v2/listeners/${ID}/desired-state?wait=0`);
    assert.equal(seen[1]!.authorization, 'Bearer slwl_test');
  });

  test("a long-poll's 304 is unchanged, and it sends the ETag it has", async () => {
    seen.length = 0;
    answers = [{ status: 304, headers: { etag: '"e1"' } }];
    assert.equal(await client().desiredState('"e1"', 20, signal()), 'unchanged');
    assert.equal(seen[0]!.url, `/v2/listeners/${ID}/desired-state?wait=20`);
  });

  test('a refusal is a SlipwayError: 404 and 409 are permanent, 401 is not and says what to check', async () => {
    answers = [{ status: 404, body: { detail: 'Revision r not found', code: 'not_found' } }];
    const notFound = await client()
      .report({ revision_id: ID, status: 'DEPLOYED' }, signal())
      .catch((e: unknown) => e);
    assert.ok(notFound instanceof SlipwayError);
    assert.equal(notFound.code, 'not_found');
    assert.equal(permanentRefusal(notFound), true);

    answers = [{ status: 409, body: { detail: 'not being deleted', code: 'conflict' } }];
    const conflict = await client()
      .confirmDeletion(ID, signal())
      .catch((e: unknown) => e);
    assert.equal(permanentRefusal(conflict), true);

    answers = [{ status: 401, body: { detail: 'Invalid or missing listener credential', code: 'unauthorized' } }];
    const refused = await client()
      .heartbeat({ version: '0.1.0', namespaces: [] }, signal())
      .catch((e: unknown) => e);
    assert.ok(refused instanceof SlipwayError);
    assert.equal(refused.status, 401);
    assert.equal(permanentRefusal(refused), false);
    assert.match(refused.message, /SLIPWAY_LISTENER_CREDENTIAL/);
  });

  test('no answer at all is a SlipwayError without a status, not permanent', async () => {
    const closed = http.createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    const error = await createProtocolClient({
      baseUrl: `http://127.0.0.1:${port}`,
      listenerId: ID,
      credential: 'slwl_test',
      fetch: (request) => fetch(request),
    })
      .heartbeat({ version: '0.1.0', namespaces: [] }, signal())
      .catch((e: unknown) => e);
    assert.ok(error instanceof SlipwayError);
    assert.equal(error.status, null);
    assert.equal(error.code, 'connection_failed');
    assert.equal(permanentRefusal(error), false);
  });
});
