/**
 * Protocol credentials: what callers of a deployment's MCP and A2A endpoints present when it requires
 * one (SLIPWAY_PROTOCOLS_AUTH=credential), and the check a deployment's server makes with its own agent
 * credential (POST /v2/auth/protocol-credentials/verify). The server side, with the official MCP and A2A
 * clients, is in test/langgraph/protocols.test.ts.
 *
 * Attacker's view: the check says yes only for an unrevoked protocol credential of the asking
 * deployment; another deployment's or workspace's, an API key, an agent credential, a revoked one and a
 * deleted deployment's are refused alike, and the protocol credential opens nothing on the API.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { ADMIN_KEY, client, createTestApp, newWorkspace, type TestApp } from '../support/harness.ts';
import { createDeployment } from './oauth-test-app.ts';

let t: TestApp;
let api: ReturnType<typeof client>;

before(async () => {
  t = await createTestApp();
  api = client(t.app);
});
after(async () => {
  await t.close();
});

async function verify(agentCredential: string | null, credential: unknown) {
  const response = await t.app.inject({
    method: 'POST',
    url: '/v2/auth/protocol-credentials/verify',
    headers: {
      'content-type': 'application/json',
      ...(agentCredential ? { authorization: `Bearer ${agentCredential}` } : {}),
    },
    payload: JSON.stringify({ credential }),
  });
  return {
    status: response.statusCode,
    body: JSON.parse(response.body) as { valid?: boolean; credential_id?: string },
  };
}

async function agentCredential(as: typeof api, deploymentId: string): Promise<string> {
  const made = await as.post(`/v2/deployments/${deploymentId}/agent-credentials`, { agent_ids: ['bot'] });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  return made.body.credential;
}

async function protocolCredential(as: typeof api, deploymentId: string) {
  const made = await as.post(`/v2/deployments/${deploymentId}/protocol-credentials`, { name: 'claude' });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  return made.body as { id: string; credential: string; credential_prefix: string };
}

test('minted once, listed without the secret, revoked with 204; events name no value', async () => {
  const deploymentId = await createDeployment(api, 'proto-list');
  const made = await protocolCredential(api, deploymentId);
  assert.match(made.credential, /^slwp_[A-Za-z0-9_-]{43}$/);
  assert.equal(made.credential_prefix, made.credential.slice(0, 11));
  const listed = await api.get(`/v2/deployments/${deploymentId}/protocol-credentials`);
  assert.equal(listed.status, 200);
  assert.equal(listed.body.resources.length, 1);
  assert.equal(listed.body.resources[0].id, made.id);
  assert.ok(!JSON.stringify(listed.body).includes(made.credential));
  const path = `/v2/deployments/${deploymentId}/protocol-credentials/${made.id}`;
  assert.equal((await api.delete(path)).status, 204);
  assert.equal((await api.delete(path)).status, 404);
  const events = await api.get(`/v2/deployments/${deploymentId}/events`);
  const types = (events.body.resources ?? events.body.data ?? events.body).map((event: { type: string }) => event.type);
  assert.ok(types.includes('protocol_credential.created') && types.includes('protocol_credential.revoked'), types);
  assert.ok(!JSON.stringify(events.body).includes(made.credential));
  assert.equal(
    (await api.post('/v2/deployments/6f1c2d3e-0000-4000-8000-000000000000/protocol-credentials', {})).status,
    404,
  );
});

test("the check: yes for the deployment's own credential only", async () => {
  const mine = await createDeployment(api, 'proto-mine');
  const sibling = await createDeployment(api, 'proto-sibling');
  const other = await newWorkspace(t, 'proto-other');
  const foreign = await createDeployment(other.api, 'proto-foreign');

  const runtime = await agentCredential(api, mine);
  const own = await protocolCredential(api, mine);
  const siblings = await protocolCredential(api, sibling);
  const foreigns = await protocolCredential(other.api, foreign);

  assert.deepEqual((await verify(runtime, own.credential)).body, { valid: true, credential_id: own.id });
  for (const [what, value] of [
    ['another deployment', siblings.credential],
    ["another workspace's deployment", foreigns.credential],
    ['an API key', ADMIN_KEY],
    ['an agent credential', runtime],
    ['a made-up one', `slwp_${'A'.repeat(43)}`],
  ] as const) {
    const answer = await verify(runtime, value);
    assert.equal(answer.status, 200, what);
    assert.deepEqual(answer.body, { valid: false, credential_id: null }, what);
  }
  // The other deployment's server, asking with its own agent credential, gets no to this one's.
  assert.equal((await verify(await agentCredential(other.api, foreign), own.credential)).body.valid, false);

  // Only an agent credential asks: none, an API key or a protocol credential is 401.
  assert.equal((await verify(null, own.credential)).status, 401);
  assert.equal((await verify(ADMIN_KEY, own.credential)).status, 401);
  assert.equal((await verify(own.credential, own.credential)).status, 401);
  // ...whatever else is wrong with the request.
  assert.equal((await verify(null, 12345)).status, 401);
  assert.equal((await verify(runtime, 12345)).status, 422);

  // A protocol credential opens nothing on the API.
  const asKey = await t.app.inject({ method: 'GET', url: '/v2/deployments', headers: { 'x-api-key': own.credential } });
  assert.equal(asKey.statusCode, 401);
  const asBearer = await t.app.inject({
    method: 'GET',
    url: '/v2/deployments',
    headers: { authorization: `Bearer ${own.credential}` },
  });
  assert.equal(asBearer.statusCode, 401);

  // Revoked: refused at once; a deleted deployment's credentials die with it.
  assert.equal((await api.delete(`/v2/deployments/${mine}/protocol-credentials/${own.id}`)).status, 204);
  assert.equal((await verify(runtime, own.credential)).body.valid, false);
  const doomedRuntime = await agentCredential(api, sibling);
  assert.equal((await verify(doomedRuntime, siblings.credential)).body.valid, true);
  assert.equal((await api.delete(`/v2/deployments/${sibling}`)).status, 204);
  assert.equal((await verify(doomedRuntime, siblings.credential)).status, 401);
});

test('a member key lists them but cannot mint or revoke', async () => {
  const deploymentId = await createDeployment(api, 'proto-member');
  const made = await protocolCredential(api, deploymentId);
  const key = await client(t.app, t.orgKey).post('/v2/api-keys', {
    name: 'member',
    role: 'member',
    workspace_id: t.workspaceId,
  });
  assert.equal(key.status, 201, JSON.stringify(key.body));
  const member = client(t.app, key.body.key);
  assert.equal((await member.get(`/v2/deployments/${deploymentId}/protocol-credentials`)).status, 200);
  assert.equal((await member.post(`/v2/deployments/${deploymentId}/protocol-credentials`, {})).status, 403);
  assert.equal((await member.delete(`/v2/deployments/${deploymentId}/protocol-credentials/${made.id}`)).status, 403);
});
