/**
 * The check that every answer the tests receive is what /openapi.json says (test/support/
 * openapi-conformance.ts, docs/api.md): it fails the request's test on an undocumented status, a body
 * field against its schema (naming the operation and the field's path), a write-only field in an answer,
 * a required header that is missing, and a request no operation takes that is not a 404 or a 405 with
 * Allow; it leaves alone what the document does not describe.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import swagger from '@fastify/swagger';
import Fastify, { type FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { registerErrorHandler } from '../../src/http/error-handler.ts';
import { shapeDocument } from '../../src/http/openapi.ts';
import { ErrorBody, SecretString } from '../../src/http/schema-helpers.ts';
import { client } from '../support/harness.ts';
import { OpenApiConformance, type ObservedAnswer } from '../support/openapi-conformance.ts';

const Thing = Type.Object({ id: Type.String(), size: Type.Integer() }, { title: 'Thing' });
const ETag = { type: 'string', required: true, description: 'Always sent.' };

/** What GET /v2/things/:id answers, by its id. */
const ANSWERS: Record<string, { status: number; body?: unknown; etag?: boolean }> = {
  good: { status: 200, body: { id: 'good', size: 1 }, etag: true },
  'wrong-type': { status: 200, body: { id: 'wrong-type', size: 'big' }, etag: true },
  'no-etag': { status: 200, body: { id: 'no-etag', size: 1 } },
  teapot: { status: 418, body: { detail: 'short and stout', code: 'invalid_request' } },
  missing: { status: 404, body: { detail: 'No such thing.', code: 'not_found' } },
};

let app: FastifyInstance;

before(async () => {
  app = Fastify();
  registerErrorHandler(app);
  app.addSchema(ErrorBody);
  await app.register(swagger, {
    openapi: { openapi: '3.1.0', info: { title: 'things', version: '1' } },
    // As src/app.ts names them: shared schemas under their $id.
    refResolver: {
      buildLocalReference: (json, _baseUri, _fragment, i) => (typeof json.$id === 'string' ? json.$id : `def-${i}`),
    },
    transformObject: (document) =>
      'openapiObject' in document ? shapeDocument(document.openapiObject) : document.swaggerObject,
  });
  app.get<{ Params: { id: string } }>(
    '/v2/things/:id',
    {
      schema: {
        operationId: 'getThing',
        params: Type.Object({ id: Type.String() }),
        response: { 200: { ...Thing, headers: { ETag } }, 404: Type.Ref('ErrorBody') },
      },
    },
    async (request, reply) => {
      const answer = ANSWERS[request.params.id]!;
      if (answer.etag) reply.header('etag', '"1"');
      // Sent as text: the answer goes out as it is, not through the response schema's serializer.
      return reply.code(answer.status).type('application/json').send(JSON.stringify(answer.body));
    },
  );
  app.post(
    '/v2/things',
    {
      schema: {
        operationId: 'createThing',
        body: Type.Object({ token: SecretString() }),
        response: { 201: Type.Object({ id: Type.String(), token: SecretString() }) },
      },
    },
    async (_request, reply) => reply.code(201).send({ id: 'new', token: 's3cret' }),
  );
  app.get('/page', async (_request, reply) => reply.type('text/html').send('<p>not the API</p>'));
  await app.ready();
});
after(() => app.close());

describe('the test caller', () => {
  test('passes an answer the document describes', async () => {
    const res = await client(app).get('/v2/things/good');
    assert.equal(res.status, 200);
    const missing = await client(app).get('/v2/things/missing');
    assert.equal(missing.status, 404);
  });

  test('fails on a status the operation does not document', async () => {
    await assert.rejects(client(app).get('/v2/things/teapot'), /GET \/v2\/things\/\{id\} \(getThing\) answered 418/);
  });

  test('fails on a body field against its schema, naming the operation and the field', async () => {
    await assert.rejects(
      client(app).get('/v2/things/wrong-type'),
      /\(getThing\) 200: \/size must be integer, got "big"/,
    );
  });

  test('fails on a write-only field in an answer', async () => {
    await assert.rejects(client(app).post('/v2/things', { token: 'x' }), /\(createThing\) 201: \/token is write-only/);
  });

  test('fails when a required header is missing', async () => {
    await assert.rejects(client(app).get('/v2/things/no-etag'), /\(getThing\) 200: no ETag header/);
  });

  test('takes 404 and 405 for requests no operation takes, and skips what is not the API', async () => {
    const unknown = await client(app).get('/v2/nothing');
    assert.equal(unknown.status, 404);
    const wrongMethod = await client(app).delete('/v2/things/good');
    assert.equal(wrongMethod.status, 405);
    assert.equal(wrongMethod.headers.allow, 'GET, HEAD');
    assert.equal((await app.inject({ method: 'GET', url: '/page' })).statusCode, 200);
  });
});

