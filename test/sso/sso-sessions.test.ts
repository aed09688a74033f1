/**
 * What a sign-in session opens, and what it does not: the workspaces its mappings name with their
 * roles and nothing else; no mapping management but for an organization admin; nothing once expired,
 * signed out, ended by an admin or unmapped; no change from another origin (CSRF); and every change it
 * makes is audited under the person.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { createTestClock } from '../support/clock.ts';
import { client } from '../support/harness.ts';
import { asPerson, createSsoTestApp, signIn, type SsoTestApp } from './sso-harness.ts';

let t: SsoTestApp;
/** The service's clock: the expiry test moves it past the session's lifetime instead of dating the row back. */
const clock = createTestClock();
let workspaceB: string;
/** A deployment of workspace B, which people of A must not see. */
let deploymentB: string;

const sessions = () => t.database.db;

async function personIn(login: string, groups: string[]): Promise<string> {
  t.provider.accounts.set(login, { groups });
  const done = await signIn(t, login);
  assert.equal(done.status, 200, done.page);
  return done.session!;
}

before(async () => {
  t = await createSsoTestApp({ now: clock.now });
  const org = client(t.app, t.orgKey);
  const b = await org.post('/v2/workspaces', { name: 'team-b' });
  assert.equal(b.status, 201);
  workspaceB = b.body.id;
  const made = await client(t.app, t.orgKey, workspaceB).post('/v2/deployments', {
    name: 'b-agent',
    source: 'internal_source',
  });
  assert.equal(made.status, 201);
  deploymentB = made.body.id;
  for (const [group, workspace, role] of [
    ['team-a', t.workspaceId, 'member'],
    ['team-a-admins', t.workspaceId, 'admin'],
    ['team-b-admins', workspaceB, 'admin'],
    ['slipway-admins', null, 'admin'],
  ] as const) {
    const mapped = await org.post('/v2/sso/mappings', { kind: 'group', value: group, workspace_id: workspace, role });
    assert.equal(mapped.status, 201, JSON.stringify(mapped.body));
  }
});
after(() => t?.close());

