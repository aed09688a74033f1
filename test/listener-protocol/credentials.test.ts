/**
 * Listener credentials (docs/listener-protocol.md, "Authentication"): made by an admin, shown once,
 * listed without the secret, revocable; a credential opens the protocol endpoints of its own listener
 * and nothing else, and workspace API keys open those of their workspace's listeners too.
 */
import assert from 'node:assert/strict';
import { after, before, describe } from 'node:test';
import { test } from '../support/limited-test.ts';
import { hashCredential } from '../../src/auth/credentials.ts';
import { client, newWorkspace } from '../support/harness.ts';
import { eventually } from '../support/wait.ts';
import {
  agent,
  createProtocolFixture,
  fetchDesiredState,
  newDeployment,
  newListener,
  type ProtocolFixture,
} from './protocol-fixture.ts';

let f: ProtocolFixture;
before(async () => {
  f = await createProtocolFixture();
});
after(() => f.close());

const MISSING = '00000000-0000-4000-8000-000000000000';

describe('managing credentials', () => {
  test('create shows the credential once; the list shows its prefix, never the credential or its hash', async () => {
    const listener = (await f.api.post('/v2/listeners', { compute_type: 'k8s', compute_id: 'cred-list' })).body;
    const created = await f.api.post(`/v2/listeners/${listener.id}/credentials`, {});
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const c = created.body;
    assert.match(c.credential, /^slwl_[A-Za-z0-9_-]{43}$/);
    assert.equal(c.listener_id, listener.id);
    assert.equal(c.credential_prefix, c.credential.slice(0, 11));
    assert.match(c.created_at, /^\d{4}-\d\d-\d\dT/);
    assert.equal(created.headers['cache-control'], 'no-store');

    const second = (await f.api.post(`/v2/listeners/${listener.id}/credentials`, {})).body;
    assert.notEqual(second.credential, c.credential);
    const listed = await f.api.get(`/v2/listeners/${listener.id}/credentials`);
    assert.equal(listed.status, 200);
    assert.deepEqual(
      listed.body.resources.map((r: { id: string }) => r.id),
      [second.id, c.id],
      'newest first',
    );
    assert.equal(listed.body.offset, 2);
    const text = JSON.stringify(listed.body);
    assert.ok(!text.includes(c.credential) && !text.includes(second.credential), 'no credential in the list');
    assert.ok(
      !text.includes(hashCredential(c.credential).toString('hex')) &&
        !text.includes(hashCredential(c.credential).toString('base64')),
      'no hash either',
    );
    assert.deepEqual(Object.keys(listed.body.resources[0]).sort(), [
      'created_at',
      'created_by',
      'credential_prefix',
      'id',
      'last_used_at',
      'listener_id',
      'revoked_at',
    ]);
  });

  test('creating and revoking write events on the listener, without the credential', async () => {
    const listener = (await f.api.post('/v2/listeners', { compute_type: 'k8s', compute_id: 'cred-events' })).body;
    const c = (await f.api.post(`/v2/listeners/${listener.id}/credentials`, {})).body;
    assert.equal((await f.api.delete(`/v2/listeners/${listener.id}/credentials/${c.id}`)).status, 204);
    const events = await f.t.database.db
      .selectFrom('events')
      .selectAll()
      .where('subject_id', '=', listener.id)
      .orderBy('id')
      .execute();
    assert.deepEqual(
      events.map((e) => e.type),
      ['listener.created', 'listener.credential_created', 'listener.credential_revoked'],
    );
    assert.equal(events[1]!.data.credential_id, c.id);
    assert.equal(events[2]!.data.credential_id, c.id);
    assert.ok(!JSON.stringify(events).includes(c.credential));
  });

  test('revoked: 401 at once, listed with revoked_at, and a second revoke is 404', async () => {
    const l = await newListener(f.api);
    assert.equal((await agent(f, l).desiredState()).status, 200);
    assert.equal((await f.api.delete(`/v2/listeners/${l.id}/credentials/${l.credentialId}`)).status, 204);
    const refused = await agent(f, l).desiredState();
    assert.equal(refused.status, 401);
    assert.equal(refused.body.code, 'unauthenticated');
    const listed = (await f.api.get(`/v2/listeners/${l.id}/credentials`)).body.resources;
    assert.ok(listed[0].revoked_at !== null);
    assert.ok(listed[0].last_used_at !== null, 'it was used before');
    assert.equal((await f.api.delete(`/v2/listeners/${l.id}/credentials/${l.credentialId}`)).status, 404);
  });

  test('revoked while its long-poll waits: the poll answers 401, not the changed state with its secrets', async () => {
    const l = await newListener(f.api);
    const d = await newDeployment(f.api, l.id, { secrets: [{ name: 'OPENAI_API_KEY', value: 'sk-before-revoke' }] });
    // The ETag through the admin key, so that the credential's first use is the long-poll's.
    const etag = (await f.api.get(`/v2/listeners/${l.id}/desired-state`)).headers.etag as string;
    const waiting = fetchDesiredState(f, l, { wait: 60, etag });
    // last_used_at is set when the credential authenticates: from then on the poll is past its check.
    const used = async () =>
      (await f.api.get(`/v2/listeners/${l.id}/credentials`)).body.resources[0].last_used_at as string | null;
    await eventually('the long-poll to authenticate (its credential used)', async () => (await used()) !== null, {
      everyMs: 20,
    });
    assert.equal((await f.api.delete(`/v2/listeners/${l.id}/credentials/${l.credentialId}`)).status, 204);
    const patched = await f.api.patch(`/v2/deployments/${d.id}`, {
      secrets: [{ name: 'OPENAI_API_KEY', value: 'sk-after-revoke' }],
    });
    assert.equal(patched.status, 200, JSON.stringify(patched.body));
    const answered = await waiting;
    assert.equal(answered.status, 401);
    assert.equal(answered.body.code, 'unauthenticated');
    assert.ok(!JSON.stringify(answered.body).includes('sk-'), 'no secret in the answer');
  });

  test('only an admin key makes or revokes credentials; an unknown listener is 404', async () => {
    const l = await newListener(f.api);
    const member = (await f.api.post('/v2/api-keys', { name: 'member', role: 'member' })).body.key;
    const asMember = client(f.t.app, member);
    assert.equal((await asMember.post(`/v2/listeners/${l.id}/credentials`, {})).status, 403);
    assert.equal((await asMember.delete(`/v2/listeners/${l.id}/credentials/${l.credentialId}`)).status, 403);
    assert.equal((await asMember.get(`/v2/listeners/${l.id}/credentials`)).status, 200, 'members may list');
    const unknown = await f.api.post(`/v2/listeners/${MISSING}/credentials`, {});
    assert.equal(unknown.status, 404);
    assert.equal(unknown.body.detail, `Listener ID ${MISSING} not found.`);
    assert.equal((await f.api.get(`/v2/listeners/${MISSING}/credentials`)).status, 404);
  });

  test('deleting the listener takes its credentials with it', async () => {
    const l = await newListener(f.api);
    assert.equal((await f.api.delete(`/v2/listeners/${l.id}`)).status, 204);
    assert.equal((await agent(f, l).desiredState()).status, 401);
    const left = await f.t.database.db
      .selectFrom('listener_credentials')
      .select('id')
      .where('listener_id', '=', l.id)
      .execute();
    assert.deepEqual(left, []);
  });
});

