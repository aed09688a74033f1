// The OAuth client against a real provider on loopback (test/fakes/oidc-server.ts): the whole
// authorization-code flow over HTTP, and each way it can fail (docs/oauth.md).

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { OAuthClient, type OAuthProviderConfig, type OAuthTokenSet } from '../../src/oauth/oauth-client.ts';
import { OAuthFlowError, type OAuthFlowErrorReason } from '../../src/oauth/oauth-flow-error.ts';
import {
  authorizeInBrowser,
  startOidcServer,
  unreachableUrl,
  type OidcServer,
  type TestClientKind,
} from '../fakes/oidc-server.ts';

const REDIRECT_URI = 'http://slipway.test/v2/auth/callback/test-idp';

let idp: OidcServer;
const client = new OAuthClient({ allowInsecure: true });

before(async () => {
  idp = await startOidcServer({ redirectUris: [REDIRECT_URI], extraScopes: ['repo:read'] });
});

after(async () => {
  await idp.close();
});

function providerFor(kind: TestClientKind, overrides: Partial<OAuthProviderConfig> = {}): OAuthProviderConfig {
  return { ...idp.providerConfig(kind), ...overrides };
}

/** Sends a person through the provider and returns the pending flow and the callback URL they land on. */
async function authorize(provider: OAuthProviderConfig, consent: 'approve' | 'deny' = 'approve') {
  const pending = await client.createAuthorizationRequest(provider, { redirectUri: REDIRECT_URI });
  const callbackUrl = new URL(await authorizeInBrowser(pending.url, { login: 'alice', consent }));
  return { pending, callbackUrl };
}

async function signIn(provider: OAuthProviderConfig): Promise<OAuthTokenSet> {
  const { pending, callbackUrl } = await authorize(provider);
  return client.exchangeCode(provider, pending, callbackUrl);
}

/** Asserts the promise fails with an OAuthFlowError of that reason, whose message leaks none of `secrets`. */
async function assertFlowError(
  promise: Promise<unknown>,
  reason: OAuthFlowErrorReason,
  secrets: ReadonlyArray<string | null | undefined> = [],
): Promise<OAuthFlowError> {
  const err = await promise.then(
    () => assert.fail(`expected an OAuthFlowError (${reason})`),
    (e: unknown) => e,
  );
  assert.ok(err instanceof OAuthFlowError, `expected OAuthFlowError, got ${String(err)}`);
  assert.equal(err.reason, reason, err.message);
  for (const secret of secrets) {
    if (secret) assert.ok(!err.message.includes(secret), `the message leaks a secret: ${err.message}`);
  }
  return err;
}

test('the authorization URL carries state always and an S256 challenge of the verifier when PKCE is used', async () => {
  const provider = providerFor('public');
  const pending = await client.createAuthorizationRequest(provider, {
    redirectUri: REDIRECT_URI,
    scopes: ['openid', 'repo:read'],
  });
  const url = new URL(pending.url);

  assert.equal(url.origin + url.pathname, idp.endpoints.authorization);
  assert.equal(url.searchParams.get('response_type'), 'code');
  assert.equal(url.searchParams.get('client_id'), provider.client_id);
  assert.equal(url.searchParams.get('redirect_uri'), REDIRECT_URI);
  assert.equal(url.searchParams.get('scope'), 'openid repo:read');
  assert.equal(url.searchParams.get('state'), pending.state);
  assert.ok(pending.state.length >= 32);
  assert.ok(pending.codeVerifier);
  assert.equal(url.searchParams.get('code_challenge_method'), 'S256');
  const expectedChallenge = createHash('sha256').update(pending.codeVerifier).digest('base64url');
  assert.equal(url.searchParams.get('code_challenge'), expectedChallenge);
  assert.ok(!pending.url.includes(pending.codeVerifier), 'the verifier itself never leaves the service');

  const again = await client.createAuthorizationRequest(provider, { redirectUri: REDIRECT_URI });
  assert.notEqual(again.state, pending.state, 'every flow has its own state');

  const withoutPkce = await client.createAuthorizationRequest(providerFor('confidential', { uses_pkce: false }), {
    redirectUri: REDIRECT_URI,
  });
  assert.equal(withoutPkce.codeVerifier, null);
  assert.equal(new URL(withoutPkce.url).searchParams.get('code_challenge'), null);
  assert.ok(new URL(withoutPkce.url).searchParams.get('state'));

  // A public client has no secret to bind the code to it: without PKCE a stolen code is a token (RFC 9700).
  await assert.rejects(
    client.createAuthorizationRequest(providerFor('public', { uses_pkce: false }), { redirectUri: REDIRECT_URI }),
    (err: unknown) =>
      err instanceof OAuthFlowError && err.reason === 'configuration' && /must use PKCE/.test(err.message),
  );
});

