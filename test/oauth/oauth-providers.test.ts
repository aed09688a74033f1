import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { OidcServer } from '../fakes/oidc-server.ts';
import { client, newWorkspace } from '../support/harness.ts';
import {
  assertNoSecrets,
  otherOrganization,
  registerProvider,
  startIdp,
  startOAuthTestApp,
  type Api,
  type OAuthTestApp,
} from './oauth-test-app.ts';

let t: OAuthTestApp;
let idp: OidcServer;
let api: Api;

before(async () => {
  [t, idp] = await Promise.all([startOAuthTestApp(), startIdp()]);
  // Providers are the organization's: only an organization admin key changes them (docs/oauth.md).
  api = client(t.app, t.orgKey);
});
after(async () => {
  await t.close();
  await idp.close();
});

/** The interface's OAuth provider fields, exactly. */
const PROVIDER_FIELDS = [
  'auth_url',
  'client_id',
  'code_challenge_method',
  'created_at',
  'id',
  'is_dynamic_client',
  'mcp_server_url',
  'name',
  'organization_id',
  'provider_id',
  'provider_type',
  'token_endpoint_auth_method',
  'token_url',
  'updated_at',
  'uses_pkce',
];

test('a provider is registered, read by slug or id, and answers with exactly the interface fields, never the secret', async () => {
  const secret = idp.clients.confidential.client_secret!;
  const created = await registerProvider(api, idp, 'confidential', 'acme-idp', {
    provider_type: 'oidc',
    mcp_server_url: 'http://127.0.0.1:9/mcp',
  });
  assert.deepEqual(Object.keys(created).sort(), PROVIDER_FIELDS);
  assert.equal(created.provider_id, 'acme-idp');
  assert.equal(created.organization_id, t.organizationId);
  assert.equal(created.uses_pkce, true);
  assert.equal(created.code_challenge_method, 'S256');
  assert.equal(created.token_endpoint_auth_method, 'client_secret_post');
  assert.equal(created.is_dynamic_client, false);
  assert.equal(created.provider_type, 'oidc');
  assert.match(created.created_at, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);

  for (const ref of ['acme-idp', created.id, created.id.toUpperCase()]) {
    const res = await api.get(`/v2/auth/providers/${ref}`);
    assert.equal(res.status, 200, ref);
    assert.deepEqual(res.body, created);
  }
  const list = await api.get('/v2/auth/providers');
  assert.equal(list.status, 200);
  assert.deepEqual(
    list.body.resources.map((p: { id: string }) => p.id),
    [created.id],
  );
  assert.equal(list.body.offset, 1);

  // Encrypted at rest, and absent from every answer and log line.
  const row = await t.database.db
    .selectFrom('oauth_providers')
    .select('client_secret_encrypted')
    .where('id', '=', created.id)
    .executeTakeFirstOrThrow();
  assert.ok(row.client_secret_encrypted && !row.client_secret_encrypted.includes(secret));
  assert.equal(t.secretBox.open(row.client_secret_encrypted), secret);
  assertNoSecrets('responses', JSON.stringify([created, list.body]), [secret]);
  assertNoSecrets('logs', t.logs.join('\n'), [secret]);
});

test('PATCH updates by slug or id, defaults apply, the secret can change, and provider_id cannot', async () => {
  const created = await registerProvider(api, idp, 'public', 'public-idp', {
    client_secret: undefined,
    token_endpoint_auth_method: 'none',
    uses_pkce: undefined,
    code_challenge_method: undefined,
  });
  assert.equal(created.uses_pkce, true, 'uses_pkce defaults to true');
  assert.equal(created.code_challenge_method, 'S256');

  const byId = await api.patch(`/v2/auth/providers/${created.id}`, { name: 'Renamed', code_challenge_method: 'plain' });
  assert.equal(byId.status, 200, JSON.stringify(byId.body));
  assert.deepEqual(Object.keys(byId.body).sort(), PROVIDER_FIELDS);
  assert.equal(byId.body.name, 'Renamed');
  assert.equal(byId.body.uses_pkce, true);
  assert.equal(byId.body.code_challenge_method, 'plain');
  assert.ok(byId.body.updated_at >= created.updated_at);
  assert.equal(byId.body.created_at, created.created_at);

  const bySlug = await api.patch('/v2/auth/providers/public-idp', {
    client_id: 'new-client',
    client_secret: 'a-new-secret-value-123',
    token_endpoint_auth_method: 'client_secret_basic',
    provider_id: 'public-idp',
  });
  assert.equal(bySlug.status, 200, JSON.stringify(bySlug.body));
  assert.equal(bySlug.body.client_id, 'new-client');
  assert.equal(bySlug.body.token_endpoint_auth_method, 'client_secret_basic');
  assertNoSecrets('the PATCH response', JSON.stringify(bySlug.body), ['a-new-secret-value-123']);
  const row = await t.database.db
    .selectFrom('oauth_providers')
    .select('client_secret_encrypted')
    .where('id', '=', created.id)
    .executeTakeFirstOrThrow();
  assert.equal(t.secretBox.open(row.client_secret_encrypted!), 'a-new-secret-value-123');

  const renamed = await api.patch('/v2/auth/providers/public-idp', { provider_id: 'other-slug' });
  assert.equal(renamed.status, 400);
  assert.match(renamed.body.detail, /provider_id cannot be changed/);
  // Removing the secret of a confidential client would leave it unable to authenticate.
  const noSecret = await api.patch('/v2/auth/providers/public-idp', { client_secret: null });
  assert.equal(noSecret.status, 400);
  assert.match(noSecret.body.detail, /client_secret is required/);
  assert.equal(
    (await api.patch('/v2/auth/providers/public-idp', { client_secret: null, token_endpoint_auth_method: 'none' }))
      .status,
    200,
  );
});

