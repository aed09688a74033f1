/**
 * What the OpenAPI document promises about answers every route shares (docs/api.md): 412 wherever
 * If-Match can fail, 400 and 503 with Retry-After everywhere, the headers of idempotent and conditional
 * answers, and `Cache-Control: no-store` on every answer that holds a credential shown once.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import Fastify from 'fastify';
import { applyShownOnce, SHOWN_ONCE } from '../../src/http/shown-once.ts';
import { ShownOnceString } from '../../src/http/schema-helpers.ts';
import { Type } from 'typebox';
import { ADMIN_KEY, client, createTestApp, type TestApp } from '../support/harness.ts';

interface Schema {
  $ref?: string;
  type?: string | string[];
  description?: string;
  properties?: Record<string, Schema>;
  items?: Schema;
  anyOf?: Schema[];
  [SHOWN_ONCE]?: boolean;
}
interface Response {
  $ref?: string;
  headers?: Record<string, { schema?: Schema; description?: string; required?: boolean }>;
  content?: Record<string, { schema?: Schema }>;
}
interface Operation {
  operationId?: string;
  parameters?: { in: string; name: string }[];
  responses: Record<string, Response>;
}
interface Document {
  paths: Record<string, Record<string, Operation>>;
  components: { schemas: Record<string, Schema>; responses: Record<string, Response> };
}

let t: TestApp;
let doc: Document;

before(async () => {
  t = await createTestApp();
  doc = (await client(t.app, null).get<Document>('/openapi.json')).body;
});
after(() => t.close());

function operations(): { route: string; method: string; url: string; op: Operation }[] {
  return Object.entries(doc.paths).flatMap(([url, item]) =>
    Object.entries(item).map(([method, op]) => ({ route: `${method.toUpperCase()} ${url}`, method, url, op })),
  );
}

const response = (op: Operation, status: string): Response | undefined => {
  const r = op.responses[status];
  return r?.$ref ? doc.components.responses[r.$ref.replace('#/components/responses/', '')] : r;
};
const schemaOf = (schema: Schema | undefined): Schema | undefined =>
  schema?.$ref ? doc.components.schemas[decodeURIComponent(schema.$ref.replace('#/components/schemas/', ''))] : schema;
const headerParameters = (op: Operation) =>
  (op.parameters ?? []).filter((p) => p.in === 'header').map((p) => p.name.toLowerCase());

/** Every property of an answer's schema, with its path (`resources.[].key`). */
function properties(schema: Schema | undefined, path: string[] = [], out: [string, Schema][] = []): [string, Schema][] {
  const node = schemaOf(schema);
  if (node === undefined || path.length > 8) return out;
  for (const sub of node.anyOf ?? []) properties(sub, path, out);
  if (node.items) properties(node.items, [...path, '[]'], out);
  for (const [name, sub] of Object.entries(node.properties ?? {})) {
    out.push([[...path, name].join('.'), schemaOf(sub)!]);
    properties(sub, [...path, name], out);
  }
  return out;
}

describe('credentials shown once', () => {
  /** Fields a credential-like name or a "once" in their description would flag, that are not one. */
  const NOT_SHOWN_ONCE: [RegExp, string][] = [
    [/ \/v2\/(tags|deployments\/\{deployment_id\}\/tags).* (resources\.\[\]\.)?key$/, "a tag key's name"],
    [
      /^POST \/v2\/auth\/agents\/.+\/token access_token$/,
      'fetched afresh on every call by a deployed agent (no Idempotency-Key: it is not opened with an API key); its handler sends no-store',
    ],
    [/secret_references\.\[\]\.secret_key$/, 'the name of a key in a Kubernetes Secret, not its value'],
    [/^POST \/v2\/deployments\/\{deployment_id\}\/push-token token$/, 'never answered: the operation is always 400'],
  ];

  test('every answer field that holds a credential is declared shown once, and such answers say no-store', () => {
    const declared: string[] = [];
    for (const { route, op } of operations()) {
      for (const status of Object.keys(op.responses)) {
        if (!status.startsWith('2')) continue;
        const answer = response(op, status)!;
        const fields = properties(answer.content?.['application/json']?.schema);
        for (const [path, field] of fields) {
          const name = path.split('.').pop()!;
          const looksSecret =
            field.type === 'string' &&
            (/(^|_)(key|secret|credential|token|password)$/.test(name) ||
              /shown once|this once|returned once|shown only|only in this response/i.test(field.description ?? ''));
          const excused = NOT_SHOWN_ONCE.some(([pattern]) => pattern.test(`${route} ${path}`));
          if (field[SHOWN_ONCE] === true) {
            declared.push(`${route} ${path}`);
            assert.ok(answer.headers?.['Cache-Control'], `${route} ${status} documents Cache-Control`);
          } else {
            assert.ok(!looksSecret || excused, `${route} ${status} ${path} looks like a credential: ShownOnceString?`);
          }
        }
      }
    }
    for (const route of [
      'POST /v2/api-keys key',
      'POST /v2/listeners/{listener_id}/credentials credential',
      'POST /v2/deployments/{deployment_id}/agent-credentials credential',
      'POST /v1/integrations/forge/codehost webhook_secret',
      'PATCH /v1/integrations/forge/codehost/{integration_id} webhook_secret',
      'POST /v2/deployments/{deployment_id}/upload-url upload_url',
      'POST /v2/auth/authenticate url',
    ])
      assert.ok(declared.includes(route), `${route} is declared shown once`);
  });

  test('an answer holding a shown-once field is no-store, whether sent as an object or as text; others are not', async () => {
    const app = Fastify();
    app.addHook('onRoute', applyShownOnce);
    const schema = {
      response: {
        200: Type.Object({ id: Type.String(), secret: Type.Optional(ShownOnceString()) }),
        201: Type.Object({ id: Type.String(), secret: Type.Optional(ShownOnceString()) }),
      },
    };
    app.post<{ Querystring: { with?: string } }>('/object', { schema }, async (request) =>
      request.query.with ? { id: 'a', secret: 's3cret' } : { id: 'a' },
    );
    app.post('/text', { schema }, async (_request, reply) =>
      reply
        .code(201)
        .type('application/json')
        .send(JSON.stringify({ id: 'b', secret: 's3cret' })),
    );
    try {
      const withSecret = await app.inject({ method: 'POST', url: '/object?with=1' });
      assert.equal(withSecret.headers['cache-control'], 'no-store');
      const without = await app.inject({ method: 'POST', url: '/object' });
      assert.equal(without.headers['cache-control'], undefined);
      const text = await app.inject({ method: 'POST', url: '/text' });
      assert.equal(text.statusCode, 201);
      assert.equal(text.headers['cache-control'], 'no-store');
    } finally {
      await app.close();
    }
  });
});