describe('access comes from the mappings, workspace by workspace', () => {
  test('a group mapped in workspace A gives nothing in workspace B', async () => {
    const alice = await personIn('alice', ['team-a']);
    const inB = await asPerson(t, alice, 'GET', '/v2/deployments', { headers: { 'x-tenant-id': workspaceB } });
    assert.equal(inB.status, 403);
    assert.equal(inB.body.code, 'forbidden');
    const byId = await asPerson(t, alice, 'GET', `/v2/deployments/${deploymentB}`);
    assert.equal(byId.status, 404, 'B’s deployment does not exist for a person of A');
    const listed = await asPerson(t, alice, 'GET', '/v2/deployments');
    assert.equal(listed.status, 200);
    assert.deepEqual(listed.body.resources, []);
    const write = await asPerson(t, alice, 'POST', '/v2/deployments', {
      body: { name: 'sneaky', source: 'internal_source' },
      headers: { 'x-tenant-id': workspaceB },
    });
    assert.equal(write.status, 403);
    assert.equal(
      (await client(t.app, t.orgKey, workspaceB).get('/v2/deployments?name=sneaky')).body.resources.length,
      0,
    );
  });

  test('a person in two workspaces names one, and has the role of that one there', async () => {
    const bob = await personIn('bob', ['team-a', 'team-b-admins']);
    const unnamed = await asPerson(t, bob, 'GET', '/v2/deployments');
    assert.equal(unnamed.status, 403);
    assert.equal(unnamed.body.code, 'workspace_required');
    const status = await asPerson(t, bob, 'GET', '/v2/sso/session');
    assert.deepEqual(
      status.body.session.workspaces.map((w: { id: string; role: string }) => [w.id, w.role]).sort(),
      [
        [t.workspaceId, 'member'],
        [workspaceB, 'admin'],
      ].sort(),
    );
    // Admin in B: may make a key of B; member in A: may not make one there.
    const inB = await asPerson(t, bob, 'POST', '/v2/api-keys', {
      body: { name: 'made-by-bob' },
      headers: { 'x-tenant-id': workspaceB },
    });
    assert.equal(inB.status, 201, JSON.stringify(inB.body));
    assert.equal(inB.body.workspace_id, workspaceB);
    const orgKey = await asPerson(t, bob, 'POST', '/v2/api-keys', {
      body: { name: 'org-wide', workspace_id: null },
      headers: { 'x-tenant-id': workspaceB },
    });
    assert.equal(orgKey.status, 403, 'a workspace admin makes no organization key');
    const inA = await asPerson(t, bob, 'POST', '/v2/api-keys', {
      body: { name: 'not-allowed' },
      headers: { 'x-tenant-id': t.workspaceId },
    });
    assert.equal(inA.status, 403);
  });

  test('only an organization admin manages mappings: not a member, not a workspace admin, by key or sign-in', async () => {
    const body = { kind: 'group', value: 'everyone', workspace_id: workspaceB, role: 'admin' };
    const member = await personIn('carol', ['team-a']);
    const workspaceAdmin = await personIn('dave', ['team-a-admins']);
    for (const session of [member, workspaceAdmin]) {
      const answer = await asPerson(t, session, 'POST', '/v2/sso/mappings', { body });
      assert.equal(answer.status, 403, JSON.stringify(answer.body));
      assert.equal((await asPerson(t, session, 'GET', '/v2/sso/mappings')).status, 403);
    }
    const memberKey = await client(t.app).post('/v2/api-keys', { name: 'member', role: 'member' });
    assert.equal((await client(t.app, memberKey.body.key).post('/v2/sso/mappings', body)).status, 403);
    assert.equal((await client(t.app).post('/v2/sso/mappings', body)).status, 403, 'a workspace admin key');
    const listed = await client(t.app, t.orgKey).get('/v2/sso/mappings');
    assert.ok(!listed.body.resources.some((m: { value: string }) => m.value === 'everyone'), 'nothing was made');

    const orgAdmin = await personIn('erin', ['slipway-admins']);
    const made = await asPerson(t, orgAdmin, 'POST', '/v2/sso/mappings', { body });
    assert.equal(made.status, 201, 'an organization-wide admin mapping makes an organization admin');
    assert.equal((await asPerson(t, orgAdmin, 'DELETE', `/v2/sso/mappings/${made.body.id}`)).status, 204);
    const twice = await client(t.app, t.orgKey).post('/v2/sso/mappings', {
      kind: 'group',
      value: 'team-a',
      workspace_id: t.workspaceId,
      role: 'admin',
    });
    assert.equal(twice.status, 409, 'one mapping per group and workspace');
    const unknown = await client(t.app, t.orgKey).post('/v2/sso/mappings', { ...body, workspace_id: t.organizationId });
    assert.equal(unknown.status, 400);
  });
});

