/**
 * The audit trail of administration: creating and revoking API keys, and creating workspaces, each
 * leave an event saying what was done and by which key, and never the key itself or its hash.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { hashCredential } from '../../src/auth/credentials.ts';
import { client, createTestApp, type TestApp } from '../support/harness.ts';

let t: TestApp;
let api: ReturnType<typeof client>;
let adminKeyId: string;

before(async () => {
  t = await createTestApp();
  api = client(t.app);
  adminKeyId = (
    await t.database.db
      .selectFrom('api_keys')
      .select('id')
      .where('name', 'like', 'bootstrap%')
      .executeTakeFirstOrThrow()
  ).id;
});
after(() => t.close());

async function eventsOf(subjectId: string) {
  return t.database.db.selectFrom('events').selectAll().where('subject_id', '=', subjectId).orderBy('id').execute();
}

/** The key in every form it could leak in: as given, and its stored SHA-256 in hex and base64. */
function assertNoKey(where: string, text: string, key: string): void {
  const hash = hashCredential(key);
  for (const form of [
    key,
    hash.toString('hex'),
    hash.toString('base64'),
    hash.toString('base64url'),
    `\\\\x${hash.toString('hex')}`,
  ]) {
    assert.ok(!text.includes(form), `${where} holds the key or its hash`);
  }
  assert.ok(!/key_hash|"key"/.test(text), `${where} has a key field`);
}

test('creating an API key records api_key.created with who, for which workspace and role, never the key', async () => {
  const created = await api.post('/v2/api-keys', { name: 'ci robot', role: 'member' });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const events = await eventsOf(created.body.id);
  assert.equal(events.length, 1);
  const [event] = events;
  assert.equal(event!.type, 'api_key.created');
  assert.equal(event!.subject_type, 'api_key');
  assert.equal(event!.workspace_id, t.workspaceId);
  assert.deepEqual(event!.data, { name: 'ci robot', role: 'member', workspace_id: t.workspaceId, by_key: adminKeyId });
  assertNoKey('the event', JSON.stringify(event), created.body.key);
});

test('revoking an API key records api_key.revoked; revoking it again records nothing', async () => {
  const created = await api.post('/v2/api-keys', { name: 'short-lived', role: 'admin' });
  assert.equal(created.status, 201);
  assert.equal((await api.delete(`/v2/api-keys/${created.body.id}`)).status, 204);
  assert.equal((await api.delete(`/v2/api-keys/${created.body.id}`)).status, 404);
  const events = await eventsOf(created.body.id);
  assert.deepEqual(
    events.map((e) => [e.type, e.subject_type]),
    [
      ['api_key.created', 'api_key'],
      ['api_key.revoked', 'api_key'],
    ],
  );
  assert.deepEqual(events[1]!.data, {
    name: 'short-lived',
    role: 'admin',
    workspace_id: t.workspaceId,
    by_key: adminKeyId,
  });
  assertNoKey('the events', JSON.stringify(events), created.body.key);
});

test('an organization key, its workspace and a refused request: every change is audited, refusals leave nothing', async () => {
  const org = client(t.app, t.orgKey);
  const orgKeyId = (
    await t.database.db.selectFrom('api_keys').select('id').where('workspace_id', 'is', null).executeTakeFirstOrThrow()
  ).id;

  const workspace = await org.post('/v2/workspaces', { name: 'audited' });
  assert.equal(workspace.status, 201);
  const [made] = await eventsOf(workspace.body.id);
  assert.equal(made!.type, 'workspace.created');
  assert.equal(made!.subject_type, 'workspace');
  assert.equal(made!.workspace_id, workspace.body.id);
  assert.deepEqual(made!.data, { name: 'audited', by_key: orgKeyId });

  // An organization-wide key belongs to no workspace: its events go to the workspace the request acts
  // in (X-Tenant-Id), or else the organization's first.
  const orgWide = await client(t.app, t.orgKey, workspace.body.id).post('/v2/api-keys', {
    name: 'org robot',
    role: 'admin',
    workspace_id: null,
  });
  assert.equal(orgWide.status, 201, JSON.stringify(orgWide.body));
  const [orgWideEvent] = await eventsOf(orgWide.body.id);
  assert.equal(orgWideEvent!.workspace_id, workspace.body.id);
  assert.deepEqual(orgWideEvent!.data, { name: 'org robot', role: 'admin', workspace_id: null, by_key: orgKeyId });
  assert.equal((await org.delete(`/v2/api-keys/${orgWide.body.id}`)).status, 204);
  const revoked = (await eventsOf(orgWide.body.id)).at(-1)!;
  assert.equal(revoked.type, 'api_key.revoked');
  assert.equal(revoked.workspace_id, t.workspaceId, 'without X-Tenant-Id, in the first workspace of the organization');
  assertNoKey('the events', JSON.stringify(await eventsOf(orgWide.body.id)), orgWide.body.key);

  const before = await t.database.db
    .selectFrom('events')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where('subject_type', 'in', ['api_key', 'workspace'])
    .executeTakeFirstOrThrow();
  assert.equal((await api.post('/v2/api-keys', { name: 'elsewhere', workspace_id: workspace.body.id })).status, 403);
  assert.equal((await org.post('/v2/workspaces', { name: 'audited' })).status, 409);
  const member = await api.post('/v2/api-keys', { name: 'member', role: 'member' });
  assert.equal(
    (await client(t.app, member.body.key).post('/v2/api-keys', { name: 'escalation', role: 'admin' })).status,
    403,
  );
  const afterCount = await t.database.db
    .selectFrom('events')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where('subject_type', 'in', ['api_key', 'workspace'])
    .executeTakeFirstOrThrow();
  assert.equal(Number(afterCount.n), Number(before.n) + 1, 'only the member key made in between was recorded');
});
