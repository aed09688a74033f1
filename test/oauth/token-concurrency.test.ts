/**
 * Refreshing and revoking tokens against a slow identity provider (the provider's latency must not
 * become the API's): the fake provider holds the request unanswered while the test makes other calls. A refresh or a revocation holds no database connection while it waits for the
 * provider; concurrent requests for one token share one provider call, in one process and across
 * replicas on one database.
 */
import assert from 'node:assert/strict';
import { after, afterEach, before } from 'node:test';
import { test } from '../support/limited-test.ts';
import type { FastifyInstance } from 'fastify';
import type { OidcServer } from '../fakes/oidc-server.ts';
import { client } from '../support/harness.ts';
import { eventually } from '../support/wait.ts';
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

/** The test database's pool has 10 connections: more concurrent requests than that would exhaust it. */
const CONCURRENT = 30;

before(async () => {
  [t, idp] = await Promise.all([startOAuthTestApp(), startIdp()]);
  api = client(t.app);
  await registerProvider(client(t.app, t.orgKey), idp, 'confidential', 'acme-idp');
  // Rotates its refresh tokens (oidc-provider does for public clients): a refresh token spent twice
  // is refused, and the whole grant with it.
  await registerProvider(client(t.app, t.orgKey), idp, 'public', 'public-idp');
});
afterEach(() => {
  idp.delayTokenEndpoint(0);
  idp.delayRevocationEndpoint(0);
  idp.setAccessTokenTtl(3600);
});
after(async () => {
  await t.close();
  await idp.close();
});

/** A token whose access token expires within the refresh margin, connected to `agentId`, and a credential for it. */
async function expiringToken(providerId: string, agentId: string, login: string) {
  idp.setAccessTokenTtl(30);
  const flow = await authorize(
    t,
    api,
    { provider_id: providerId, scopes: ['openid', 'offline_access', 'email'], agent_id: agentId },
    login,
  );
  idp.setAccessTokenTtl(3600);
  const deploymentId = await createDeployment(api, `${agentId}-app`);
  const minted = await api.post(`/v2/deployments/${deploymentId}/agent-credentials`, { agent_ids: [agentId] });
  assert.equal(minted.status, 201, JSON.stringify(minted.body));
  return { ...flow, connectionId: flow.connectionId!, credential: minted.body.credential as string };
}

/**
 * Other API calls while the provider holds a request unanswered: what every other user of the service
 * sees meanwhile. They must all answer with the provider's request still held (had they waited for a
 * database connection the held calls keep, they would never answer: the test's limit would end it).
 */
async function otherCallsAnswerWhileHeld(): Promise<void> {
  await eventually('the provider holding the request', () => idp.heldRequestCount() > 0);
  // More calls than the test database's pool has connections.
  const answers = await Promise.all(
    Array.from({ length: 3 }, () => [
      api.get('/v2/auth/tokens'),
      api.get('/v2/deployments'),
      api.get('/v2/auth/providers'),
      api.get('/v2/auth/agents/nobody/connections'),
    ]).flat(),
  );
  for (const answer of answers) assert.equal(answer.status, 200, JSON.stringify(answer.body));
  assert.ok(idp.heldRequestCount() > 0, 'the provider still holds the request: the calls did not wait for it');
}

test('a slow refresh holds no database connection: other calls answer meanwhile, and the provider sees one refresh', async () => {
  const { tokenId, connectionId, credential } = await expiringToken('acme-idp', 'busy-bot', 'erin');
  const old = await storedTokenValues(t, tokenId);
  const release = idp.holdEndpoint('token');
  const refreshesBefore = idp.tokenRequestCount();

  const requests = Array.from({ length: CONCURRENT }, () => agentToken(t.app, credential, 'busy-bot', connectionId));
  await otherCallsAnswerWhileHeld();
  release();

  const answers = await Promise.all(requests);
  for (const answer of answers) assert.equal(answer.status, 200, JSON.stringify(answer.body));
  const issued = new Set(answers.map((a) => a.body.access_token));
  assert.equal(issued.size, 1, 'every caller got the one refreshed token');
  assert.notEqual([...issued][0], old.access);
  assert.equal(idp.tokenRequestCount() - refreshesBefore, 1, 'one refresh reached the provider');
  assert.equal((await idp.userinfo([...issued][0]!)).status, 200);
});

