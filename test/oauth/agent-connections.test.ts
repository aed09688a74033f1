import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { OidcServer } from '../fakes/oidc-server.ts';
import { newCredential } from '../../src/auth/credentials.ts';
import { insertCredential } from '../../src/store/agent-credentials.ts';
import { ADMIN_KEY, client, newWorkspace } from '../support/harness.ts';
import {
  agentToken,
  authorize,
  createDeployment,
  registerProvider,
  startIdp,
  startOAuthTestApp,
  storedTokenValues,
  type Api,
  type OAuthTestApp,
} from './oauth-test-app.ts';

let t: OAuthTestApp;
let idp: OidcServer;
let api: Api;
/** An organization key acting in a second workspace of the same organization. */
let second: Api;
let tokenId: string;

before(async () => {
  [t, idp] = await Promise.all([startOAuthTestApp(), startIdp()]);
  api = client(t.app);
  await registerProvider(client(t.app, t.orgKey), idp, 'confidential', 'acme-idp');
  tokenId = (await authorize(t, api, { provider_id: 'acme-idp' })).tokenId;
  const workspace = await newWorkspace(t, 'second');
  second = workspace.api;
});
after(async () => {
  await t.close();
  await idp.close();
});

async function mintCredential(deploymentName: string, body: Record<string, unknown> = {}, as: Api = api) {
  const deploymentId = await createDeployment(as, deploymentName);
  const res = await as.post(`/v2/deployments/${deploymentId}/agent-credentials`, body);
  assert.equal(res.status, 201, JSON.stringify(res.body));
  return { deploymentId, credentialId: res.body.id as string, credential: res.body.credential as string };
}

test('connections: created with 201, listed per agent, duplicates refused, deleted with 204', async () => {
  assert.deepEqual((await api.get('/v2/auth/agents/lonely-agent/connections')).body, { data: [] });

  const created = await api.post('/v2/auth/agents/agent%2Fone/connections', { oauth_token_id: tokenId });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  assert.equal(created.body.agent_id, 'agent/one');
  assert.equal(created.body.oauth_token_id, tokenId);
  assert.equal(created.body.provider_id, 'acme-idp');
  assert.equal(created.body.provider_account_label, 'alice@example.test');
  assert.ok(Array.isArray(created.body.scopes) && created.body.scopes.includes('openid'));

  const list = await api.get('/v2/auth/agents/agent%2Fone/connections');
  assert.deepEqual(list.body, { data: [created.body] });
  const twin = await api.post('/v2/auth/agents/agent%2Fone/connections', { oauth_token_id: tokenId });
  assert.equal(twin.status, 409);

  const unknownToken = await api.post('/v2/auth/agents/agent%2Fone/connections', {
    oauth_token_id: '6f1c2d3e-0000-4000-8000-000000000000',
  });
  assert.equal(unknownToken.status, 400);
  assert.equal(
    unknownToken.body.detail,
    'oauth_token_id: OAuth token ID 6f1c2d3e-0000-4000-8000-000000000000 not found.',
  );
  assert.equal((await api.post('/v2/auth/agents/agent%2Fone/connections', { oauth_token_id: 'nope' })).status, 422);

  const wrongAgent = await api.delete(`/v2/auth/agents/someone-else/connections/${created.body.id}`);
  assert.equal(wrongAgent.status, 404);
  assert.equal(wrongAgent.body.detail, `Agent connection ID ${created.body.id} not found.`);
  assert.equal((await api.delete(`/v2/auth/agents/agent%2Fone/connections/${created.body.id}`)).status, 204);
  assert.deepEqual((await api.get('/v2/auth/agents/agent%2Fone/connections')).body, { data: [] });
  assert.equal((await api.get(`/v2/auth/tokens/${tokenId}`)).status, 200, 'the token stays');
});