test('PKCE is on by default, and a public client cannot go without it (RFC 9700)', async () => {
  const base = {
    name: 'PKCE',
    client_id: 'c',
    auth_url: 'https://idp.example.com/a',
    token_url: 'https://idp.example.com/t',
  };
  const confidential = await api.post('/v2/auth/providers', {
    ...base,
    provider_id: 'pkce-default',
    client_secret: 'a-secret-value',
  });
  assert.equal(confidential.status, 201, JSON.stringify(confidential.body));
  assert.equal(confidential.body.uses_pkce, true, 'uses_pkce defaults to true');
  // A confidential client may still turn it off, for a provider that cannot do PKCE.
  const optedOut = await api.post('/v2/auth/providers', {
    ...base,
    provider_id: 'pkce-off',
    client_secret: 'a-secret-value',
    uses_pkce: false,
  });
  assert.equal(optedOut.status, 201, JSON.stringify(optedOut.body));
  assert.equal(optedOut.body.uses_pkce, false);

  const publicWithout = await api.post('/v2/auth/providers', {
    ...base,
    provider_id: 'public-no-pkce',
    token_endpoint_auth_method: 'none',
    uses_pkce: false,
  });
  assert.equal(publicWithout.status, 400);
  assert.equal(publicWithout.body.code, 'invalid_request');
  assert.match(publicWithout.body.detail, /public client .*token_endpoint_auth_method none.* must use PKCE .*RFC 9700/);
  assert.equal((await api.get('/v2/auth/providers/public-no-pkce')).status, 404, 'nothing was stored');

  const publicDefault = await api.post('/v2/auth/providers', {
    ...base,
    provider_id: 'public-pkce',
    token_endpoint_auth_method: 'none',
  });
  assert.equal(publicDefault.status, 201, JSON.stringify(publicDefault.body));
  assert.equal(publicDefault.body.uses_pkce, true);

  // On patch, both ways in: turning PKCE off for a public client, and making a client without PKCE public.
  const offAgain = await api.patch('/v2/auth/providers/public-pkce', { uses_pkce: false });
  assert.equal(offAgain.status, 400);
  assert.match(offAgain.body.detail, /RFC 9700/);
  const madePublic = await api.patch('/v2/auth/providers/pkce-off', {
    token_endpoint_auth_method: 'none',
    client_secret: null,
  });
  assert.equal(madePublic.status, 400);
  assert.match(madePublic.body.detail, /RFC 9700/);
  assert.equal(
    (await api.get('/v2/auth/providers/pkce-off')).body.token_endpoint_auth_method,
    'client_secret_post',
    'the refused patch changed nothing',
  );
  const both = await api.patch('/v2/auth/providers/pkce-off', {
    token_endpoint_auth_method: 'none',
    client_secret: null,
    uses_pkce: true,
  });
  assert.equal(both.status, 200, JSON.stringify(both.body));
});

test('provider URLs must be https unless the service runs in insecure OAuth mode', async () => {
  const strict = await startOAuthTestApp({});
  try {
    const strictApi = client(strict.app, strict.orgKey);
    const res = await strictApi.post('/v2/auth/providers', {
      provider_id: 'plain-idp',
      name: 'Plain',
      client_id: 'c',
      client_secret: 's',
      auth_url: 'http://idp.example.com/auth',
      token_url: 'https://idp.example.com/token',
    });
    assert.equal(res.status, 400);
    assert.match(
      res.body.detail,
      /^auth_url must use https \(plain http is accepted only when the service runs with SLIPWAY_ALLOW_INSECURE_OAUTH=1\)$/,
    );
    const ok = await strictApi.post('/v2/auth/providers', {
      provider_id: 'plain-idp',
      name: 'TLS',
      client_id: 'c',
      client_secret: 's',
      auth_url: 'https://idp.example.com/auth',
      token_url: 'https://idp.example.com/token',
    });
    assert.equal(ok.status, 201);
    const patch = await strictApi.patch('/v2/auth/providers/plain-idp', { token_url: 'http://idp.example.com/token' });
    assert.equal(patch.status, 400);
    assert.match(patch.body.detail, /^token_url must use https/);
    const revocation = await strictApi.patch('/v2/auth/providers/plain-idp', {
      revocation_url: 'ftp://idp.example.com/revoke',
    });
    assert.equal(revocation.status, 400);
    assert.match(revocation.body.detail, /^revocation_url must be an https URL/);
  } finally {
    await strict.close();
  }
});

