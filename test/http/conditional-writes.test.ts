/**
 * If-Match on every resource that has one (docs/api.md, "Conditional requests"): OAuth providers, OAuth
 * tokens and code-host integrations, besides the deployments and listeners of
 * conditional-requests.test.ts. A stale ETag is 412 and changes nothing, the current one is done; each
 * write checks it in its own transaction (src/http/conditional-requests.ts).
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { authorizeInBrowser, type OidcServer } from '../fakes/oidc-server.ts';
import { client } from '../support/harness.ts';
import { createTokenIntegration, startCodehostFixture, type CodehostFixture } from '../codehost/codehost-fixture.ts';
import {
  openCallback,
  registerProvider,
  startAuthorization,
  startIdp,
  startOAuthTestApp,
  type OAuthTestApp,
} from '../oauth/oauth-test-app.ts';

let t: OAuthTestApp;
let idp: OidcServer;
let f: CodehostFixture;

before(async () => {
  [t, idp, f] = await Promise.all([startOAuthTestApp(), startIdp(), startCodehostFixture()]);
});
after(async () => {
  await Promise.all([t.close(), idp.close(), f.close()]);
});

const etagOf = (res: { headers: Record<string, unknown> }) => String(res.headers.etag);

test('OAuth providers: a stale If-Match is 412 on PATCH and DELETE; the current one is done', async () => {
  const org = client(t.app, t.orgKey);
  const created = await registerProvider(org, idp, 'confidential', 'basic-idp');
  const url = `/v2/auth/providers/${created.provider_id}`;
  const stale = etagOf(await org.get(url));
  const renamed = await org.patch(url, { name: 'Renamed' });
  assert.equal(renamed.status, 200);
  const refused = await org.patch(url, { name: 'Lost update' }, { 'if-match': stale });
  assert.equal(refused.status, 412);
  assert.equal(refused.body.code, 'precondition_failed');
  assert.equal((await org.get(url)).body.name, 'Renamed', 'nothing changed');
  assert.equal((await org.delete(url, { 'if-match': stale })).status, 412);
  const current = etagOf(await org.get(url));
  assert.equal(current, etagOf(renamed), "the PATCH's ETag is the one a GET gives");
  const patched = await org.patch(url, { name: 'Checked' }, { 'if-match': current });
  assert.equal(patched.status, 200);
  assert.equal((await org.delete(url, { 'if-match': etagOf(patched) })).status, 204);
});

test('OAuth tokens: a DELETE with a stale If-Match is 412 and the token is not revoked at the provider', async () => {
  const api = client(t.app);
  await registerProvider(client(t.app, t.orgKey), idp, 'confidential', 'acme-idp');
  const pending = await startAuthorization(api, { provider_id: 'acme-idp', scopes: ['openid'], agent_id: 'bot' });
  assert.equal((await openCallback(t.app, await authorizeInBrowser(pending.url, { login: 'alice' }))).status, 200);
  const waited = await api.get(`/v2/auth/wait/${pending.auth_id}?timeout=5`);
  assert.equal(waited.body.status, 'completed', JSON.stringify(waited.body));
  const url = `/v2/auth/tokens/${waited.body.token_id}`;
  const refused = await api.delete(url, { 'if-match': '"stale"' });
  assert.equal(refused.status, 412);
  assert.equal(refused.body.code, 'precondition_failed');
  assert.equal((await api.get(url)).status, 200, 'the token stays');
  assert.equal((await api.delete(url, { 'if-match': etagOf(await api.get(url)) })).status, 204);
  assert.equal((await api.get(url)).status, 404);
});

test('code-host integrations: a stale If-Match is 412 on PATCH and DELETE; the current one is done', async () => {
  const created = await createTokenIntegration(f, 'guarded-host');
  const url = `/v1/integrations/forge/codehost/${created.id}`;
  const stale = etagOf(await f.api.get(url));
  assert.equal((await f.api.patch(url, { name: 'renamed-host' })).status, 200);
  const refused = await f.api.patch(url, { name: 'lost-update' }, { 'if-match': stale });
  assert.equal(refused.status, 412);
  assert.equal(refused.body.code, 'precondition_failed');
  assert.equal((await f.api.get(url)).body.name, 'renamed-host', 'nothing changed');
  assert.equal((await f.api.patch(url, {}, { 'if-match': stale })).status, 412, 'a PATCH that changes nothing too');
  assert.equal((await f.api.delete(url, { 'if-match': stale })).status, 412);
  const current = etagOf(await f.api.get(url));
  assert.equal((await f.api.patch(url, {}, { 'if-match': current })).status, 200);
  assert.equal((await f.api.delete(url, { 'if-match': current })).status, 204);
  assert.equal((await f.api.get(url)).status, 404);
});
