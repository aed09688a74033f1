/**
 * Who may change what an organization or a workspace trusts (issue 23, items 1 to 3), tried with the
 * keys an attacker would have: the admin key of another workspace of the same organization, and a
 * member key of the workspace itself. Every refusal is 403 `forbidden` and changes nothing.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { client, createTestApp, type TestApp, newWorkspace } from '../support/harness.ts';

let t: TestApp;
/** The organization admin key of the first start. */
let org: ReturnType<typeof client>;
/** The admin key of the default workspace (A). */
let adminA: ReturnType<typeof client>;
let memberA: ReturnType<typeof client>;
let workspaceB: string;
let adminB: ReturnType<typeof client>;
let adminKeyIdA: string;

before(async () => {
  t = await createTestApp({ SLIPWAY_ALLOW_INSECURE_OAUTH: '1' });
  adminA = client(t.app);
  workspaceB = (await newWorkspace(t, 'workspace-b')).id;
  org = client(t.app, t.orgKey, t.workspaceId);
  const keyB = await org.post('/v2/api-keys', { name: 'b admin', role: 'admin', workspace_id: workspaceB });
  assert.equal(keyB.status, 201, JSON.stringify(keyB.body));
  adminB = client(t.app, keyB.body.key);
  const member = await adminA.post('/v2/api-keys', { name: 'a member', role: 'member' });
  assert.equal(member.status, 201, JSON.stringify(member.body));
  memberA = client(t.app, member.body.key);
  adminKeyIdA = (
    await t.database.db
      .selectFrom('api_keys')
      .select('id')
      .where('name', 'like', 'bootstrap%')
      .executeTakeFirstOrThrow()
  ).id;
});
after(() => t.close());

const provider = (slug: string) => ({
  provider_id: slug,
  name: 'Acme SSO',
  client_id: 'slipway',
  client_secret: 'client-secret-of-a',
  auth_url: 'https://sso.acme.example/authorize',
  token_url: 'https://sso.acme.example/token',
});

async function providerEvents(id: string) {
  return t.database.db
    .selectFrom('events')
    .select(['workspace_id', 'type', 'data'])
    .where('subject_type', '=', 'oauth_provider')
    .where('subject_id', '=', id)
    .orderBy('id')
    .execute();
}

describe('OAuth providers belong to the organization: only an organization admin key changes them', () => {
  test("another workspace's admin key cannot redirect a provider's token_url, nor delete or add one", async () => {
    const created = await org.post('/v2/auth/providers', provider('acme-sso'));
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const before = await t.database.db
      .selectFrom('oauth_providers')
      .selectAll()
      .where('id', '=', created.body.id)
      .executeTakeFirstOrThrow();

    for (const [who, api] of [
      ['the admin key of workspace B', adminB],
      ['the admin key of workspace A', adminA],
      ['a member key', memberA],
    ] as const) {
      const patched = await api.patch('/v2/auth/providers/acme-sso', {
        token_url: 'https://attacker.example/token',
        auth_url: 'https://attacker.example/authorize',
      });
      assert.equal(patched.status, 403, `${who}: ${JSON.stringify(patched.body)}`);
      assert.equal(patched.body.code, 'forbidden');
      assert.match(patched.body.detail, /organization admin/);
      assert.equal((await api.delete('/v2/auth/providers/acme-sso')).status, 403, who);
      assert.equal((await api.post('/v2/auth/providers', provider(`rogue-${api === adminB ? 'b' : 'a'}`))).status, 403);
      assert.equal((await api.get('/v2/auth/providers/acme-sso')).status, 200, `${who} still reads it`);
    }
    const after = await t.database.db
      .selectFrom('oauth_providers')
      .selectAll()
      .where('id', '=', created.body.id)
      .executeTakeFirstOrThrow();
    assert.deepEqual(after, before, 'nothing changed');
    assert.equal(
      (await t.database.db.selectFrom('oauth_providers').select('id').where('provider_id', 'like', 'rogue%').execute())
        .length,
      0,
    );
    assert.deepEqual(
      (await providerEvents(created.body.id)).map((e) => e.type),
      ['oauth_provider.created', 'oauth_provider.created'],
      'refusals leave no event',
    );
  });

  test('every change of a provider is an event in every workspace of the organization', async () => {
    // Without X-Tenant-Id: providers are the organization's, so no workspace needs to be named.
    const orgWide = client(t.app, t.orgKey);
    const created = await orgWide.post('/v2/auth/providers', provider('shared-sso'));
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const patched = await orgWide.patch('/v2/auth/providers/shared-sso', { token_url: 'https://sso2.acme.example/t' });
    assert.equal(patched.status, 200, JSON.stringify(patched.body));
    assert.equal((await orgWide.delete('/v2/auth/providers/shared-sso')).status, 204);
    const events = await providerEvents(created.body.id);
    for (const workspace of [t.workspaceId, workspaceB]) {
      assert.deepEqual(
        events.filter((e) => e.workspace_id === workspace).map((e) => e.type),
        ['oauth_provider.created', 'oauth_provider.updated', 'oauth_provider.deleted'],
        `the events in workspace ${workspace}`,
      );
    }
    assert.ok(!JSON.stringify(events).includes('client-secret-of-a'), 'no event holds the client secret');
  });
});

