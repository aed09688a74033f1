/**
 * What a route needs is declared with it (src/http/route-needs.ts): a documented route that declares
 * nothing, or declares something it cannot have, stops the service from starting rather than getting
 * behaviour by a rule from a distance.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import Fastify from 'fastify';
import { Type } from 'typebox';
import { needs, registerRouteNeeds } from '../../src/http/route-needs.ts';
import type { Db } from '../../src/store/schema.ts';

/** An app with the route-needs wiring and one route; resolves to the start's error, if any. */
async function startWith(add: (app: ReturnType<typeof Fastify>) => void): Promise<Error | null> {
  const app = Fastify();
  // No request reaches the database here: only the wiring at start is under test.
  registerRouteNeeds(app, {} as Db, { forgetKeys: (_request, _reply, payload, done) => done(null, payload) });
  try {
    add(app);
    await app.ready();
    return null;
  } catch (error) {
    return error as Error;
  } finally {
    await app.close();
  }
}

const One = Type.Object({ id: Type.String() });

test('a documented route without needs({...}) does not start; a hidden one and a declared one do', async () => {
  const undeclared = await startWith((app) =>
    app.get('/v2/things/:id', { schema: { response: { 200: One } } }, () => ({ id: 'a' })),
  );
  assert.match(String(undeclared), /GET \/v2\/things\/:id: declare what the route needs/);
  // No path is exempt: the single sign-on routes once were, and got behaviour inferred from a distance.
  const undeclaredSso = await startWith((app) =>
    app.post('/v2/sso/mappings', { config: { auth: 'organization' } }, () => ({})),
  );
  assert.match(String(undeclaredSso), /POST \/v2\/sso\/mappings: declare what the route needs/);
  assert.equal(await startWith((app) => app.get('/page', { schema: { hide: true } }, () => 'x')), null);
  assert.equal(
    await startWith((app) =>
      app.get(
        '/v2/things/:id',
        { config: needs({ auth: 'workspace', etag: true }), schema: { response: { 200: One } } },
        () => ({ id: 'a' }),
      ),
    ),
    null,
  );
});

test('a declaration the route cannot have does not start', async () => {
  const getIdempotent = await startWith((app) =>
    app.get('/v2/things', { config: needs({ auth: 'workspace', idempotent: true }) }, () => ({})),
  );
  assert.match(String(getIdempotent), /idempotent is for a POST or PATCH/);
  const etagOfList = await startWith((app) =>
    app.get(
      '/v2/things',
      { config: needs({ auth: 'workspace', etag: true }), schema: { response: { 200: Type.Array(One) } } },
      () => [],
    ),
  );
  assert.match(String(etagOfList), /etag needs a 200 or 201 answer of one resource/);
  const ifMatchWithoutGet = await startWith((app) =>
    app.delete('/v2/things/:id', { config: needs({ auth: 'workspace', ifMatch: async () => ({}) }) }, () => null),
  );
  assert.match(String(ifMatchWithoutGet), /ifMatch needs the resource's GET/);
  const starBesideGet = await startWith((app) => {
    app.get(
      '/v2/things/:id',
      { config: needs({ auth: 'workspace', etag: true }), schema: { response: { 200: One } } },
      () => ({ id: 'a' }),
    );
    app.delete('/v2/things/:id', { config: needs({ auth: 'workspace', ifMatch: 'only-star' }) }, () => null);
  });
  assert.match(String(starBesideGet), /declare ifMatch with the resource/);
});
