/**
 * The OpenAPI document tells clients about the sign-in cookie as it is: a security scheme named as the
 * service names the cookie, offered on every operation that takes an API key, and that cookie really
 * opens those operations (a workspace one, an organization admin one, a write from the dashboard).
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { sessionCookieScheme } from '../../src/sso/session-cookie.ts';
import { client } from '../support/harness.ts';
import { asPerson, createSsoTestApp, signIn, type SsoTestApp } from './sso-harness.ts';

interface Operation {
  security?: Record<string, string[]>[];
}
interface Document {
  info: { description: string };
  security: Record<string, string[]>[];
  components: { securitySchemes: Record<string, { type: string; in?: string; name?: string }> };
  paths: Record<string, Record<string, Operation>>;
}

let t: SsoTestApp;
let doc: Document;

before(async () => {
  t = await createSsoTestApp();
  const mapped = await client(t.app, t.orgKey).post('/v2/sso/mappings', {
    kind: 'group',
    value: 'slipway-admins',
    workspace_id: null,
    role: 'admin',
  });
  assert.equal(mapped.status, 201, JSON.stringify(mapped.body));
  doc = (await t.app.inject({ method: 'GET', url: '/openapi.json' })).json();
});
after(() => t?.close());

test('the session cookie is a security scheme of every operation that takes an API key', () => {
  const schemes = Object.entries(doc.components.securitySchemes).filter(([, s]) => s.in === 'cookie');
  assert.equal(schemes.length, 1);
  const [name, scheme] = schemes[0]!;
  assert.deepEqual({ type: scheme.type, name: scheme.name }, { type: 'apiKey', name: 'slipway_session' });
  assert.ok(doc.security.some((requirement) => name in requirement));
  assert.ok(doc.security.some((requirement) => 'apiKey' in requirement));
  // Every operation is public (security: []) or takes the document's schemes, but for the listener
  // protocol's (the listener credential as a bearer token, or an admin key), the agents' token route
  // and the check of a protocol credential (both an agent credential), which name their own.
  for (const [path, item] of Object.entries(doc.paths))
    for (const [method, op] of Object.entries(item))
      if (op.security !== undefined && op.security.length > 0)
        assert.match(
          `${method} ${path}`,
          /^(\w+ \/v2\/listeners\/\{listener_id\}\/|post \/v2\/auth\/agents\/\{agent_id\}\/connections\/\{connection_id\}\/token$|post \/v2\/auth\/protocol-credentials\/verify$)/,
          `${method} ${path} names its own schemes`,
        );
  assert.match(doc.info.description, /session cookie/);
  assert.equal(sessionCookieScheme('https://slipway.example.com').name, '__Host-slipway_session');
});

test('the cookie the sign-in sets opens what the document says it opens', async () => {
  t.provider.accounts.set('olga', { groups: ['slipway-admins'] });
  const done = await signIn(t, 'olga');
  assert.equal(done.status, 200, done.page);
  assert.match(done.sessionLine ?? '', /^slipway_session=/, 'named as the document names it');
  const session = done.session!;
  assert.equal((await asPerson(t, session, 'GET', '/v2/deployments')).status, 200, 'a workspace operation');
  assert.equal((await asPerson(t, session, 'GET', '/v2/sso/mappings')).status, 200, 'an organization admin one');
  const made = await asPerson(t, session, 'POST', '/v2/deployments', {
    body: { name: 'olgas-agent', source: 'internal_source' },
  });
  assert.equal(made.status, 201, 'a write from the dashboard');
  const anonymous = await t.app.inject({ method: 'GET', url: '/v2/deployments' });
  assert.equal(anonymous.statusCode, 401, 'and without it (or a key) nothing');
});

test("the cookie does not open the listener protocol (machines' endpoints, whose desired state holds secrets in clear)", async () => {
  t.provider.accounts.set('lena', { groups: ['slipway-admins'] });
  const done = await signIn(t, 'lena');
  assert.equal(done.status, 200, done.page);
  const listener = await client(t.app, t.orgKey, t.workspaceId).post('/v2/listeners', {
    compute_type: 'k8s',
    compute_id: `cookie-test-${Date.now()}`,
  });
  assert.equal(listener.status, 201, JSON.stringify(listener.body));
  const asAdminKey = await client(t.app, t.orgKey, t.workspaceId).get(
    `/v2/listeners/${listener.body.id}/desired-state`,
  );
  assert.equal(asAdminKey.status, 200, 'an admin key still reads it');
  const asCookie = await asPerson(t, done.session!, 'GET', `/v2/listeners/${listener.body.id}/desired-state`);
  assert.equal(asCookie.status, 401, 'a browser session does not');
});