describe('a session ends', () => {
  test('when it expires', async () => {
    // Ahead of the database's time, so a session dated by it rather than by the clock shows.
    clock.advance(3_600_000);
    const session = await personIn('frank', ['team-a']);
    assert.equal((await asPerson(t, session, 'GET', '/v2/deployments')).status, 200);
    const { expires_at: expiresAt } = await sessions()
      .selectFrom('sso_sessions')
      .select('expires_at')
      .where('email', '=', 'frank@example.test')
      .executeTakeFirstOrThrow();
    assert.ok(
      Math.abs(expiresAt.getTime() - clock.now().getTime() - t.config.sso!.sessionTtlMs) < 60_000,
      'the session lasts its lifetime from the clock’s time',
    );
    clock.advance(t.config.sso!.sessionTtlMs - 60_000);
    assert.equal((await asPerson(t, session, 'GET', '/v2/deployments')).status, 200, 'a minute before it expires');
    clock.advance(61_000);
    const refused = await asPerson(t, session, 'GET', '/v2/deployments');
    assert.equal(refused.status, 401);
    assert.match(refused.body.detail, /Sign in again/);
    assert.equal((await asPerson(t, session, 'GET', '/v2/sso/session')).body.session, null);
  });

  test('at logout, which only the dashboard’s own origin can ask for', async () => {
    const session = await personIn('grace', ['team-a']);
    const forged = await asPerson(t, session, 'POST', '/v2/sso/logout', { headers: { origin: 'http://evil.example' } });
    assert.equal(forged.status, 403);
    assert.equal((await asPerson(t, session, 'GET', '/v2/deployments')).status, 200, 'still signed in');
    const out = await asPerson(t, session, 'POST', '/v2/sso/logout');
    assert.equal(out.status, 204);
    assert.match(String(out.headers['set-cookie']), /slipway_session=;.*Max-Age=0/);
    assert.equal((await asPerson(t, session, 'GET', '/v2/deployments')).status, 401);
    const ended = await t.database.db
      .selectFrom('events')
      .select(['type', 'data'])
      .where('type', '=', 'sso_session.ended')
      .execute();
    assert.ok(ended.some((e) => (e.data as { email?: string }).email === 'grace@example.test'));
  });

  test('when an organization admin ends it, or deletes the mapping that let the person in', async () => {
    const session = await personIn('heidi', ['team-a']);
    const org = client(t.app, t.orgKey);
    const live = await org.get('/v2/sso/sessions');
    assert.equal(live.status, 200);
    const heidis = live.body.resources.find((s: { email: string }) => s.email === 'heidi@example.test');
    assert.ok(heidis, 'the admin sees the session');
    assert.ok(!JSON.stringify(live.body).includes(session), 'never its token');
    assert.equal((await org.delete(`/v2/sso/sessions/${heidis.id}`)).status, 204);
    assert.equal((await asPerson(t, session, 'GET', '/v2/deployments')).status, 401);

    const temporary = await org.post('/v2/sso/mappings', {
      kind: 'group',
      value: 'contractors',
      workspace_id: t.workspaceId,
      role: 'member',
    });
    const ivan = await personIn('ivan', ['contractors']);
    assert.equal((await asPerson(t, ivan, 'GET', '/v2/deployments')).status, 200);
    assert.equal((await org.delete(`/v2/sso/mappings/${temporary.body.id}`)).status, 204);
    const after = await asPerson(t, ivan, 'GET', '/v2/deployments');
    assert.equal(after.status, 401, 'the access goes with the mapping, at once');
  });
});

