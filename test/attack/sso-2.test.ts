/**
 * Single sign-on attacked by another organization of the same service. Every organization shares the
 * service's one identity provider, and a mapping names a group of its groups claim or an e-mail domain,
 * strings any organization admin may type. An organization admin who maps another organization's group
 * (or domain) must not capture that organization's people: they must not be signed in to the
 * attacker's organization (where what they do, the secrets they paste, is the attacker's to read).
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { newCredential } from '../../src/auth/credentials.ts';
import { createApiKey, createOrganization, createWorkspace } from '../../src/store/tenancy.ts';
import { client } from '../helpers.ts';
import { asPerson, createSsoTestApp, signIn, type SsoTestApp } from '../sso/sso-harness.ts';

let t: SsoTestApp;
/** The victim organization: made after the first-start one (the attacker's), so it is the newer. */
let victim: { workspaceId: string; adminKey: string };

before(async () => {
  t = await createSsoTestApp();
  const { db } = t.database;
  const organization = await createOrganization(db, 'victim-corp');
  const workspace = await createWorkspace(db, organization.id, 'victim-team');
  const { value: adminKey, hash: adminKeyHash, prefix: adminKeyPrefix } = newCredential('apiKey');
  await createApiKey(db, {
    organizationId: organization.id,
    workspaceId: null,
    name: 'victim org admin',
    role: 'admin',
    hash: adminKeyHash,
    prefix: adminKeyPrefix,
  });
  victim = { workspaceId: workspace.id, adminKey };
  const mapped = await client(t.app, adminKey).post('/v2/sso/mappings', {
    kind: 'group',
    value: 'victim-engineers',
    workspace_id: workspace.id,
    role: 'admin',
  });
  assert.equal(mapped.status, 201, JSON.stringify(mapped.body));
});
after(() => t?.close());

test("an organization that maps another organization's group does not sign its people in to itself", async () => {
  t.provider.accounts.set('victoria', { groups: ['victim-engineers'] });
  // The honest part: the victim's own mapping signs her in to her organization.
  const before = await signIn(t, 'victoria');
  assert.equal(before.status, 200, before.page);
  const own = await asPerson(t, before.session!, 'GET', '/v2/deployments', {
    headers: { 'x-tenant-id': victim.workspaceId },
  });
  assert.equal(own.status, 200, JSON.stringify(own.body));

  // The attacker, an admin of the older organization, maps the victim's group into a workspace of its own.
  const squat = await client(t.app, t.orgKey).post('/v2/sso/mappings', {
    kind: 'group',
    value: 'victim-engineers',
    workspace_id: t.workspaceId,
    role: 'member',
  });
  assert.equal(squat.status, 201, JSON.stringify(squat.body));

  const after = await signIn(t, 'victoria');
  if (after.session) {
    const inAttackers = await asPerson(t, after.session, 'GET', '/v2/deployments', {
      headers: { 'x-tenant-id': t.workspaceId },
    });
    assert.notEqual(inAttackers.status, 200, "the victim was signed in to the attacker's organization");
  }
  // Signed in to neither, told why; the session she had goes on in her own organization.
  assert.equal(after.status, 403, after.page);
  assert.equal(after.session, null);
  assert.match(after.page, /more than one organization/);
  const still = await asPerson(t, before.session!, 'GET', '/v2/deployments', {
    headers: { 'x-tenant-id': victim.workspaceId },
  });
  assert.equal(still.status, 200, JSON.stringify(still.body));
});