describe('listeners: members read, admins manage', () => {
  async function newListener(computeId: string): Promise<string> {
    const made = await adminA.post('/v2/listeners', { compute_type: 'k8s', compute_id: computeId });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    return made.body.id;
  }

  test('a member key can neither create, change nor delete a listener, nor manage its credentials', async () => {
    const id = await newListener('members-cannot-touch');
    const credential = await adminA.post(`/v2/listeners/${id}/credentials`, {});
    assert.equal(credential.status, 201);
    const created = await memberA.post('/v2/listeners', { compute_type: 'k8s', compute_id: 'rogue-cluster' });
    assert.equal(created.status, 403, JSON.stringify(created.body));
    assert.equal(created.body.code, 'forbidden');
    const patched = await memberA.patch(`/v2/listeners/${id}`, { compute_config: { k8s_namespaces: ['elsewhere'] } });
    assert.equal(patched.status, 403);
    assert.equal((await memberA.delete(`/v2/listeners/${id}`)).status, 403);
    assert.equal((await memberA.post(`/v2/listeners/${id}/credentials`, {})).status, 403);
    assert.equal((await memberA.delete(`/v2/listeners/${id}/credentials/${credential.body.id}`)).status, 403);

    const listener = await memberA.get(`/v2/listeners/${id}`);
    assert.equal(listener.status, 200, 'members keep read access');
    assert.deepEqual(listener.body.compute_config.k8s_namespaces, ['default'], 'unchanged');
    assert.equal((await memberA.get('/v2/listeners')).status, 200);
    const credentials = await memberA.get(`/v2/listeners/${id}/credentials`);
    assert.equal(credentials.status, 200);
    assert.equal(credentials.body.resources[0].revoked_at, null, 'the credential still works');
    assert.equal(
      (await t.database.db.selectFrom('listeners').select('id').where('compute_id', '=', 'rogue-cluster').execute())
        .length,
      0,
    );
  });

  test("a member key never gets the desired state (plaintext secrets); another workspace's admin sees no listener", async () => {
    const id = await newListener('secrets-inside');
    const deployment = await adminA.post('/v2/deployments', {
      name: 'secret-holder',
      source: 'external_container',
      source_config: { listener_id: id },
      source_revision_config: { image_uri: 'ghcr.io/acme/agent:1.0.0' },
      secrets: [{ name: 'OPENAI_API_KEY', value: 'sk-plaintext-of-a' }],
    });
    assert.equal(deployment.status, 201, JSON.stringify(deployment.body));

    const asMember = await memberA.get(`/v2/listeners/${id}/desired-state`);
    assert.equal(asMember.status, 403, JSON.stringify(asMember.body));
    assert.equal(asMember.body.code, 'forbidden');
    assert.ok(!JSON.stringify(asMember.body).includes('sk-plaintext'));
    for (const [path, body] of [
      ['reports', { revision_id: deployment.body.latest_revision_id, status: 'DEPLOY_FAILED' }],
      ['deletions', { deployment_id: deployment.body.id }],
      ['heartbeat', { version: '0.1.0', namespaces: ['default'] }],
    ] as const) {
      const res = await memberA.post(`/v2/listeners/${id}/${path}`, body);
      assert.equal(res.status, 403, `${path}: ${JSON.stringify(res.body)}`);
    }
    const fromB = await adminB.get(`/v2/listeners/${id}/desired-state`);
    assert.equal(fromB.status, 404);
    assert.ok(!JSON.stringify(fromB.body).includes('sk-plaintext'));

    const revision = await adminA.get(
      `/v2/deployments/${deployment.body.id}/revisions/${deployment.body.latest_revision_id}`,
    );
    assert.equal(revision.body.status, 'QUEUED', 'the refused report changed nothing');
    const listener = await adminA.get(`/v2/listeners/${id}`);
    assert.equal(listener.body.last_seen_at, null, 'refused requests do not count as the agent being seen');
  });

  test('each read of the desired state with an API key is an event on the listener; an agent credential is not', async () => {
    const id = await newListener('audited-reads');
    const reads = () =>
      t.database.db
        .selectFrom('events')
        .select(['workspace_id', 'subject_type', 'data'])
        .where('subject_id', '=', id)
        .where('type', '=', 'listener.desired_state_read')
        .orderBy('id')
        .execute();
    const first = await adminA.get(`/v2/listeners/${id}/desired-state`);
    assert.equal(first.status, 200, JSON.stringify(first.body));
    const second = await adminA.get(`/v2/listeners/${id}/desired-state`);
    assert.equal(second.status, 200);
    const events = await reads();
    assert.equal(events.length, 2, 'one event per read');
    assert.deepEqual(events[0], {
      workspace_id: t.workspaceId,
      subject_type: 'listener',
      data: { by_key: adminKeyIdA },
    });

    const credential = await adminA.post(`/v2/listeners/${id}/credentials`, {});
    assert.equal(credential.status, 201);
    const agent = await t.app.inject({
      method: 'GET',
      url: `/v2/listeners/${id}/desired-state`,
      headers: { authorization: `Bearer ${credential.body.credential}` },
    });
    assert.equal(agent.statusCode, 200);
    assert.equal((await reads()).length, 2, "the listener's own agent reading its state is not an event");
  });
});

