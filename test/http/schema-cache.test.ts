/**
 * src/http/schema-cache.ts: a schema is known by its content only when its JSON text says all of it,
 * and a serializer compiled once answers for every route whose schema reads the same, as each route's
 * own compiled one would.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import Fastify from 'fastify';
import { DeferredCompiles, schemaKey, serializerFactoryOnce } from '../../src/http/schema-cache.ts';
import { ADMIN_KEY, createTestApp } from '../support/harness.ts';

test('two schemas of one content have one key; one JSON cannot say exactly has none', () => {
  const a = { type: 'object', properties: { n: { type: 'integer', minimum: 0 } }, required: ['n'] };
  const b = JSON.parse(JSON.stringify(a)) as object;
  assert.notEqual(a, b);
  assert.equal(schemaKey(a), schemaKey(b));
  assert.notEqual(schemaKey(a), schemaKey({ ...a, required: [] }));
  // Symbol-keyed properties (TypeBox's Kind) are no compiler's: left out.
  assert.equal(schemaKey({ ...a, [Symbol('Kind')]: 'Object' }), schemaKey(a));
  for (const inexact of [
    { type: 'string', default: undefined },
    { type: 'array', items: [undefined] },
    { type: 'string', format: () => true },
    { type: 'string', pattern: /a/ },
    { type: 'string', default: new Date(0) },
    { type: 'number', maximum: Infinity },
    { type: 'object', toJSON: () => ({}) },
    undefined,
  ])
    assert.equal(schemaKey(inexact), null, String(JSON.stringify(inexact)));
});

test('routes whose response schemas read the same share one serializer, compiled when first needed, which serializes as before', async () => {
  const compiled: unknown[] = [];
  const deferred = new DeferredCompiles();
  const factory = serializerFactoryOnce(deferred);
  const app = Fastify({
    schemaController: {
      compilersFactory: {
        buildSerializer: (externalSchemas, options) => {
          const compile = factory(externalSchemas, options);
          return (route) =>
            compile({
              ...route,
              get schema() {
                compiled.push(route.schema);
                return route.schema;
              },
            });
        },
      },
    },
  });
  app.addSchema({ $id: 'Shared', type: 'object', properties: { id: { type: 'string' } } });
  const body = () => ({
    type: 'object',
    properties: { shared: { $ref: 'Shared#' }, count: { type: 'integer' } },
    additionalProperties: false,
  });
  const answer = { shared: { id: 'x', extra: 1 }, count: 2, hidden: 'not in the schema' };
  app.get('/a', { schema: { response: { 200: body() } } }, async () => answer);
  app.get('/b', { schema: { response: { 200: body() } } }, async () => answer);
  app.get('/c', { schema: { response: { 200: { type: 'object', properties: { count: { type: 'string' } } } } } }, () =>
    Promise.resolve(answer),
  );
  await app.ready();
  assert.equal(compiled.length, 0, 'nothing compiled before a response needs it');
  assert.deepEqual((await app.inject({ url: '/a' })).json(), { shared: { id: 'x' }, count: 2 });
  assert.deepEqual((await app.inject({ url: '/b' })).json(), { shared: { id: 'x' }, count: 2 });
  assert.deepEqual((await app.inject({ url: '/c' })).json(), { count: '2' });
  // Each GET route has a HEAD route too: their four compilations wait; of the six, two distinct schemas.
  assert.equal(deferred.all(), 3, 'the HEAD routes');
  assert.equal(deferred.all(), 0);
  await app.close();
});

test("every schema of the app's routes compiles: deferred to first use, none may fail there", async () => {
  const app = await createTestApp();
  try {
    await app.app.ready();
    const compiled = app.app.schemaCompiles.all();
    // Hundreds of routes, each with validators and the error envelopes' serializers.
    assert.ok(compiled > 500, `${compiled} compilations`);
    assert.equal(app.app.schemaCompiles.all(), 0);
    // Compiled functions answer as before.
    const response = await app.app.inject({ url: '/v2/deployments?limit=nope', headers: { 'x-api-key': ADMIN_KEY } });
    assert.equal(response.statusCode, 422, response.body);
  } finally {
    await app.close();
  }
});

test("a route's first request, the one that compiles its validator, is refused as every later one is", async () => {
  const app = await createTestApp();
  try {
    const headers = { 'x-api-key': ADMIN_KEY, 'content-type': 'application/json' };
    // Nothing of these routes has been compiled: each request below is its route's first.
    const first = await Promise.all([
      app.app.inject({ url: '/v2/deployments?limit=nope', headers }),
      app.app.inject({ method: 'POST', url: '/v2/deployments', headers, payload: { name: 7, source: 'nothing' } }),
      app.app.inject({ method: 'POST', url: '/v2/deployments', headers, payload: { name: 'a\u0000b' } }),
    ]);
    for (const response of first) assert.equal(response.statusCode, 422, response.body);
    assert.equal((await app.database.db.selectFrom('deployments').select('id').execute()).length, 0);
  } finally {
    await app.close();
  }
});
