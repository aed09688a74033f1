/**
 * Write requests carry `Content-Type: application/json` (docs/api.md, "Conventions"), and many HTTP
 * clients send it on every write whether or not there is a body. An operation that reads no body (a
 * delete, a redeploy, an interrupt, a credential creation...) must take such a request: an empty body
 * with that header, or an empty JSON object. Found by a client that follows the interface to the letter:
 * `DELETE /v2/deployments/{id}` answered 422 `Body is empty` and deleted nothing.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { ADMIN_KEY, client, createTestApp, type TestApp } from '../support/harness.ts';

let t: TestApp;
let api: ReturnType<typeof client>;

before(async () => {
  t = await createTestApp();
  api = client(t.app);
});
after(() => t.close());

interface Operation {
  requestBody?: { required?: boolean; description?: string; content?: Record<string, { schema?: unknown }> };
}

const BODY_METHODS = ['post', 'put', 'patch', 'delete'];

/** The served document's write operations that need no body. */
async function bodylessOperations(): Promise<{ method: string; path: string; op: Operation }[]> {
  const doc = (await api.get('/openapi.json')).body as { paths: Record<string, Record<string, Operation>> };
  const out: { method: string; path: string; op: Operation }[] = [];
  for (const [path, item] of Object.entries(doc.paths))
    for (const [method, op] of Object.entries(item))
      if (BODY_METHODS.includes(method) && op.requestBody?.required !== true) out.push({ method, path, op });
  return out;
}

/** A refusal of the body itself: a 415, or a 422 with an item at the body. */
function refusesBody(res: { status: number; body?: any }): boolean {
  if (res.status === 415) return true;
  if (res.status !== 422 || !Array.isArray(res.body?.detail)) return false;
  return res.body.detail.some((item: { loc: unknown[] }) => item.loc[0] === 'body');
}

describe('operations that read no body', () => {
  test('take Content-Type: application/json with an empty body, and {}', async () => {
    const ops = await bodylessOperations();
    // Deletes, redeploy, interrupt, credential and token creation, upload URL, push token, sign-out...
    assert.ok(ops.length >= 20, `found ${ops.length} body-less write operations`);
    const refused: string[] = [];
    for (const { method, path } of ops) {
      const url = path.replace(/\{[^}]+\}/g, () => randomUUID());
      for (const payload of ['', '{}']) {
        // inject() rather than the checked client: every refusal is listed, not only the first.
        const answer = await t.app.inject({
          method: method.toUpperCase() as 'POST',
          url,
          payload,
          headers: { 'x-api-key': ADMIN_KEY, 'content-type': 'application/json' },
        });
        const res = { status: answer.statusCode, body: answer.body === '' ? undefined : JSON.parse(answer.body) };
        if (refusesBody(res))
          refused.push(
            `${method.toUpperCase()} ${path} ${JSON.stringify(payload)}: ${res.status} ${JSON.stringify(res.body)}`,
          );
      }
    }
    assert.deepEqual(refused, []);
  });

  test('the OpenAPI document says the body is optional and what is accepted', async () => {
    for (const { method, path, op } of await bodylessOperations()) {
      const label = `${method.toUpperCase()} ${path}`;
      assert.equal(op.requestBody?.required, false, `${label} documents an optional body`);
      assert.ok(op.requestBody?.content?.['application/json']?.schema, `${label} documents application/json`);
      assert.match(op.requestBody?.description ?? '', /empty/, `${label} says an empty body is accepted`);
    }
  });

  test('a DELETE with the header and no body deletes the deployment', async () => {
    const made = await api.post('/v2/deployments', {
      name: 'bodyless-delete',
      source: 'internal_container',
      source_revision_config: { image_uri: 'registry.example.com/agent:1' },
    });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    const res = await api.call('DELETE', `/v2/deployments/${made.body.id}`, '', { 'content-type': 'application/json' });
    assert.equal(res.status, 204, JSON.stringify(res.body));
    const after = await api.get(`/v2/deployments/${made.body.id}`);
    assert.ok(after.status === 404 || after.body.status === 'AWAITING_DELETE', `${after.status} ${after.body?.status}`);
  });

  test('an operation that needs a body still refuses an empty one, at the body', async () => {
    for (const [method, url] of [
      ['POST', '/v2/deployments'],
      ['PATCH', `/v2/deployments/${randomUUID()}`],
    ] as const) {
      const res = await api.call(method, url, '', { 'content-type': 'application/json' });
      assert.equal(res.status, 422, `${method} ${url}: ${JSON.stringify(res.body)}`);
      assert.deepEqual(res.body.detail[0].loc, ['body']);
    }
  });
});