test("another workspace sees none of the workspace's tokens or connections and cannot use them", async () => {
  const connection = (await api.post('/v2/auth/agents/shared-name/connections', { oauth_token_id: tokenId })).body;
  assert.deepEqual((await second.get('/v2/auth/tokens')).body.resources, []);
  assert.equal((await second.get(`/v2/auth/tokens/${tokenId}`)).status, 404);
  assert.equal((await second.delete(`/v2/auth/tokens/${tokenId}`)).status, 404);
  assert.deepEqual((await second.get('/v2/auth/agents/shared-name/connections')).body, { data: [] });
  assert.equal((await second.delete(`/v2/auth/agents/shared-name/connections/${connection.id}`)).status, 404);
  assert.equal((await second.post('/v2/auth/agents/shared-name/connections', { oauth_token_id: tokenId })).status, 400);

  // Its deployment's credential cannot fetch the first workspace's token either.
  const theirs = await mintCredential('second-agent', { agent_ids: ['shared-name'] }, second);
  assert.equal((await agentToken(t.app, theirs.credential, 'shared-name', connection.id)).status, 404);
  const pending = await api.post('/v2/auth/authenticate', { provider_id: 'acme-idp', scopes: ['openid', 'repo:read'] });
  assert.equal(pending.body.status, 'pending');
  assert.equal((await second.get(`/v2/auth/wait/${pending.body.auth_id}?timeout=0`)).status, 404);
});

test('the agent token endpoint takes only a valid, unrevoked credential of the right deployment and agent', async () => {
  const connection = (await api.post('/v2/auth/agents/scoped-bot/connections', { oauth_token_id: tokenId })).body;
  const unrestricted = await mintCredential('any-agent', { agent_ids: ['scoped-bot', 'other-bot'] });
  const narrow = await mintCredential('narrow-agent', { agent_ids: ['other-bot'] });

  const ok = await agentToken(t.app, unrestricted.credential, 'scoped-bot', connection.id);
  assert.equal(ok.status, 200, JSON.stringify(ok.body));
  assert.equal((await idp.userinfo(ok.body.access_token!)).status, 200);

  const missing = await agentToken(t.app, null, 'scoped-bot', connection.id);
  assert.equal(missing.status, 401);
  assert.match(missing.body.detail!, /Missing agent credential/);
  assert.equal((await agentToken(t.app, 'slwa_not-a-real-one', 'scoped-bot', connection.id)).status, 401);
  assert.equal(
    (await agentToken(t.app, ADMIN_KEY, 'scoped-bot', connection.id)).status,
    401,
    'API keys are not agent credentials',
  );
  const forbidden = await agentToken(t.app, narrow.credential, 'scoped-bot', connection.id);
  assert.equal(forbidden.status, 403);
  assert.equal(forbidden.body.detail, "This agent credential is not valid for agent 'scoped-bot'.");
  assert.equal(
    (await agentToken(t.app, unrestricted.credential, 'other-bot', connection.id)).status,
    404,
    'the connection belongs to another agent',
  );
  assert.equal(
    (await agentToken(t.app, unrestricted.credential, 'scoped-bot', '6f1c2d3e-0000-4000-8000-000000000000')).status,
    404,
  );

  // Revoked: refused at once. Deleted deployment: its credentials die with it.
  assert.equal(
    (await api.delete(`/v2/deployments/${unrestricted.deploymentId}/agent-credentials/${unrestricted.credentialId}`))
      .status,
    204,
  );
  assert.equal(
    (await api.delete(`/v2/deployments/${unrestricted.deploymentId}/agent-credentials/${unrestricted.credentialId}`))
      .status,
    404,
  );
  assert.equal((await agentToken(t.app, unrestricted.credential, 'scoped-bot', connection.id)).status, 401);
  const doomed = await mintCredential('doomed-agent', { agent_ids: ['scoped-bot'] });
  assert.equal((await agentToken(t.app, doomed.credential, 'scoped-bot', connection.id)).status, 200);
  assert.equal((await api.delete(`/v2/deployments/${doomed.deploymentId}`)).status, 204);
  assert.equal((await agentToken(t.app, doomed.credential, 'scoped-bot', connection.id)).status, 401);

  assert.equal(
    (
      await api.post('/v2/deployments/6f1c2d3e-0000-4000-8000-000000000000/agent-credentials', {
        agent_ids: ['scoped-bot'],
      })
    ).status,
    404,
  );
  assert.equal((await second.get(`/v2/deployments/${narrow.deploymentId}/agent-credentials`)).status, 404);
});