describe('OpenApiConformance', () => {
  const conformance = new OpenApiConformance({
    paths: {
      '/v2/things/{id}': {
        get: {
          operationId: 'getThing',
          responses: {
            '200': { content: { 'application/json': { schema: { $ref: '#/components/schemas/Thing' } } } },
            '204': { description: 'nothing' },
          },
        },
      },
      '/v2/things/special': {
        post: { operationId: 'special', responses: { '200': { description: 'no body' } } },
      },
    },
    components: {
      schemas: {
        Thing: { type: 'object', required: ['id'], properties: { id: { type: 'string' } } },
        ErrorBody: { type: 'object', required: ['detail'], properties: { detail: { type: 'string' } } },
      },
    },
  });
  const answer = (fields: Partial<ObservedAnswer> & { headers?: Record<string, string> }): ObservedAnswer => ({
    method: 'GET',
    url: '/v2/things/a',
    status: 200,
    body: '{"id":"a"}',
    header: (name) => (fields.headers ?? { 'content-type': 'application/json' })[name],
    ...fields,
  });

  test('resolves references into the components and prefers a literal segment to a parameter', () => {
    assert.deepEqual(conformance.problems(answer({})), []);
    assert.match(
      conformance.problems(answer({ body: '{}' })).join(),
      /\(getThing\) 200: \(the body\) must have required property 'id'/,
    );
    // POST /v2/things/special is its own operation, not a POST on /v2/things/{id}.
    assert.deepEqual(conformance.problems(answer({ method: 'POST', url: '/v2/things/special', body: '' })), []);
  });

  test('a HEAD is its GET without a body; a 204 has none', () => {
    assert.deepEqual(conformance.problems(answer({ method: 'HEAD', body: '' })), []);
    assert.match(conformance.problems(answer({ status: 204 })).join(), /a body, where the document has none/);
  });

  test('a body of an undocumented media type is a mismatch', () => {
    assert.match(
      conformance.problems(answer({ headers: { 'content-type': 'text/plain' }, body: 'a' })).join(),
      /a text\/plain body, documented: application\/json/,
    );
  });

  test('a wrong method on a documented path must be 405 with Allow; an unknown path 404', () => {
    const notAllowed = '{"detail":"no","code":"method_not_allowed"}';
    assert.deepEqual(
      conformance.problems(
        answer({
          method: 'TRACE',
          status: 405,
          body: notAllowed,
          headers: { allow: 'GET, HEAD', 'content-type': 'application/json' },
        }),
      ),
      [],
    );
    assert.match(
      conformance
        .problems(answer({ method: 'TRACE', status: 404, body: '{"detail":"no","code":"route_not_found"}' }))
        .join(),
      /answered 404 route_not_found, not 405 method_not_allowed/,
    );
    assert.match(
      conformance.problems(answer({ method: 'TRACE', status: 405, body: notAllowed, headers: {} })).join(),
      /Allow \(\) lacks GET/,
    );
    assert.deepEqual(
      conformance.problems(
        answer({ url: '/v2/nothing', status: 404, body: '{"detail":"no","code":"route_not_found"}' }),
      ),
      [],
    );
  });

  test('leaves alone the dashboard, the docs and deployed apps', () => {
    const page = { status: 200, body: '<html>', headers: { 'content-type': 'text/html' } };
    for (const url of ['/', '/deployments/abc', '/docs', '/openapi.json', '/apps/my-app-0001/v2/things/a'])
      assert.deepEqual(conformance.problems(answer({ url, ...page })), [], url);
    assert.deepEqual(conformance.problems(answer({ host: 'my-app-0001.apps.example.com', ...page })), []);
    assert.match(conformance.problems(answer({ host: 'localhost:80', ...page })).join(), /text\/html body/);
  });
});
