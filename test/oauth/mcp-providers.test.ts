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
import { after, before, test } from 'node:test';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { OAuthClient } from '../../src/oauth/oauth-client.ts';
import { startMcpOAuthServer, type McpOAuthServer } from '../fakes/mcp-oauth-server.ts';
import { startOidcServer, type OidcServer } from '../fakes/oidc-server.ts';
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
      return Response.json({ resource: 'https://203.0.113.7/mcp', authorization_servers: ['https://192.168.1.20'] });
    },
  });
  await assert.rejects(oauthClient.discoverMcpServer('https://203.0.113.7/mcp'), /authorization server .*private/);
  assert.deepEqual(requested, ['https://203.0.113.7/.well-known/oauth-protected-resource/mcp']);
});