describe('changes made with the cookie', () => {
  test('come from the dashboard’s origin only: a cross-site POST with the cookie changes nothing', async () => {
    const session = await personIn('judy', ['team-a']);
    const body = { name: 'csrf-victim', source: 'internal_source' };
    for (const headers of [
      { origin: 'http://evil.example', 'sec-fetch-site': 'cross-site' },
      // An app on a sibling host name of the same site: SameSite=Lax would let the cookie through.
      { origin: 'http://app.127.0.0.1.nip.io', 'sec-fetch-site': 'same-site' },
      { origin: t.publicUrl, 'sec-fetch-site': 'same-site' },
      // A form or a client that sends no Origin.
      { origin: '', 'sec-fetch-site': '' },
    ]) {
      const sent = Object.fromEntries(Object.entries(headers).filter(([, v]) => v !== ''));
      const answer = await t.app.inject({
        method: 'POST',
        url: '/v2/deployments',
        headers: { cookie: `slipway_session=${session}`, 'content-type': 'application/json', ...sent },
        payload: JSON.stringify(body),
      });
      assert.equal(answer.statusCode, 403, `${JSON.stringify(sent)}: ${answer.body}`);
      assert.match(answer.json().detail, /dashboard's own pages/);
    }
    assert.equal((await client(t.app).get('/v2/deployments?name=csrf-victim')).body.resources.length, 0);
    const made = await asPerson(t, session, 'POST', '/v2/deployments', { body });
    assert.equal(made.status, 201, 'from the dashboard itself');
  });

  test('are audited under the person: who, what, where, and the request id', async () => {
    const session = await personIn('karl', ['team-a']);
    const made = await asPerson(t, session, 'POST', '/v2/deployments', {
      body: { name: 'karls-agent', source: 'internal_source' },
      headers: { 'x-request-id': 'karl-request-1' },
    });
    assert.equal(made.status, 201);
    const refused = await asPerson(t, session, 'POST', '/v2/api-keys', { body: { name: 'nope' } });
    assert.equal(refused.status, 403);
    const writes = await t.database.db
      .selectFrom('events')
      .selectAll()
      .where('type', '=', 'sso_session.write')
      .execute();
    const karls = writes.filter((e) => (e.data as { email?: string }).email === 'karl@example.test');
    assert.equal(karls.length, 1, 'one line for the change; the refused request changed nothing');
    const [line] = karls;
    assert.equal(line!.workspace_id, t.workspaceId);
    assert.equal(line!.subject_type, 'sso_session');
    assert.deepEqual(
      {
        ...line!.data,
        issuer: undefined,
        subject: undefined,
      },
      {
        issuer: undefined,
        subject: undefined,
        email: 'karl@example.test',
        name: 'karl',
        method: 'POST',
        operation: 'POST /v2/deployments',
        path: '/v2/deployments',
        status: 201,
        request_id: 'karl-request-1',
        workspace_id: t.workspaceId,
      },
    );
    assert.equal((line!.data as { subject: string }).subject, 'karl');
    assert.equal((line!.data as { issuer: string }).issuer, t.provider.issuer);
    const sessionRow = await sessions()
      .selectFrom('sso_sessions')
      .select('id')
      .where('email', '=', 'karl@example.test')
      .executeTakeFirstOrThrow();
    assert.equal(line!.subject_id, sessionRow.id);
  });

  test('a retry with the same Idempotency-Key gets the first answer and is not audited a second time', async () => {
    const session = await personIn('mona', ['team-a']);
    const request = {
      body: { name: 'monas-agent', source: 'internal_source' },
      headers: { 'idempotency-key': 'mona-retry-1' },
    };
    const first = await asPerson(t, session, 'POST', '/v2/deployments', request);
    assert.equal(first.status, 201, JSON.stringify(first.body));
    const retry = await asPerson(t, session, 'POST', '/v2/deployments', request);
    assert.equal(retry.status, 201);
    assert.equal(retry.headers['idempotent-replayed'], 'true');
    assert.equal(retry.body.id, first.body.id, 'the retry made nothing: it is the first answer');
    const writes = await t.database.db
      .selectFrom('events')
      .select('data')
      .where('type', '=', 'sso_session.write')
      .execute();
    const monas = writes.filter((e) => (e.data as { email?: string }).email === 'mona@example.test');
    assert.equal(monas.length, 1, 'one change, one audit line');
  });

  test('an API key is never mistaken for the cookie: a request with a key is the key’s, whatever cookie it carries', async () => {
    const session = await personIn('leo', ['team-a']);
    const answer = await t.app.inject({
      method: 'GET',
      url: '/v2/sso/mappings',
      headers: { cookie: `slipway_session=${session}`, 'x-api-key': t.orgKey },
    });
    assert.equal(answer.statusCode, 200, 'the organization key opens what the member person may not');
    const bad = await t.app.inject({
      method: 'GET',
      url: '/v2/deployments',
      headers: { cookie: `slipway_session=${session}`, 'x-api-key': 'slw_not_a_key_0000000000' },
    });
    assert.equal(bad.statusCode, 401, 'a wrong key is refused, not replaced by the cookie');
  });
});
