/**
 * MCP servers as OAuth providers (docs/oauth.md, "MCP servers"): a provider registered with
 * `provider_type: "mcp"` and its `mcp_server_url` alone. Slipway discovers the server's authorization
 * server (protected-resource metadata, RFC 9728, then its metadata), registers a client there (RFC 7591)
 * and fills the endpoints; the flow sends PKCE and `resource` (RFC 8707), so the token's audience is that
 * MCP server; a deployed agent gets it with its agent credential and calls the server's tool with the
 * official MCP client.
 *
 * On loopback: an `oidc-provider` authorization server with dynamic registration and resource
 * indicators (test/fakes/oidc-server.ts), and two MCP servers on @modelcontextprotocol/sdk's server whose
 * bearer middleware checks each token's audience (test/fakes/mcp-oauth-server.ts). The person authorizes
 * through the fake browser over HTTP and the agent is played by the test; the same flow with Chromium
 * and a real deployed agent is test/oauth/mcp-deployed-agent.test.ts.
 *
 * Attacker's tests: a token for one MCP server is refused by the other; another workspace's agent cannot
 * get it; discovery of a non-https or private address is refused unless insecure mode is on.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { OAuthClient } from '../../src/oauth/oauth-client.ts';
import { startMcpOAuthServer, type McpOAuthServer } from '../fakes/mcp-oauth-server.ts';
import { startOidcServer, unreachableUrl, type OidcServer } from '../fakes/oidc-server.ts';
import { client, newWorkspace } from '../support/harness.ts';
import {
  agentToken,
  authorize,
  callbackFor,
  createDeployment,
  startOAuthTestApp,
  storedTokenValues,
  type Api,
  type OAuthTestApp,
} from './oauth-test-app.ts';

let t: OAuthTestApp;
let idp: OidcServer;
let one: McpOAuthServer;
let two: McpOAuthServer;
let api: Api;
let orgApi: Api;

before(async () => {
  [t, idp] = await Promise.all([
    startOAuthTestApp(),
    startOidcServer({ redirectUris: [callbackFor('unused')], mcp: true }),
  ]);
  [one, two] = await Promise.all([startMcpOAuthServer(idp), startMcpOAuthServer(idp)]);
  api = client(t.app);
  orgApi = client(t.app, t.orgKey);
});
after(async () => {
  await t.close();
  await Promise.all([one.close(), two.close(), idp.close()]);
});

async function callWhoami(url: string, accessToken: string): Promise<string> {
  const mcp = new Client({ name: 'agent', version: '1.0.0' });
  await mcp.connect(
    new StreamableHTTPClientTransport(new URL(url), {
      requestInit: { headers: { authorization: `Bearer ${accessToken}` } },
    }),
  );
  try {
    const result = await mcp.callTool({ name: 'whoami', arguments: {} });
    return (result.content as { type: string; text: string }[])[0]!.text;
  } finally {
    await mcp.close();
  }
}

test('registered by mcp_server_url alone, authorized with PKCE and resource; the agent calls that server and no other', async () => {
  const created = await orgApi.post('/v2/auth/providers', {
    provider_id: 'mcp-one',
    name: 'MCP one',
    provider_type: 'mcp',
    mcp_server_url: one.url,
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  assert.equal(created.body.auth_url, `${idp.issuer}/auth`);
  assert.equal(created.body.token_url, `${idp.issuer}/token`);
  assert.equal(created.body.is_dynamic_client, true);
  assert.equal(created.body.mcp_server_url, one.url);
  assert.equal(created.body.uses_pkce, true);
  assert.equal(created.body.code_challenge_method, 'S256');
  assert.ok(created.body.client_id, 'a client was registered');
  // The registration's secret is sealed like any client secret, and never shown.
  const stored = await t.database.db
    .selectFrom('oauth_providers')
    .select(['client_secret_encrypted', 'issuer', 'scopes'])
    .where('provider_id', '=', 'mcp-one')
    .executeTakeFirstOrThrow();
  assert.ok(stored.client_secret_encrypted !== null, 'the registered secret is kept');
  assert.equal(stored.issuer, idp.issuer, 'the issuer is checked against the responses');
  assert.deepEqual(stored.scopes, ['mcp:tools'], "the scopes the MCP server's metadata names");
  assert.ok(!JSON.stringify(created.body).includes(t.secretBox.open(stored.client_secret_encrypted)));

  // A person authorizes; the agent support-agent is connected to the token.
  const authorized = await authorize(t, api, { provider_id: 'mcp-one', agent_id: 'support-agent' });
  const deploymentId = await createDeployment(api, 'support-agent');
  const minted = await api.post(`/v2/deployments/${deploymentId}/agent-credentials`, { agent_ids: ['support-agent'] });
  assert.equal(minted.status, 201, JSON.stringify(minted.body));
  const got = await agentToken(t.app, minted.body.credential, 'support-agent', authorized.connectionId!);
  assert.equal(got.status, 200, JSON.stringify(got.body));
  const accessToken = got.body.access_token as string;

  // The token is for MCP server one: it answers; server two refuses it (audience).
  assert.equal(await callWhoami(one.url, accessToken), 'alice');
  const refusedBefore = two.refused();
  await assert.rejects(callWhoami(two.url, accessToken), (error: { code?: number }) => error.code === 401);
  assert.ok(two.refused() > refusedBefore);
  const claims = await idp.introspect((await storedTokenValues(t, authorized.tokenId)).access);
  assert.deepEqual([claims.aud].flat(), [one.url]);

  // Another workspace's agent of the same id, with its own credential, cannot get it.
  const other = await newWorkspace(t, 'other-team');
  const theirDeployment = await createDeployment(other.api, 'support-agent');
  const theirs = await other.api.post(`/v2/deployments/${theirDeployment}/agent-credentials`, {
    agent_ids: ['support-agent'],
  });
  assert.equal(theirs.status, 201, JSON.stringify(theirs.body));
  const stolen = await agentToken(t.app, theirs.body.credential, 'support-agent', authorized.connectionId!);
  assert.equal(stolen.status, 404);
  assert.equal(stolen.body.access_token, undefined);
});

test('the authorization request carries PKCE and the resource, and a refreshed token is for the same server', async () => {
  const created = await orgApi.post('/v2/auth/providers', {
    provider_id: 'mcp-two',
    name: 'MCP two',
    provider_type: 'mcp',
    mcp_server_url: two.url,
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const pending = await api.post('/v2/auth/authenticate', { provider_id: 'mcp-two' });
  assert.equal(pending.status, 200, JSON.stringify(pending.body));
  const url = new URL(pending.body.url);
  assert.equal(url.searchParams.get('resource'), two.url);
  assert.equal(url.searchParams.get('code_challenge_method'), 'S256');
  assert.ok(url.searchParams.get('code_challenge'));

  // A token that expires within the minute is refreshed when the agent asks: with the resource again.
  idp.setAccessTokenTtl(30);
  try {
    const authorized = await authorize(t, api, { provider_id: 'mcp-two', agent_id: 'triage-agent' });
    const first = (await storedTokenValues(t, authorized.tokenId)).access;
    const deploymentId = await createDeployment(api, 'triage-agent');
    const minted = await api.post(`/v2/deployments/${deploymentId}/agent-credentials`, { agent_ids: ['triage-agent'] });
    const got = await agentToken(t.app, minted.body.credential, 'triage-agent', authorized.connectionId!);
    assert.equal(got.status, 200, JSON.stringify(got.body));
    assert.notEqual(got.body.access_token, first, 'the token was refreshed');
    assert.deepEqual([(await idp.introspect(got.body.access_token as string)).aud].flat(), [two.url]);
    assert.equal(await callWhoami(two.url, got.body.access_token as string), 'alice');
  } finally {
    idp.setAccessTokenTtl(3600);
  }
});

test('discovery of a non-https or private address is refused unless insecure mode is on', async () => {
  const strict = await startOAuthTestApp({});
  try {
    const strictOrg = client(strict.app, strict.orgKey);
    for (const [url, reason] of [
      [one.url, /https/],
      ['https://127.0.0.1:9/mcp', /loopback, private or link-local/],
      ['https://localhost:9/mcp', /loopback, private or link-local/],
      ['https://10.1.2.3/mcp', /loopback, private or link-local/],
      ['https://[::1]:9/mcp', /loopback, private or link-local/],
      ['https://169.254.169.254/mcp', /loopback, private or link-local/],
      // Other spellings of the same addresses (test/oauth/public-address.test.ts has the full list).
      ['https://[::ffff:127.0.0.1]:9/mcp', /loopback, private or link-local/],
      ['https://2130706433/mcp', /loopback, private or link-local/],
      ['https://[64:ff9b::a9fe:a9fe]/mcp', /loopback, private or link-local/],
      ['https://[2002:a00:1::]/mcp', /loopback, private or link-local/],
    ] as const) {
      const refused = await strictOrg.post('/v2/auth/providers', {
        provider_id: 'mcp-bad',
        name: 'bad',
        provider_type: 'mcp',
        mcp_server_url: url,
      });
      assert.equal(refused.status >= 400 && refused.status < 500, true, `${url}: ${refused.status}`);
      assert.match(refused.body.detail, reason, url);
    }
    assert.equal((await strictOrg.get('/v2/auth/providers')).body.resources.length, 0, 'nothing was stored');
  } finally {
    await strict.close();
  }

  // A public MCP server whose metadata points at a private authorization server: refused too. (The
  // server is an IP literal served by a stand-in fetch: no DNS, no network.)
  const requested: string[] = [];
  const oauthClient = new OAuthClient({
    fetch: async (url) => {
      requested.push(url);
      return Response.json({ resource: 'https://1.1.1.1/mcp', authorization_servers: ['https://192.168.1.20'] });
    },
  });
  await assert.rejects(oauthClient.discoverMcpServer('https://1.1.1.1/mcp'), /authorization server .*private/);
  assert.deepEqual(requested, ['https://1.1.1.1/.well-known/oauth-protected-resource/mcp']);
});

/** The provider's stored columns that discovery fills, and its client. */
async function storedProvider(app: OAuthTestApp, slug: string) {
  return app.database.db
    .selectFrom('oauth_providers')
    .select([
      'auth_url',
      'token_url',
      'revocation_url',
      'issuer',
      'mcp_server_url',
      'client_id',
      'client_secret_encrypted',
      'token_endpoint_auth_method',
      'is_dynamic_client',
      'scopes',
      'updated_at',
    ])
    .where('provider_id', '=', slug)
    .executeTakeFirstOrThrow();
}