describe('conditional and idempotent answers', () => {
  test('every operation that takes If-Match lists 412, and every 412 the server answers is listed', async () => {
    const unknownId = '00000000-0000-4000-8000-000000000000';
    const refused: string[] = [];
    for (const { route, method, url, op } of operations()) {
      const takesIfMatch = headerParameters(op).includes('if-match');
      if (takesIfMatch) assert.ok(response(op, '412'), `${route} takes If-Match: it lists 412`);
      if (method !== 'patch' && method !== 'delete') continue;
      const answer = await t.app.inject({
        method: method.toUpperCase() as 'PATCH',
        url: url.replace(/\{[^}]+\}/g, unknownId),
        headers: {
          'x-api-key': ADMIN_KEY,
          'if-match': '"not-the-etag"',
          ...(method === 'patch' ? { 'content-type': 'application/json' } : {}),
        },
        ...(method === 'patch' ? { payload: '{}' } : {}),
      });
      if (answer.statusCode !== 412) continue;
      refused.push(op.operationId!);
      assert.ok(response(op, '412'), `${route} answered 412 (${answer.body}): it lists 412`);
      assert.ok(takesIfMatch, `${route} answered 412: it documents If-Match`);
    }
    // Resources without an ETag refuse any If-Match but `*` (the ones with one answer 404 for an unknown id).
    for (const id of ['revokeApiKey', 'revokeListenerCredential', 'revokeAgentCredential', 'deleteTagKey'])
      assert.ok(refused.includes(id), `${id} answered 412: ${refused.join(', ')}`);
  });

  test('every operation lists 400 in the error envelope: the HTTP parser refuses requests before any route', () => {
    for (const { route, op } of operations()) {
      const refused = response(op, '400');
      assert.ok(refused, `${route} lists 400`);
      const schema = refused.content?.['application/json']?.schema;
      assert.equal(schema?.$ref, '#/components/schemas/ErrorBody', `${route} 400 documents the error envelope`);
    }
    assert.match(
      String(doc.components.responses.BadRequest?.content?.['application/json']?.schema?.$ref),
      /ErrorBody$/,
      'one shared response',
    );
  });

  test('every operation lists 503 with Retry-After', () => {
    for (const { route, op } of operations()) {
      const unavailable = response(op, '503');
      assert.ok(unavailable, `${route} lists 503`);
      assert.ok(unavailable.headers?.['Retry-After'], `${route} 503 documents Retry-After`);
    }
  });

  test('idempotent operations document Idempotent-Replayed on their successes and Retry-After on 409', () => {
    let idempotent = 0;
    for (const { route, op } of operations()) {
      if (!headerParameters(op).includes('idempotency-key')) continue;
      idempotent += 1;
      for (const status of Object.keys(op.responses).filter((s) => s.startsWith('2')))
        assert.ok(response(op, status)!.headers?.['Idempotent-Replayed'], `${route} ${status}: Idempotent-Replayed`);
      assert.ok(response(op, '409')?.headers?.['Retry-After'], `${route} 409: Retry-After`);
    }
    assert.ok(idempotent > 20, `${idempotent} idempotent operations`);
  });

  test('resource answers document their ETag', () => {
    for (const route of ['GET /v2/deployments/{deployment_id}', 'PATCH /v2/listeners/{listener_id}']) {
      const [method, url] = route.split(' ') as [string, string];
      const op = doc.paths[url]![method.toLowerCase()]!;
      assert.ok(response(op, '200')!.headers?.ETag, `${route} 200 documents ETag`);
      // Always sent, so generated clients may rely on it (the test callers check that it is there).
      assert.equal(response(op, '200')!.headers?.ETag?.required, true, `${route} 200: ETag is required`);
      assert.equal(response(op, '200')!.headers?.ETag?.schema?.type, 'string', `${route} 200: ETag is a string`);
    }
  });
});
