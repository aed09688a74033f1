import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { authorizeInBrowser, type OidcServer } from '../fakes/oidc-server.ts';
import { client } from '../support/harness.ts';
import {
  agentToken,
  assertNoSecrets,
  authorize,
  createDeployment,
  openCallback,
  registerProvider,
  sleep,
  startAuthorization,
  startIdp,
  startOAuthTestApp,
  storedTokenValues,
  type Api,
  type OAuthTestApp,
} from './oauth-test-app.ts';

let t: OAuthTestApp;
let idp: OidcServer;
let api: Api;
/** Every response body of the non-agent endpoints, to check that no secret ever appears in one. */
const bodies: string[] = [];

before(async () => {
  [t, idp] = await Promise.all([startOAuthTestApp(), startIdp()]);
  const raw = client(t.app);
  const recorded = async <T>(response: Promise<T>): Promise<T> => {
    const res = await response;
    bodies.push(JSON.stringify(res));
    return res;
  };
  api = {
    ...raw,
    get: (url, headers) => recorded(raw.get(url, headers)),
    post: (url, body, headers) => recorded(raw.post(url, body, headers)),
    patch: (url, body) => recorded(raw.patch(url, body)),
    delete: (url, headers) => recorded(raw.delete(url, headers)),
  };
  await registerProvider(client(t.app, t.orgKey), idp, 'confidential', 'acme-idp');
  await registerProvider(client(t.app, t.orgKey), idp, 'public', 'public-idp');
});
after(async () => {
  await t.close();
  await idp.close();
});

const CONNECTION_FIELDS = [
  'agent_id',
  'created_at',
  'created_by',
  'expires_at',
  'id',
  'oauth_token_id',
  'provider_account_label',
  'provider_id',
  'scopes',
];

test('a person authorizes an agent; the token is listed without values and the connection with the interface fields', async () => {
  const pending = await startAuthorization(api, {
    provider_id: 'acme-idp',
    scopes: ['openid', 'offline_access', 'email', 'repo:read'],
    agent_id: 'support-bot',
  });
  const url = new URL(pending.url);
  assert.equal(url.origin + url.pathname, idp.endpoints.authorization);
  assert.equal(url.searchParams.get('redirect_uri'), 'http://slipway.test/v2/auth/callback/acme-idp');
  assert.equal(url.searchParams.get('code_challenge_method'), 'S256');
  assert.ok(url.searchParams.get('state'));

  // A wait started before the person finishes returns when the callback completes the flow.
  const waiting = api.get(`/v2/auth/wait/${pending.auth_id}?timeout=20`);
  await sleep(300);
  const callbackUrl = await authorizeInBrowser(pending.url, { login: 'alice' });
  const page = await openCallback(t.app, callbackUrl);
  assert.equal(page.status, 200, page.html);
  assert.match(String(page.headers['content-type']), /^text\/html/);
  assert.equal(page.headers['cache-control'], 'no-store');
  assert.match(page.html, /Authorization complete/);
  assert.match(page.html, /for alice@example\.test/);
  assert.match(page.html, /Agent support-bot is connected/);

  const waited = await waiting;
  assert.equal(waited.status, 200);
  assert.equal(waited.body.status, 'completed');
  assert.equal(waited.body.error, null);
  const tokenId: string = waited.body.token_id;
  const connectionId: string = waited.body.connection_id;

  const tokens = await api.get('/v2/auth/tokens');
  assert.equal(tokens.status, 200);
  assert.equal(tokens.body.resources.length, 1);
  const token = tokens.body.resources[0];
  assert.equal(token.id, tokenId);
  assert.equal(token.provider_id, 'acme-idp');
  assert.equal(token.status, 'active');
  assert.equal(token.provider_account_label, 'alice@example.test');
  assert.equal(token.has_refresh_token, true);
  assert.ok(token.scopes.includes('repo:read'));
  assert.ok(Date.parse(token.expires_at) > Date.now());
  assert.equal(
    token.created_by,
    (
      await t.database.db
        .selectFrom('api_keys')
        .select('id')
        .where('name', 'like', 'bootstrap%')
        .executeTakeFirstOrThrow()
    ).id,
  );
  assert.deepEqual((await api.get(`/v2/auth/tokens/${tokenId}`)).body, token);

  const connections = await api.get('/v2/auth/agents/support-bot/connections');
  assert.equal(connections.status, 200);
  assert.deepEqual(Object.keys(connections.body), ['data']);
  assert.equal(connections.body.data.length, 1);
  const connection = connections.body.data[0];
  assert.deepEqual(Object.keys(connection).sort(), CONNECTION_FIELDS);
  assert.deepEqual(connection, {
    id: connectionId,
    agent_id: 'support-bot',
    oauth_token_id: tokenId,
    provider_id: 'acme-idp',
    provider_account_label: 'alice@example.test',
    scopes: token.scopes,
    expires_at: token.expires_at,
    created_by: token.created_by,
    created_at: connection.created_at,
  });

  // The stored values are sealed, and the flow kept nothing it no longer needs.
  const values = await storedTokenValues(t, tokenId);
  assert.equal((await idp.userinfo(values.access)).status, 200);
  const flow = await t.database.db
    .selectFrom('oauth_authorizations')
    .selectAll()
    .where('id', '=', pending.auth_id)
    .executeTakeFirstOrThrow();
  assert.equal(flow.status, 'completed');
  assert.equal(flow.code_verifier_encrypted, null);
  assert.ok(!flow.state_hash.toString('utf8').includes(url.searchParams.get('state')!));
});