test('a refresh the provider refuses leaves the token in refresh_failed, with a clear message, until a new authorization', async () => {
  idp.setAccessTokenTtl(2);
  let flow;
  try {
    flow = await authorize(
      t,
      api,
      { provider_id: 'acme-idp', scopes: ['openid', 'offline_access', 'profile'], agent_id: 'stale-bot' },
      'carol',
    );
  } finally {
    idp.setAccessTokenTtl(3600);
  }
  const { credential } = await mintCredential('stale-agent', { agent_ids: ['stale-bot'] });
  const values = await storedTokenValues(t, flow.tokenId);
  // Someone revokes the grant at the provider, outside Slipway.
  const revoked = await fetch(idp.endpoints.revocation, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({
      token: values.refresh!,
      client_id: idp.clients.confidential.client_id,
      client_secret: idp.clients.confidential.client_secret!,
    }),
  });
  assert.equal(revoked.status, 200);
  // The access token (2 s) expires: the service's clock moves past it rather than the test waiting.
  t.clock.advance(2100);

  const requests = idp.tokenRequestCount();
  const refused = await agentToken(t.app, credential, 'stale-bot', flow.connectionId!);
  assert.equal(refused.status, 409, JSON.stringify(refused.body));
  assert.match(refused.body.detail!, /refresh_failed: The provider rejected the token refresh with invalid_grant/);
  assert.match(refused.body.detail!, /authorize again/);
  const token = (await api.get(`/v2/auth/tokens/${flow.tokenId}`)).body;
  assert.equal(token.status, 'refresh_failed');
  assert.match(token.status_message, /invalid_grant/);

  // The state sticks without asking the provider again, and a new authentication starts a new flow.
  assert.equal((await agentToken(t.app, credential, 'stale-bot', flow.connectionId!)).status, 409);
  assert.equal(idp.tokenRequestCount(), requests + 1);
  const again = await api.post('/v2/auth/authenticate', {
    provider_id: 'acme-idp',
    scopes: ['openid', 'offline_access', 'profile'],
  });
  assert.equal(again.body.status, 'pending');
  const events = await t.database.db
    .selectFrom('events')
    .select(['type', 'to_status'])
    .where('subject_id', '=', flow.tokenId)
    .orderBy('id')
    .execute();
  assert.deepEqual(
    events.map((e) => e.type),
    ['oauth_token.created', 'oauth_token.refresh_failed'],
  );
});

test('a refresh that fails for a passing reason keeps the token active and answers 503', async () => {
  idp.setAccessTokenTtl(2);
  let flow;
  try {
    flow = await authorize(
      t,
      api,
      { provider_id: 'acme-idp', scopes: ['openid', 'offline_access', 'email'], agent_id: 'patient-bot' },
      'dave',
    );
  } finally {
    idp.setAccessTokenTtl(3600);
  }
  const { credential } = await mintCredential('patient-agent', { agent_ids: ['patient-bot'] });
  t.clock.advance(2100);
  idp.failTokenEndpoint('connection_reset');
  try {
    const res = await agentToken(t.app, credential, 'patient-bot', flow.connectionId!);
    assert.equal(res.status, 503, JSON.stringify(res.body));
    assert.match(
      res.body.detail!,
      /Refreshing the OAuth token failed: The provider at http:\/\/127\.0\.0\.1:\d+ could not be reached/,
    );
  } finally {
    idp.failTokenEndpoint(null);
  }
  assert.equal((await api.get(`/v2/auth/tokens/${flow.tokenId}`)).body.status, 'active');
  const recovered = await agentToken(t.app, credential, 'patient-bot', flow.connectionId!);
  assert.equal(recovered.status, 200);
  assert.equal((await idp.userinfo(recovered.body.access_token!)).status, 200);
});