describe("agent connections and credentials: a member cannot reach another person's OAuth token", () => {
  test('a member key can neither connect an agent to a token nor mint or revoke an agent credential', async () => {
    const deployment = await adminA.post('/v2/deployments', {
      name: 'token-reader',
      source: 'internal_container',
      source_revision_config: { image_uri: 'reg.example.com/agent:1' },
    });
    assert.equal(deployment.status, 201, JSON.stringify(deployment.body));
    const minted = await adminA.post(`/v2/deployments/${deployment.body.id}/agent-credentials`, {
      agent_ids: ['helper'],
    });
    assert.equal(minted.status, 201, 'an admin mints one');

    // The path to someone else's token: connect an agent to it, then fetch it with a credential.
    const someonesToken = '6f1c0000-0000-4000-8000-000000000001';
    const connected = await memberA.post('/v2/auth/agents/helper/connections', { oauth_token_id: someonesToken });
    assert.equal(connected.status, 403, JSON.stringify(connected.body));
    assert.equal(connected.body.code, 'forbidden');
    const mint = await memberA.post(`/v2/deployments/${deployment.body.id}/agent-credentials`, {
      agent_ids: ['helper'],
    });
    assert.equal(mint.status, 403, JSON.stringify(mint.body));
    assert.ok(!('credential' in mint.body));
    assert.equal(
      (await memberA.delete(`/v2/deployments/${deployment.body.id}/agent-credentials/${minted.body.id}`)).status,
      403,
    );
    const listed = await memberA.get(`/v2/deployments/${deployment.body.id}/agent-credentials`);
    assert.equal(listed.status, 200, 'members read them');
    assert.deepEqual(
      listed.body.resources.map((c: { id: string; revoked_at: string | null }) => [c.id, c.revoked_at]),
      [[minted.body.id, null]],
      'one credential, still valid',
    );
    assert.deepEqual((await memberA.get('/v2/auth/agents/helper/connections')).body, { data: [] });
  });
});