test('authenticate answers completed with the existing token, and connects another agent to it', async () => {
  const [token] = (await api.get('/v2/auth/tokens')).body.resources;
  const again = await api.post('/v2/auth/authenticate', {
    provider_id: 'acme-idp',
    scopes: ['openid', 'repo:read'],
    agent_id: 'triage-bot',
  });
  assert.equal(again.status, 200);
  assert.equal(again.body.status, 'completed');
  assert.equal(again.body.token_id, token.id);
  assert.equal(again.body.url, null);
  const list = (await api.get('/v2/auth/agents/triage-bot/connections')).body.data;
  assert.deepEqual(
    list.map((c: { id: string; oauth_token_id: string }) => [c.id, c.oauth_token_id]),
    [[again.body.connection_id, token.id]],
  );

  // Scopes the token lacks need a new authorization.
  const more = await api.post('/v2/auth/authenticate', {
    provider_id: 'acme-idp',
    scopes: ['openid', 'profile', 'repo:read'],
  });
  assert.equal(more.body.status, 'pending');
  // Another provider too, named by id this time.
  const publicId = (await api.get('/v2/auth/providers/public-idp')).body.id;
  assert.equal((await api.post('/v2/auth/authenticate', { provider_id: publicId })).body.status, 'pending');
});

test('a deployed agent gets a fresh access token with its deployment credential; the token is refreshed after expiry', async () => {
  idp.setAccessTokenTtl(2);
  let flow;
  try {
    flow = await authorize(t, api, { provider_id: 'public-idp', agent_id: 'refresh-bot' }, 'bob');
  } finally {
    idp.setAccessTokenTtl(3600);
  }
  assert.ok(flow.connectionId);
  const before = await storedTokenValues(t, flow.tokenId);

  const deploymentId = await createDeployment(api, 'refresh-agent');
  const minted = await api.post(`/v2/deployments/${deploymentId}/agent-credentials`, {
    name: 'runtime',
    agent_ids: ['refresh-bot'],
  });
  assert.equal(minted.status, 201, JSON.stringify(minted.body));
  const credential: string = minted.body.credential;
  assert.match(credential, /^slwa_/);
  assert.equal(minted.body.deployment_id, deploymentId);
  const listed = await api.get(`/v2/deployments/${deploymentId}/agent-credentials`);
  assert.deepEqual(listed.body.offset, 1);
  assert.equal(listed.body.resources.length, 1);
  assert.equal(listed.body.resources[0].credential, undefined);
  assert.equal(listed.body.resources[0].credential_prefix, credential.slice(0, 11));

  // Wait until the provider itself refuses the first access token.
  for (let i = 0; (await idp.userinfo(before.access)).status === 200; i += 1) {
    assert.ok(i < 100, 'the access token never expired');
    await sleep(100);
  }

  const got = await agentToken(t.app, credential, 'refresh-bot', flow.connectionId);
  assert.equal(got.status, 200, JSON.stringify(got.body));
  assert.equal(got.headers['cache-control'], 'no-store');
  assert.notEqual(got.body.access_token, before.access);
  assert.equal(got.body.token_type, 'bearer');
  assert.equal(got.body.oauth_token_id, flow.tokenId);
  assert.equal(got.body.provider_account_label, 'bob@example.test');
  assert.ok(Date.parse(String(got.body.expires_at)) > Date.now() + 60_000);
  assert.equal((await idp.userinfo(got.body.access_token!)).status, 200, 'the refreshed token works at the provider');

  const token = (await api.get(`/v2/auth/tokens/${flow.tokenId}`)).body;
  assert.ok(token.refreshed_at);
  assert.equal(token.status, 'active');
  assert.equal(token.expires_at, got.body.expires_at);

  // A fresh token is handed out as it is, without another refresh.
  const second = await agentToken(t.app, credential, 'refresh-bot', flow.connectionId);
  assert.equal(second.body.access_token, got.body.access_token);
  assert.equal((await api.get(`/v2/auth/tokens/${flow.tokenId}`)).body.refreshed_at, token.refreshed_at);
  const used = (await api.get(`/v2/deployments/${deploymentId}/agent-credentials`)).body.resources[0];
  assert.ok(used.last_used_at);
});

