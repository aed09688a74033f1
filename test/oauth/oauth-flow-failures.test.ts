import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { AUTHORIZATION_TTL_SECONDS } from '../../src/service/oauth-flow.ts';
import { authorizeInBrowser, unreachableUrl, type OidcServer } from '../fakes/oidc-server.ts';
import { client } from '../support/harness.ts';
import {
  assertNoSecrets,
  authorize,
  openCallback,
  otherOrganization,
  registerProvider,
  sleep,
  startAuthorization,
  startIdp,
  startOAuthTestApp,
  type Api,
  type OAuthTestApp,
} from './oauth-test-app.ts';

let t: OAuthTestApp;
let idp: OidcServer;
let api: Api;
/** Authorization codes seen in callback URLs: none may reach a log. */
const codes: string[] = [];

before(async () => {
  [t, idp] = await Promise.all([startOAuthTestApp(), startIdp()]);
  api = client(t.app);
  await registerProvider(client(t.app, t.orgKey), idp, 'confidential', 'acme-idp');
  await registerProvider(client(t.app, t.orgKey), idp, 'public', 'public-idp');
  await registerProvider(client(t.app, t.orgKey), idp, 'public', 'down-idp', { token_url: await unreachableUrl() });
});
after(async () => {
  await t.close();
  await idp.close();
});

const tokenCount = async () =>
  Number(
    (
      await t.database.db
        .selectFrom('oauth_tokens')
        .select((eb) => eb.fn.countAll<string>().as('n'))
        .executeTakeFirstOrThrow()
    ).n,
  );

/** Authenticate and go through the provider, without landing on the callback yet. */
async function untilCallback(provider: string, consent: 'approve' | 'deny' = 'approve') {
  const pending = await startAuthorization(api, { provider_id: provider });
  const callbackUrl = new URL(await authorizeInBrowser(pending.url, { consent }));
  const code = callbackUrl.searchParams.get('code');
  if (code) codes.push(code);
  return { authId: pending.auth_id, callbackUrl };
}

async function assertFailedFlow(authId: string, reason: string, message: RegExp) {
  const res = await api.get(`/v2/auth/wait/${authId}?timeout=0`);
  assert.equal(res.status, 200);
  assert.equal(res.body.status, 'failed');
  assert.equal(res.body.token_id, null);
  assert.equal(res.body.error.reason, reason);
  assert.match(res.body.error.message, message);
}

test('a state that belongs to no flow is refused and consumes nothing; the genuine callback then works once', async () => {
  const { authId, callbackUrl } = await untilCallback('acme-idp');
  const before = await tokenCount();
  const requests = idp.tokenRequestCount();

  const forged = new URL(callbackUrl);
  forged.searchParams.set('state', 'someone-elses-state');
  const missing = new URL(callbackUrl);
  missing.searchParams.delete('state');
  const doubled = new URL(callbackUrl);
  doubled.searchParams.append('state', 'second');
  const otherProvider = new URL(callbackUrl.href.replace('/callback/acme-idp', '/callback/public-idp'));
  for (const url of [forged, missing, doubled, otherProvider]) {
    const page = await openCallback(t.app, url.href);
    assert.equal(page.status, 400, url.href);
    assert.match(page.html, /Authorization failed/);
    assert.match(page.html, /state/);
    assert.match(page.html, /Nothing was stored\./);
  }
  assert.equal(await tokenCount(), before);
  assert.equal(idp.tokenRequestCount(), requests, 'no code exchange for a foreign state');
  assert.equal((await api.get(`/v2/auth/wait/${authId}?timeout=0`)).body.status, 'pending');

  assert.equal((await openCallback(t.app, callbackUrl.href)).status, 200);
  assert.equal(await tokenCount(), before + 1);

  // Replayed: the state worked once; the same callback again stores nothing more.
  const replay = await openCallback(t.app, callbackUrl.href);
  assert.equal(replay.status, 400);
  assert.match(replay.html, /already used/);
  assert.equal(await tokenCount(), before + 1);
  assert.equal((await api.get(`/v2/auth/wait/${authId}?timeout=0`)).body.status, 'completed');
});

test('an expired state is refused without a code exchange', async () => {
  const { authId, callbackUrl } = await untilCallback('acme-idp');
  // The time to sign in at the provider, and a second more.
  t.clock.advance((AUTHORIZATION_TTL_SECONDS + 1) * 1000);
  const before = await tokenCount();
  const requests = idp.tokenRequestCount();
  const page = await openCallback(t.app, callbackUrl.href);
  assert.equal(page.status, 400);
  assert.match(page.html, /expired/);
  assert.equal(idp.tokenRequestCount(), requests);
  assert.equal(await tokenCount(), before);
  await assertFailedFlow(authId, 'expired', /expired/);
  const flow = await t.database.db
    .selectFrom('oauth_authorizations')
    .select(['status', 'code_verifier_encrypted'])
    .where('id', '=', authId)
    .executeTakeFirstOrThrow();
  assert.deepEqual(flow, { status: 'failed', code_verifier_encrypted: null });
});