test('a person authorizes a public client with PKCE and the tokens work at the provider', async () => {
  const provider = providerFor('public');
  const tokens = await signIn(provider);

  assert.equal(tokens.tokenType, 'bearer');
  assert.ok(tokens.refreshToken, 'a refresh token is issued');
  assert.ok(tokens.expiresAt instanceof Date && tokens.expiresAt.getTime() > Date.now());
  for (const scope of ['openid', 'email', 'profile']) assert.ok(tokens.scopes.includes(scope), scope);
  assert.equal(tokens.idTokenClaims?.sub, 'alice');
  assert.equal(tokens.idTokenClaims?.email, 'alice@example.test');
  assert.equal(tokens.issuer, idp.issuer);

  const me = await idp.userinfo(tokens.accessToken);
  assert.equal(me.status, 200);
  assert.equal(me.body?.sub, 'alice');
});

const AUTH_METHOD_OF = { confidential: 'client_secret_post', confidentialBasic: 'client_secret_basic' } as const;

for (const kind of ['confidential', 'confidentialBasic'] as const) {
  test(`a confidential client authenticating with ${AUTH_METHOD_OF[kind]} exchanges the code`, async () => {
    const provider = providerFor(kind);
    const tokens = await signIn(provider);
    assert.equal((await idp.userinfo(tokens.accessToken)).status, 200);
    assert.equal((await idp.introspect(tokens.accessToken)).active, true);
  });
}

test('a confidential client with the wrong secret is refused by the provider, and the secret is not echoed', async () => {
  const provider = providerFor('confidentialBasic', { client_secret: 'definitely-not-the-secret' });
  const { pending, callbackUrl } = await authorize(provider);
  const err = await assertFlowError(client.exchangeCode(provider, pending, callbackUrl), 'provider_error', [
    'definitely-not-the-secret',
    callbackUrl.searchParams.get('code'),
  ]);
  assert.equal(err.oauthError, 'invalid_client');
});

test('the access token is refreshed after it expired, and the new one works', async () => {
  idp.setAccessTokenTtl(1);
  try {
    const provider = providerFor('confidential');
    const tokens = await signIn(provider);
    assert.ok(tokens.refreshToken);

    // Wait for the provider itself to refuse the token; the bound only stops a broken test.
    for (let i = 0; (await idp.userinfo(tokens.accessToken)).status === 200; i += 1) {
      assert.ok(i < 100, 'the access token never expired');
      await sleep(100);
    }

    const refreshed = await client.refresh(provider, tokens.refreshToken, {
      issuer: tokens.issuer,
      scopes: tokens.scopes,
    });
    assert.notEqual(refreshed.accessToken, tokens.accessToken);
    assert.ok(refreshed.refreshToken, 'a refresh token is still held (rotated or the same)');
    assert.equal((await idp.userinfo(refreshed.accessToken)).status, 200);
  } finally {
    idp.setAccessTokenTtl(3600);
  }
});