test('deleting a token revokes it at the provider and removes its connections', async () => {
  const flow = await authorize(t, api, {
    provider_id: 'acme-idp',
    scopes: ['openid', 'offline_access', 'profile'],
    agent_id: 'doomed-bot',
  });
  const values = await storedTokenValues(t, flow.tokenId);
  assert.ok(values.refresh);
  assert.equal((await idp.introspect(values.access)).active, true);

  const deleted = await api.delete(`/v2/auth/tokens/${flow.tokenId}`);
  assert.equal(deleted.status, 204);
  assert.equal((await idp.introspect(values.access)).active, false);
  assert.equal((await idp.introspect(values.refresh)).active, false);
  assert.equal((await api.get(`/v2/auth/tokens/${flow.tokenId}`)).status, 404);
  assert.deepEqual((await api.get('/v2/auth/agents/doomed-bot/connections')).body, { data: [] });
  assert.equal((await api.delete(`/v2/auth/tokens/${flow.tokenId}`)).status, 404);

  // A provider with tokens cannot be deleted from under them.
  const busy = await client(t.app, t.orgKey).delete('/v2/auth/providers/acme-idp');
  assert.equal(busy.status, 409);
  assert.match(busy.body.detail, /still has 1 token/);
});

test('a plain OAuth 2.0 flow (no openid, client_secret_basic) completes without an account label when userinfo cannot name it', async () => {
  await registerProvider(client(t.app, t.orgKey), idp, 'confidentialBasic', 'basic-idp', {
    scopes: ['repo:read'],
    userinfo_url: idp.endpoints.userinfo,
  });
  const flow = await authorize(t, api, { provider_id: 'basic-idp', agent_id: 'plain-bot' });
  const token = (await api.get(`/v2/auth/tokens/${flow.tokenId}`)).body;
  assert.deepEqual(token.scopes, ['repo:read']);
  assert.equal(token.provider_account_label, null);
  const [connection] = (await api.get('/v2/auth/agents/plain-bot/connections')).body.data;
  assert.equal(connection.provider_account_label, null);
  assert.equal(connection.provider_id, 'basic-idp');
  assert.ok(
    t.logs.some((line) => line.includes('userinfo request failed')),
    'the missing label is logged',
  );
});

test('token values, codes and client secrets never appear in responses or logs', async () => {
  const rows = await t.database.db.selectFrom('oauth_tokens').select('id').execute();
  const secrets: string[] = [idp.clients.confidential.client_secret!, idp.clients.confidentialBasic.client_secret!];
  for (const { id } of rows) {
    const values = await storedTokenValues(t, id);
    secrets.push(values.access, ...(values.refresh ? [values.refresh] : []));
  }
  assert.ok(secrets.length >= 5);
  assertNoSecrets('a response body', bodies.join('\n'), secrets);
  const logs = t.logs.join('\n');
  assert.ok(logs.includes('"/v2/auth/tokens"'), 'the request log is captured');
  assertNoSecrets('the log', logs, secrets);
  assert.ok(!/[?&]code=/.test(logs), 'no authorization code in the log');
  const events = await t.database.db.selectFrom('events').select('data').where('type', 'like', 'oauth%').execute();
  assert.ok(events.length > 0);
  assertNoSecrets('the events', JSON.stringify(events), secrets);
});