test('a PATCH of mcp_server_url discovers the new server: its endpoints, and a client registered there', async () => {
  const otherIdp = await startOidcServer({ redirectUris: [callbackFor('unused')], mcp: true });
  const three = await startMcpOAuthServer(otherIdp);
  try {
    const created = await orgApi.post('/v2/auth/providers', {
      provider_id: 'mcp-moving',
      name: 'MCP moving',
      provider_type: 'mcp',
      mcp_server_url: one.url,
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));

    // The same address again: nothing to discover, the client stays.
    const same = await orgApi.patch('/v2/auth/providers/mcp-moving', { mcp_server_url: one.url });
    assert.equal(same.status, 200, JSON.stringify(same.body));
    assert.equal(same.body.client_id, created.body.client_id);

    // Another MCP server, of another authorization server.
    const moved = await orgApi.patch('/v2/auth/providers/mcp-moving', { mcp_server_url: three.url });
    assert.equal(moved.status, 200, JSON.stringify(moved.body));
    assert.equal(moved.body.mcp_server_url, three.url);
    assert.equal(moved.body.auth_url, `${otherIdp.issuer}/auth`);
    assert.equal(moved.body.token_url, `${otherIdp.issuer}/token`);
    assert.equal(moved.body.is_dynamic_client, true);
    assert.notEqual(moved.body.client_id, created.body.client_id, 'a client was registered at the new server');
    const stored = await storedProvider(t, 'mcp-moving');
    assert.equal(stored.issuer, otherIdp.issuer);
    assert.equal(stored.revocation_url, `${otherIdp.issuer}/token/revocation`);
    assert.ok(stored.client_secret_encrypted !== null, "the new client's secret is kept, sealed");

    // The flow now goes to the new server, for the new resource, and its token works there only.
    const pending = await api.post('/v2/auth/authenticate', { provider_id: 'mcp-moving' });
    assert.equal(new URL(pending.body.url).origin, otherIdp.issuer);
    assert.equal(new URL(pending.body.url).searchParams.get('resource'), three.url);
    const authorized = await authorize(t, api, { provider_id: 'mcp-moving', agent_id: 'mover' });
    const access = (await storedTokenValues(t, authorized.tokenId)).access;
    assert.equal(await callWhoami(three.url, access), 'alice');
    await assert.rejects(callWhoami(one.url, access), (error: { code?: number }) => error.code === 401);

    // With tokens issued for the server, the address cannot change: a person consented to that server.
    const before = await storedProvider(t, 'mcp-moving');
    const refused = await orgApi.patch('/v2/auth/providers/mcp-moving', { mcp_server_url: one.url });
    assert.equal(refused.status, 409, JSON.stringify(refused.body));
    assert.match(refused.body.detail, /token/);
    assert.deepEqual(await storedProvider(t, 'mcp-moving'), before, 'nothing changed');
  } finally {
    await Promise.all([three.close(), otherIdp.close()]);
  }
});