test('a revoked refresh token neither refreshes nor introspects, and its access token dies with it', async () => {
  const provider = providerFor('confidential');
  const tokens = await signIn(provider);
  assert.ok(tokens.refreshToken);
  assert.equal((await idp.introspect(tokens.refreshToken)).active, true);
  assert.equal((await idp.introspect(tokens.accessToken)).active, true);

  assert.equal(await client.revoke(provider, tokens.refreshToken, { tokenTypeHint: 'refresh_token' }), true);

  assert.equal((await idp.introspect(tokens.refreshToken)).active, false);
  assert.equal((await idp.introspect(tokens.accessToken)).active, false);
  await assertFlowError(client.refresh(provider, tokens.refreshToken), 'invalid_grant', [tokens.refreshToken]);
});

test('revoking an access token ends it at the provider; without a revocation endpoint nothing is sent', async () => {
  const provider = providerFor('public');
  const tokens = await signIn(provider);
  assert.equal((await idp.introspect(tokens.accessToken)).active, true);

  assert.equal(await client.revoke(provider, tokens.accessToken, { tokenTypeHint: 'access_token' }), true);
  assert.equal((await idp.introspect(tokens.accessToken)).active, false);
  assert.equal((await idp.userinfo(tokens.accessToken)).status, 401);

  const noRevocation = providerFor('public', { revocation_url: null });
  assert.equal(await client.revoke(noRevocation, 'some-token'), false);
  // Passing the endpoint explicitly works for a provider whose record lacks it.
  const other = await signIn(provider);
  assert.equal((await idp.introspect(other.accessToken)).active, true);
  assert.equal(await client.revoke(noRevocation, other.accessToken, { revocationUrl: idp.endpoints.revocation }), true);
  assert.equal((await idp.introspect(other.accessToken)).active, false);
});

test('when the person denies consent the flow ends with access_denied and no token request', async () => {
  const provider = providerFor('public');
  const { pending, callbackUrl } = await authorize(provider, 'deny');
  assert.equal(callbackUrl.origin + callbackUrl.pathname, REDIRECT_URI);
  assert.equal(callbackUrl.searchParams.get('error'), 'access_denied');
  assert.equal(callbackUrl.searchParams.get('code'), null);

  const before = idp.tokenRequestCount();
  const err = await assertFlowError(client.exchangeCode(provider, pending, callbackUrl), 'provider_error');
  assert.equal(err.oauthError, 'access_denied');
  assert.match(err.message, /access_denied/);
  assert.equal(idp.tokenRequestCount(), before);
});

test('a callback whose state differs from the flow is refused before any token request', async () => {
  const provider = providerFor('public');
  const { pending, callbackUrl } = await authorize(provider);
  const before = idp.tokenRequestCount();

  const forged = new URL(callbackUrl);
  forged.searchParams.set('state', 'someone-elses-state');
  await assertFlowError(client.exchangeCode(provider, pending, forged), 'state_mismatch');
  const missing = new URL(callbackUrl);
  missing.searchParams.delete('state');
  await assertFlowError(client.exchangeCode(provider, pending, missing), 'state_mismatch');
  assert.equal(idp.tokenRequestCount(), before);

  // The genuine callback still works afterwards: nothing was consumed by the forged ones.
  const tokens = await client.exchangeCode(provider, pending, callbackUrl);
  assert.ok(tokens.accessToken);
});

test('a wrong PKCE verifier is rejected as invalid_grant without echoing the code or verifier', async () => {
  const provider = providerFor('public');
  const { pending, callbackUrl } = await authorize(provider);
  const wrongVerifier = 'x'.repeat(43);
  await assertFlowError(
    client.exchangeCode(provider, { ...pending, codeVerifier: wrongVerifier }, callbackUrl),
    'invalid_grant',
    [wrongVerifier, pending.codeVerifier, callbackUrl.searchParams.get('code')],
  );
});

test('a code used twice is rejected the second time', async () => {
  const provider = providerFor('confidential');
  const { pending, callbackUrl } = await authorize(provider);
  await client.exchangeCode(provider, pending, callbackUrl);
  await assertFlowError(client.exchangeCode(provider, pending, callbackUrl), 'invalid_grant', [
    callbackUrl.searchParams.get('code'),
    provider.client_secret,
  ]);
});