test('two replicas refresh one token at once: one refresh at the provider, and the rotated refresh token stays good', async () => {
  const replica: FastifyInstance = await t.replica();
  const { tokenId, connectionId, credential } = await expiringToken('public-idp', 'shared-bot', 'frank');
  idp.delayTokenEndpoint(1000);
  const refreshesBefore = idp.tokenRequestCount();

  const answers = await Promise.all(
    Array.from({ length: CONCURRENT }, (_, i) =>
      agentToken(i % 2 === 0 ? t.app : replica, credential, 'shared-bot', connectionId),
    ),
  );
  for (const answer of answers) assert.equal(answer.status, 200, JSON.stringify(answer.body));
  assert.equal(new Set(answers.map((a) => a.body.access_token)).size, 1);
  assert.equal(idp.tokenRequestCount() - refreshesBefore, 1, 'one refresh reached the provider');

  // The grant is intact: the stored refresh token still refreshes.
  idp.delayTokenEndpoint(0);
  const stored = await storedTokenValues(t, tokenId);
  assert.equal((await idp.introspect(stored.refresh!)).active, true);
  assert.equal((await api.get(`/v2/auth/tokens/${tokenId}`)).body.status, 'active');
});

test('a slow revocation holds no database connection; concurrent deletes of one token revoke it once', async () => {
  const flow = await authorize(
    t,
    api,
    { provider_id: 'acme-idp', scopes: ['openid', 'offline_access', 'profile'], agent_id: 'leaving-bot' },
    'grace',
  );
  const values = await storedTokenValues(t, flow.tokenId);
  const release = idp.holdEndpoint('revocation');
  const revocationsBefore = idp.revocationRequestCount();

  const deletes = Array.from({ length: 12 }, () => api.delete(`/v2/auth/tokens/${flow.tokenId}`));
  await otherCallsAnswerWhileHeld();
  release();

  const statuses = (await Promise.all(deletes)).map((d) => d.status).sort();
  assert.deepEqual(statuses, [204, ...Array<number>(11).fill(404)]);
  assert.equal(
    idp.revocationRequestCount() - revocationsBefore,
    2,
    'the refresh token, then the access token, once each',
  );
  assert.equal((await idp.introspect(values.refresh!)).active, false);
  assert.equal((await api.get(`/v2/auth/tokens/${flow.tokenId}`)).status, 404);
  const events = await t.database.db
    .selectFrom('events')
    .select('type')
    .where('subject_id', '=', flow.tokenId)
    .orderBy('id')
    .execute();
  assert.deepEqual(
    events.map((e) => e.type),
    ['oauth_token.created', 'oauth_token.deleted'],
  );
});

test('a refresh that fails at the provider keeps the token usable for the next try', async () => {
  const { tokenId, connectionId, credential } = await expiringToken('acme-idp', 'retry-bot', 'heidi');
  idp.failTokenEndpoint('http_500');
  try {
    const answers = await Promise.all(
      Array.from({ length: 5 }, () => agentToken(t.app, credential, 'retry-bot', connectionId)),
    );
    for (const answer of answers) assert.equal(answer.status, 502, JSON.stringify(answer.body));
  } finally {
    idp.failTokenEndpoint(null);
  }
  const again = await agentToken(t.app, credential, 'retry-bot', connectionId);
  assert.equal(again.status, 200, JSON.stringify(again.body));
  assert.equal((await api.get(`/v2/auth/tokens/${tokenId}`)).body.status, 'active');
});