test('a wrong PKCE verifier is rejected by the provider and ends the flow', async () => {
  const { authId, callbackUrl } = await untilCallback('public-idp');
  const wrong = 'x'.repeat(43);
  await t.database.db
    .updateTable('oauth_authorizations')
    .set({ code_verifier_encrypted: t.secretBox.seal(wrong) })
    .where('id', '=', authId)
    .execute();
  const before = await tokenCount();
  const page = await openCallback(t.app, callbackUrl.href);
  assert.equal(page.status, 400);
  assert.match(page.html, /invalid_grant/);
  assert.ok(!page.html.includes(wrong) && !page.html.includes(callbackUrl.searchParams.get('code')!));
  assert.equal(await tokenCount(), before);
  await assertFailedFlow(authId, 'invalid_grant', /invalid_grant/);
});

test('denied consent ends the flow with the provider error and no token request', async () => {
  const { authId, callbackUrl } = await untilCallback('public-idp', 'deny');
  assert.equal(callbackUrl.searchParams.get('error'), 'access_denied');
  const requests = idp.tokenRequestCount();
  const page = await openCallback(t.app, callbackUrl.href);
  assert.equal(page.status, 400);
  assert.match(page.html, /access_denied/);
  assert.equal(idp.tokenRequestCount(), requests);
  await assertFailedFlow(authId, 'provider_error', /access_denied/);
  // The state was used up by the denial.
  assert.equal((await openCallback(t.app, callbackUrl.href)).status, 400);
});

test('an unreachable or failing token endpoint ends the flow with a clear message', async () => {
  const before = await tokenCount();
  const down = await untilCallback('down-idp');
  const page = await openCallback(t.app, down.callbackUrl.href);
  assert.equal(page.status, 503);
  assert.match(page.html, /could not be reached/);
  await assertFailedFlow(down.authId, 'unreachable', /could not be reached/);

  const broken = await untilCallback('acme-idp');
  idp.failTokenEndpoint('http_500');
  try {
    const failed = await openCallback(t.app, broken.callbackUrl.href);
    assert.equal(failed.status, 502);
    assert.match(failed.html, /HTTP 500/);
  } finally {
    idp.failTokenEndpoint(null);
  }
  await assertFailedFlow(broken.authId, 'provider_error', /HTTP 500/);
  assert.equal(await tokenCount(), before);
});

test('wait: bounded timeout, 404 for unknown or foreign flows, 422 out of range', async () => {
  const pending = await startAuthorization(api, { provider_id: 'acme-idp' });
  const started = Date.now();
  const timedOut = await api.get(`/v2/auth/wait/${pending.auth_id}?timeout=1`);
  assert.equal(timedOut.body.status, 'pending');
  assert.ok(Date.now() - started >= 900, 'it waited');
  assert.equal((await api.get(`/v2/auth/wait/${pending.auth_id}?timeout=61`)).status, 422);
  assert.equal((await api.get('/v2/auth/wait/not-a-uuid')).status, 422);
  const unknown = await api.get('/v2/auth/wait/6f1c2d3e-0000-4000-8000-000000000000?timeout=0');
  assert.equal(unknown.status, 404);
  assert.equal(unknown.body.detail, 'Authorization ID 6f1c2d3e-0000-4000-8000-000000000000 not found.');

  const other = client(t.app, (await otherOrganization(t)).key);
  assert.equal((await other.get(`/v2/auth/wait/${pending.auth_id}?timeout=0`)).status, 404);
  const unknownProvider = await api.post('/v2/auth/authenticate', { provider_id: 'no-such-idp' });
  assert.equal(unknownProvider.status, 404);
  assert.equal(unknownProvider.body.detail, 'OAuth provider ID no-such-idp not found.');
  assert.equal((await other.post('/v2/auth/authenticate', { provider_id: 'acme-idp' })).status, 404);
});

test('a long poll ends promptly when the server closes', async () => {
  const own = await startOAuthTestApp();
  const ownApi = client(own.app);
  let closed = false;
  try {
    await registerProvider(client(own.app, own.orgKey), idp, 'public', 'public-idp');
    const pending = await startAuthorization(ownApi, { provider_id: 'public-idp' });
    const waiting = ownApi.get(`/v2/auth/wait/${pending.auth_id}?timeout=60`);
    await sleep(300);
    const started = Date.now();
    await own.app.close();
    closed = true;
    const res = await waiting;
    assert.ok(Date.now() - started < 3000, `close took ${Date.now() - started} ms`);
    assert.equal(res.status, 200);
    assert.equal(res.body.status, 'pending');
  } finally {
    if (!closed) await own.app.close();
    await own.database.drop();
  }
});

test('no authorization code or client secret reached a log', async () => {
  await authorize(t, api, { provider_id: 'acme-idp' });
  assert.ok(codes.length >= 5);
  assertNoSecrets('the log', t.logs.join('\n'), [...codes, idp.clients.confidential.client_secret]);
});