test('an unreachable token endpoint ends the flow as unreachable', async () => {
  const provider = providerFor('public');
  const { pending, callbackUrl } = await authorize(provider);
  const down = { ...provider, token_url: await unreachableUrl() };
  const err = await assertFlowError(client.exchangeCode(down, pending, callbackUrl), 'unreachable', [
    callbackUrl.searchParams.get('code'),
  ]);
  assert.match(err.message, /could not be reached/);

  const tokens = await signIn(provider);
  assert.ok(tokens.refreshToken);
  await assertFlowError(client.refresh(down, tokens.refreshToken), 'unreachable', [tokens.refreshToken]);
});

test('a token endpoint that fails is reported by kind, and the flow recovers once it works again', async () => {
  const provider = providerFor('confidential');
  const cases = [
    { failure: 'connection_reset', reason: 'unreachable', status: undefined },
    { failure: 'http_500', reason: 'provider_error', status: 500 },
    { failure: 'oauth_error', reason: 'provider_error', status: 400 },
    { failure: 'malformed_json', reason: 'invalid_response', status: undefined },
  ] as const;
  for (const { failure, reason, status } of cases) {
    const { pending, callbackUrl } = await authorize(provider);
    idp.failTokenEndpoint(failure);
    try {
      const err = await assertFlowError(client.exchangeCode(provider, pending, callbackUrl), reason, [
        provider.client_secret,
        callbackUrl.searchParams.get('code'),
      ]);
      assert.equal(err.status, status, failure);
      if (failure === 'oauth_error') assert.equal(err.oauthError, 'invalid_request');
      assert.equal(err.retryable, failure === 'connection_reset' || failure === 'http_500', failure);
    } finally {
      idp.failTokenEndpoint(null);
    }
    // The code was never spent, so the same callback succeeds once the provider is back.
    assert.ok((await client.exchangeCode(provider, pending, callbackUrl)).accessToken, failure);
  }
});

test('plain http provider URLs are refused unless insecure mode is on', async () => {
  const strict = new OAuthClient();
  const provider = providerFor('public');
  const err = await assertFlowError(
    strict.createAuthorizationRequest(provider, { redirectUri: REDIRECT_URI }),
    'configuration',
  );
  assert.match(err.message, /https/);
  await assertFlowError(strict.refresh(provider, 'a-refresh-token'), 'configuration');
  await assertFlowError(strict.discover(idp.issuer), 'configuration');
});

test('a provider that needs a client secret but has none is a configuration error', async () => {
  const provider = providerFor('confidential', { client_secret: null });
  const { pending, callbackUrl } = await authorize(providerFor('confidential'));
  await assertFlowError(client.exchangeCode(provider, pending, callbackUrl), 'configuration');
});

test('discovery reads the endpoints from the issuer, and they drive a whole flow', async () => {
  const metadata = await client.discover(idp.issuer);
  assert.equal(metadata.issuer, idp.issuer);
  assert.equal(metadata.auth_url, idp.endpoints.authorization);
  assert.equal(metadata.token_url, idp.endpoints.token);
  assert.equal(metadata.revocation_url, idp.endpoints.revocation);
  assert.ok(metadata.code_challenge_methods_supported.includes('S256'));

  const provider: OAuthProviderConfig = {
    ...metadata,
    client_id: idp.clients.public.client_id,
    token_endpoint_auth_method: 'none',
    uses_pkce: true,
    code_challenge_method: 'S256',
    scopes: ['openid', 'offline_access'],
  };
  const tokens = await signIn(provider);
  assert.equal((await idp.userinfo(tokens.accessToken)).status, 200);

  await assertFlowError(client.discover(await unreachableUrl('')), 'unreachable');
});

test('without a configured issuer the flow still completes, checked against the issuer the provider reports', async () => {
  const provider = providerFor('public', { issuer: null });
  const tokens = await signIn(provider);
  assert.equal(tokens.issuer, idp.issuer);
  assert.ok(tokens.refreshToken);
  const refreshed = await client.refresh(provider, tokens.refreshToken, { issuer: tokens.issuer });
  assert.equal((await idp.userinfo(refreshed.accessToken)).status, 200);
});