test('bad provider input is refused and changes nothing', async () => {
  const base = {
    provider_id: 'basic-idp',
    name: 'B',
    client_id: 'c',
    client_secret: 's',
    auth_url: 'https://idp.example.com/a',
    token_url: 'https://idp.example.com/t',
  };
  const cases: [Record<string, unknown>, number, RegExp | null][] = [
    [{ ...base, provider_id: 'Not A Slug' }, 422, null],
    [{ ...base, provider_id: '6f1c2d3e-0000-4000-8000-000000000000' }, 400, /not a UUID/],
    [{ ...base, auth_url: 'not a url' }, 400, /^auth_url is not a valid URL$/],
    [
      { ...base, client_secret: undefined },
      400,
      /client_secret is required for token_endpoint_auth_method client_secret_post/,
    ],
    [{ ...base, code_challenge_method: 'S512' }, 422, null],
    [{ ...base, token_endpoint_auth_method: 'private_key_jwt' }, 422, null],
    [{ name: 'missing fields' }, 422, null],
  ];
  for (const [body, status, detail] of cases) {
    const res = await api.post('/v2/auth/providers', body);
    assert.equal(res.status, status, JSON.stringify(body));
    if (detail) assert.match(res.body.detail, detail);
  }
  assert.equal((await api.get('/v2/auth/providers/basic-idp')).status, 404);
  assert.equal((await api.post('/v2/auth/providers', base)).status, 201);
  const twin = await api.post('/v2/auth/providers', base);
  assert.equal(twin.status, 409);
  assert.equal(twin.body.detail, "An OAuth provider with provider_id 'basic-idp' already exists in this organization.");
});

test('unknown providers are 404 with the provider named, and delete removes one', async () => {
  for (const [method, body] of [
    ['GET', undefined],
    ['PATCH', { name: 'x' }],
    ['DELETE', undefined],
  ] as const) {
    const res = await api.call(method, '/v2/auth/providers/no-such-idp', body);
    assert.equal(res.status, 404, method);
    assert.equal(res.body.detail, 'OAuth provider ID no-such-idp not found.');
  }
  const created = await registerProvider(api, idp, 'confidentialBasic', 'other-idp');
  const deleted = await api.delete(`/v2/auth/providers/${created.id}`);
  assert.equal(deleted.status, 204);
  assert.equal((await api.get('/v2/auth/providers/other-idp')).status, 404);
});

test('providers belong to the organization: another one sees none of them and may reuse the slug', async () => {
  const other = await otherOrganization(t);
  const otherApi = client(t.app, other.key);
  const mine = (await api.get('/v2/auth/providers/acme-idp')).body;
  for (const ref of ['acme-idp', mine.id]) {
    assert.equal((await otherApi.get(`/v2/auth/providers/${ref}`)).status, 404);
    assert.equal((await otherApi.patch(`/v2/auth/providers/${ref}`, { name: 'taken over' })).status, 404);
    assert.equal((await otherApi.delete(`/v2/auth/providers/${ref}`)).status, 404);
  }
  assert.deepEqual((await otherApi.get('/v2/auth/providers')).body.resources, []);
  const theirs = await registerProvider(otherApi, idp, 'confidential', 'acme-idp');
  assert.equal(theirs.organization_id, other.organizationId);
  assert.equal((await api.get('/v2/auth/providers/acme-idp')).body.name, mine.name);

  // Workspaces of one organization share its providers.
  const workspace = await newWorkspace(t, 'second');
  const fromSecond = await workspace.api.get('/v2/auth/providers/acme-idp');
  assert.equal(fromSecond.body.id, mine.id);
});

test('only organization admin keys change providers; any key reads them', async () => {
  const workspaceAdmin = client(t.app);
  const created = await workspaceAdmin.post('/v2/api-keys', { name: 'member', role: 'member' });
  assert.equal(created.status, 201);
  const member = client(t.app, created.body.key);
  for (const someone of [member, workspaceAdmin]) {
    assert.equal((await someone.get('/v2/auth/providers/acme-idp')).status, 200);
    assert.equal((await someone.patch('/v2/auth/providers/acme-idp', { name: 'x' })).status, 403);
    assert.equal((await someone.delete('/v2/auth/providers/acme-idp')).status, 403);
  }
  assert.equal((await client(t.app, null).get('/v2/auth/providers')).status, 401);
});

test('the OpenAPI document describes the auth endpoints', async () => {
  const res = await client(t.app, null).get('/openapi.json');
  assert.equal(res.status, 200);
  for (const path of [
    '/v2/auth/providers/{provider_id}',
    '/v2/auth/agents/{agent_id}/connections',
    '/v2/auth/wait/{auth_id}',
    '/v2/auth/agents/{agent_id}/connections/{connection_id}/token',
    '/v2/deployments/{deployment_id}/agent-credentials',
  ]) {
    assert.ok(res.body.paths[path], path);
  }
  assert.ok(res.body.paths['/v2/auth/providers/{provider_id}'].patch);
});