test('a credential reaches only the agents it names: one made through the API must name them', async () => {
  const deploymentId = await createDeployment(api, 'least-privilege');
  for (const body of [{}, { agent_ids: null }, { agent_ids: [] }, { name: 'everything' }]) {
    const res = await api.post(`/v2/deployments/${deploymentId}/agent-credentials`, body);
    assert.equal(res.status, 422, `${JSON.stringify(body)} -> ${JSON.stringify(res.body)}`);
    assert.deepEqual(res.body.detail[0].loc, ['body', 'agent_ids']);
  }
  assert.deepEqual(
    (await api.get(`/v2/deployments/${deploymentId}/agent-credentials`)).body,
    { resources: [], offset: 0 },
    'nothing was minted',
  );

  const connection = (await api.post('/v2/auth/agents/payroll-bot/connections', { oauth_token_id: tokenId })).body;
  const named = await api.post(`/v2/deployments/${deploymentId}/agent-credentials`, { agent_ids: ['support-bot'] });
  assert.equal(named.status, 201);
  assert.deepEqual(named.body.agent_ids, ['support-bot']);
  const refused = await agentToken(t.app, named.body.credential, 'payroll-bot', connection.id);
  assert.equal(refused.status, 403, 'a connection of an agent the credential does not name is out of reach');
});

test("the data plane's runtime credential reaches the deployment's own agents only: its name, and <name>/...", async () => {
  const deploymentId = await createDeployment(api, 'runtime-app');
  // As the local data plane mints it for a running app (src/dataplane/local-runtime.ts): no agent list.
  const { value: credential, hash: credentialHash, prefix: credentialPrefix } = newCredential('agent');
  await insertCredential(t.database.db, {
    workspaceId: t.workspaceId,
    deploymentId,
    name: 'runtime',
    agentIds: null,
    hash: credentialHash,
    prefix: credentialPrefix,
    createdBy: 'data-plane',
  });
  const connect = async (agentId: string) =>
    (await api.post(`/v2/auth/agents/${encodeURIComponent(agentId)}/connections`, { oauth_token_id: tokenId })).body
      .id as string;
  for (const own of ['runtime-app', 'runtime-app/triage']) {
    const res = await agentToken(t.app, credential, own, await connect(own));
    assert.equal(res.status, 200, `${own}: ${JSON.stringify(res.body)}`);
  }
  for (const foreign of ['payroll-bot-2', 'runtime-app-2', 'runtime-apps/x', 'runtime']) {
    const res = await agentToken(t.app, credential, foreign, await connect(foreign));
    assert.equal(res.status, 403, `${foreign}: ${JSON.stringify(res.body)}`);
    assert.equal(res.body.detail, `This agent credential is not valid for agent '${foreign}'.`);
  }
  const listed = (await api.get(`/v2/deployments/${deploymentId}/agent-credentials`)).body.resources;
  assert.deepEqual(
    listed.map((c: { agent_ids: unknown }) => c.agent_ids),
    [null],
  );
});

// Last in the file: it moves the app's clock an hour ahead, past every token made before it.
test('an access token without a refresh token is handed out until it expires, then needs a new authorization', async () => {
  const flow = await authorize(
    t,
    api,
    { provider_id: 'acme-idp', scopes: ['openid', 'repo:read'], agent_id: 'brief-bot' },
    'erin',
  );
  // As a provider that issues no refresh token leaves it.
  await t.database.db
    .updateTable('oauth_tokens')
    .set({ refresh_token_encrypted: null })
    .where('id', '=', flow.tokenId)
    .execute();
  const { credential } = await mintCredential('brief-agent', { agent_ids: ['brief-bot'] });
  const requests = idp.tokenRequestCount();
  assert.equal((await agentToken(t.app, credential, 'brief-bot', flow.connectionId!)).status, 200);

  // The access token (an hour) expires: the service's clock moves past it.
  t.clock.advance(3601 * 1000);
  const expired = await agentToken(t.app, credential, 'brief-bot', flow.connectionId!);
  assert.equal(expired.status, 409, JSON.stringify(expired.body));
  assert.match(expired.body.detail!, /The access token expired and the provider issued no refresh token/);
  assert.equal(idp.tokenRequestCount(), requests, 'nothing to ask the provider');
  assert.equal((await api.get(`/v2/auth/tokens/${flow.tokenId}`)).body.status, 'refresh_failed');
});
