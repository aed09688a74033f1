/**
 * Single sign-on attacked by a person the organization trusts a little: an organization-wide member
 * mapping (everyone in the company may look) plus admin of one workspace. They must be an admin of that
 * workspace and a member everywhere else: never an organization admin.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { client } from '../helpers.ts';
import { asPerson, createSsoTestApp, signIn, type SsoTestApp } from '../sso/sso-harness.ts';

let t: SsoTestApp;
let workspaceB: string;

before(async () => {
  t = await createSsoTestApp();
  const org = client(t.app, t.orgKey);
  const b = await org.post('/v2/workspaces', { name: 'team-b' });
  assert.equal(b.status, 201);
  workspaceB = b.body.id;
  for (const [group, workspace, role] of [
    ['all-staff', null, 'member'],
    ['team-a-admins', t.workspaceId, 'admin'],
  ] as const) {
    const mapped = await org.post('/v2/sso/mappings', { kind: 'group', value: group, workspace_id: workspace, role });
    assert.equal(mapped.status, 201, JSON.stringify(mapped.body));
  }
});
after(() => t?.close());

/**
 * Failed before the fix: src/sso/session-credentials.ts made every session with an organization-wide
 * mapping look like an organization key (`keyWorkspaceId: null`) while its role was the strongest of that
 * mapping and the workspace's, so organization member + workspace admin passed the organization-admin
 * gate (src/http/authenticate.ts): it made organization admin mappings and keys.
 */
test('an organization-wide member who is admin of one workspace is not an organization admin', async () => {
  t.provider.accounts.set('mallory', { groups: ['all-staff', 'team-a-admins'] });
  const done = await signIn(t, 'mallory');
  assert.equal(done.status, 200, done.page);
  const session = done.session!;
  const inA = { 'x-tenant-id': t.workspaceId };
  /** Each operation that was not refused (403), with its answer. */
  const problems: string[] = [];
  const mustRefuse = (what: string, answer: { status: number; body: unknown }) => {
    if (answer.status !== 403) problems.push(`${what}: ${answer.status} ${JSON.stringify(answer.body).slice(0, 160)}`);
  };

  // Organization admin operations, asked from the workspace where the person is admin.
  const mapping = await asPerson(t, session, 'POST', '/v2/sso/mappings', {
    body: { kind: 'group', value: 'all-staff-2', workspace_id: null, role: 'admin' },
    headers: inA,
  });
  mustRefuse('an organization admin mapping', mapping);
  const orgKey = await asPerson(t, session, 'POST', '/v2/api-keys', {
    body: { name: 'org-wide', workspace_id: null, role: 'admin' },
    headers: inA,
  });
  mustRefuse('an organization admin key', orgKey);
  const listed = await asPerson(t, session, 'GET', '/v2/sso/sessions', { headers: inA });
  mustRefuse('listing the organization sessions', listed);

  // In workspace B the person is a member only.
  const keyInB = await asPerson(t, session, 'POST', '/v2/api-keys', {
    body: { name: 'in-b' },
    headers: { 'x-tenant-id': workspaceB },
  });
  mustRefuse('a key in workspace B', keyInB);
  assert.deepEqual(problems, [], 'each of these must be refused (403)');
  const mappings = await client(t.app, t.orgKey).get('/v2/sso/mappings');
  assert.ok(!mappings.body.resources.some((m: { value: string }) => m.value === 'all-staff-2'));
});

/**
 * Failed before the fix: POST /v2/sso/login needs no credential and stored a pending sign-in; past
 * 10,000 of them (kept 10 minutes) every start was 503, so one anonymous client sending 17 requests a
 * second kept everybody out of the dashboard. A sign-in under way now lives in its sealed state cookie.
 */
test('an anonymous client starting sign-ins in bulk does not keep people from signing in', async () => {
  const batch = 50;
  for (let sent = 0; sent < 10_000; sent += batch) {
    await Promise.all(
      Array.from({ length: batch }, () =>
        t.app.inject({
          method: 'POST',
          url: '/v2/sso/login',
          headers: { 'content-type': 'application/json' },
          payload: '{}',
          remoteAddress: '203.0.113.9',
        }),
      ),
    );
  }
  t.provider.accounts.set('oscar', { groups: ['team-a-admins'] });
  const done = await signIn(t, 'oscar').catch((error: unknown) => ({ status: 0, page: String(error) }));
  assert.equal(done.status, 200, `an honest sign-in after the flood: ${done.page.slice(0, 300)}`);
});