describe('what a credential opens', () => {
  test('every protocol endpoint of its own listener', async () => {
    const l = await newListener(f.api);
    const d = await newDeployment(f.api, l.id);
    const a = agent(f, l);
    assert.equal((await a.desiredState()).status, 200);
    assert.equal((await a.heartbeat({ version: '0.1.0', namespaces: ['agents'] })).status, 200);
    assert.equal((await a.report({ revision_id: d.revisionId, status: 'AWAITING_DEPLOY' })).status, 200);
    assert.equal((await a.confirmDeletion(MISSING)).status, 204);
  });

  test("another listener's protocol endpoints: 404 with the listener message, and nothing changes", async () => {
    const mine = await newListener(f.api);
    const theirs = await newListener(f.api);
    const theirDeployment = await newDeployment(f.api, theirs.id);
    const as = client(f.t.app, null);
    const auth = { authorization: `Bearer ${mine.credential}` };
    const attempts = [
      await as.get(`/v2/listeners/${theirs.id}/desired-state`, auth),
      await as.post(
        `/v2/listeners/${theirs.id}/reports`,
        { revision_id: theirDeployment.revisionId, status: 'DEPLOYING' },
        auth,
      ),
      await as.post(`/v2/listeners/${theirs.id}/deletions`, { deployment_id: theirDeployment.id }, auth),
      await as.post(`/v2/listeners/${theirs.id}/heartbeat`, { version: 'evil', namespaces: [] }, auth),
    ];
    for (const res of attempts) {
      assert.equal(res.status, 404);
      assert.equal(res.body.detail, `Listener ID ${theirs.id} not found.`);
    }
    // Through its own listener's path, their revision is not found either.
    const report = await agent(f, mine).report({ revision_id: theirDeployment.revisionId, status: 'DEPLOYING' });
    assert.equal(report.status, 404);
    assert.equal(report.body.detail, `Revision ID ${theirDeployment.revisionId} not found.`);
    const revision = await f.api.get(`/v2/deployments/${theirDeployment.id}/revisions/${theirDeployment.revisionId}`);
    assert.equal(revision.body.status, 'QUEUED');
    assert.equal((await f.api.get(`/v2/listeners/${theirs.id}`)).body.state, 'never_seen');
  });

  test('no other endpoint: 401, as X-Api-Key or as a bearer token', async () => {
    const l = await newListener(f.api);
    const d = await newDeployment(f.api, l.id);
    const presentations: Record<string, string>[] = [
      { authorization: `Bearer ${l.credential}` },
      { 'x-api-key': l.credential },
    ];
    for (const headers of presentations) {
      const as = client(f.t.app, null);
      const attempts = [
        await as.get(`/v2/listeners/${l.id}`, headers),
        await as.get('/v2/listeners', headers),
        await as.get(`/v2/deployments/${d.id}`, headers),
        await as.get('/v2/deployments', headers),
        await as.get(`/v2/listeners/${l.id}/credentials`, headers),
        await as.post(`/v2/listeners/${l.id}/credentials`, {}, headers),
        await as.patch(`/v2/deployments/${d.id}`, { source_revision_config: { image_uri: 'evil/image:1' } }, headers),
      ];
      for (const res of attempts) {
        assert.equal(res.status, 401, JSON.stringify(res.body));
        assert.equal(res.body.code, 'unauthenticated');
        assert.match(res.body.detail, /listener credential/);
      }
    }
    assert.equal(
      (await f.api.get(`/v2/deployments/${d.id}`)).body.source_revision_config.image_uri,
      'ghcr.io/acme/agent:1.0.0',
    );
  });

  test('an unknown or malformed listener credential is 401', async () => {
    const l = await newListener(f.api);
    const as = client(f.t.app, null);
    for (const credential of ['slwl_unknown', `slwl_${'A'.repeat(600)}`]) {
      const res = await as.get(`/v2/listeners/${l.id}/desired-state`, { authorization: `Bearer ${credential}` });
      assert.equal(res.status, 401);
      assert.equal(res.body.detail, 'Invalid listener credential.');
    }
    assert.equal((await as.get(`/v2/listeners/${l.id}/desired-state`)).status, 401, 'no credential at all');
  });

  test("a workspace API key opens the protocol for its workspace's listeners, not another workspace's", async () => {
    const l = await newListener(f.api);
    assert.equal((await f.api.get(`/v2/listeners/${l.id}/desired-state`)).status, 200);
    const ws = await newWorkspace(f.t, 'elsewhere');
    const other = ws.api;
    const res = await other.get(`/v2/listeners/${l.id}/desired-state`);
    assert.equal(res.status, 404);
    assert.equal(res.body.detail, `Listener ID ${l.id} not found.`);
    assert.equal((await other.post(`/v2/listeners/${l.id}/heartbeat`, { version: 'x', namespaces: [] })).status, 404);
  });
});