test('a PATCH of mcp_server_url keeps what the request gives, and a client registered by hand at the same server', async () => {
  const created = await orgApi.post('/v2/auth/providers', {
    provider_id: 'mcp-by-hand',
    name: 'MCP by hand',
    provider_type: 'mcp',
    mcp_server_url: one.url,
    client_id: idp.clients.confidential.client_id,
    client_secret: idp.clients.confidential.client_secret,
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  assert.equal(created.body.is_dynamic_client, false);
  const moved = await orgApi.patch('/v2/auth/providers/mcp-by-hand', {
    mcp_server_url: two.url,
    scopes: ['mcp:tools'],
  });
  assert.equal(moved.status, 200, JSON.stringify(moved.body));
  assert.equal(moved.body.mcp_server_url, two.url);
  assert.equal(
    moved.body.client_id,
    idp.clients.confidential.client_id,
    'the same authorization server: the client stays',
  );
  assert.equal(moved.body.is_dynamic_client, false);
});

test('a bad new mcp_server_url is refused and changes nothing', async () => {
  const created = await orgApi.post('/v2/auth/providers', {
    provider_id: 'mcp-staying',
    name: 'MCP staying',
    provider_type: 'mcp',
    mcp_server_url: one.url,
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const before = await storedProvider(t, 'mcp-staying');
  for (const [url, status] of [
    ['not a url', 400],
    ['ftp://127.0.0.1/mcp', 400],
    // Reachable, but no MCP server: the authorization server has no protected-resource metadata.
    [`${idp.issuer}/mcp`, 502],
    [await unreachableUrl('/mcp'), 503],
  ] as const) {
    const refused = await orgApi.patch('/v2/auth/providers/mcp-staying', { mcp_server_url: url, name: 'renamed' });
    assert.equal(refused.status, status, `${url}: ${JSON.stringify(refused.body)}`);
    assert.match(refused.body.detail, /mcp_server_url/, url);
    assert.deepEqual(await storedProvider(t, 'mcp-staying'), before, `${url}: nothing changed`);
  }
  assert.equal((await orgApi.get('/v2/auth/providers/mcp-staying')).body.name, 'MCP staying');

  // Without insecure mode: a private or plain-http address is refused, before any request is made.
  const strict = await startOAuthTestApp({});
  try {
    const strictOrg = client(strict.app, strict.orgKey);
    const given = await strictOrg.post('/v2/auth/providers', {
      provider_id: 'mcp-given',
      name: 'given',
      provider_type: 'mcp',
      mcp_server_url: 'https://mcp.example.com/mcp',
      client_id: 'slipway',
      client_secret: 'secret',
      auth_url: 'https://auth.example.com/authorize',
      token_url: 'https://auth.example.com/token',
    });
    assert.equal(given.status, 201, JSON.stringify(given.body));
    const kept = await storedProvider(strict, 'mcp-given');
    for (const [url, reason] of [
      ['https://10.1.2.3/mcp', /loopback, private or link-local/],
      ['https://169.254.169.254/mcp', /loopback, private or link-local/],
      // Other spellings of the same addresses (test/oauth/public-address.test.ts has the full list).
      ['https://[::ffff:127.0.0.1]:9/mcp', /loopback, private or link-local/],
      ['https://2130706433/mcp', /loopback, private or link-local/],
      ['https://[64:ff9b::a9fe:a9fe]/mcp', /loopback, private or link-local/],
      ['https://[2002:a00:1::]/mcp', /loopback, private or link-local/],
      ['http://mcp.example.com/mcp', /https/],
    ] as const) {
      const refused = await strictOrg.patch('/v2/auth/providers/mcp-given', { mcp_server_url: url });
      assert.equal(refused.status, 400, `${url}: ${JSON.stringify(refused.body)}`);
      assert.match(refused.body.detail, reason, url);
      assert.deepEqual(await storedProvider(strict, 'mcp-given'), kept, `${url}: nothing changed`);
    }
  } finally {
    await strict.close();
  }
});

test('a provider changed while its new MCP server is being discovered is not overwritten: 409, and the other change stays', async () => {
  const created = await orgApi.post('/v2/auth/providers', {
    provider_id: 'mcp-racing',
    name: 'MCP racing',
    provider_type: 'mcp',
    mcp_server_url: one.url,
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  // An MCP server whose protected-resource metadata is answered only when the test says so.
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  let asked!: () => void;
  const metadataAsked = new Promise<void>((resolve) => (asked = resolve));
  const slow = http.createServer((req, res) => {
    asked();
    void released.then(() =>
      res
        .writeHead(200, { 'content-type': 'application/json' })
        .end(JSON.stringify({ resource: slowUrl, authorization_servers: [idp.issuer] })),
    );
  });
  await new Promise<void>((resolve) => slow.listen(0, '127.0.0.1', resolve));
  const slowUrl = `http://127.0.0.1:${(slow.address() as AddressInfo).port}/mcp`;
  try {
    const moving = orgApi.patch('/v2/auth/providers/mcp-racing', { mcp_server_url: slowUrl });
    await metadataAsked;
    const renamed = await orgApi.patch('/v2/auth/providers/mcp-racing', { name: 'renamed meanwhile' });
    assert.equal(renamed.status, 200, JSON.stringify(renamed.body));
    release();
    const answer = await moving;
    assert.equal(answer.status, 409, JSON.stringify(answer.body));
    const now = (await orgApi.get('/v2/auth/providers/mcp-racing')).body;
    assert.equal(now.name, 'renamed meanwhile');
    assert.equal(now.mcp_server_url, one.url);
    assert.equal(now.client_id, created.body.client_id);
  } finally {
    slow.closeAllConnections();
    await new Promise<void>((resolve) => slow.close(() => resolve()));
  }
});
