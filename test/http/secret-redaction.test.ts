/**
 * Secret values never come back in a 422: a deployment secret `value` or an OAuth provider
 * `client_secret` that fails validation is not echoed in `input`, nor is any object holding one, and no
 * log line carries it. The mechanism is the schema: a field marked `writeOnly: true` is a secret, so a
 * new secret field is covered by marking it (the last tests use a schema of their own).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import Fastify, { type FastifyInstance } from 'fastify';
import { registerErrorHandler } from '../../src/http/error-handler.ts';
import { registerJsonBodyParser } from '../../src/http/json-body.ts';
import { createValidatorCompiler } from '../../src/http/validation.ts';
import { DeferredCompiles } from '../../src/http/schema-cache.ts';
import { client, type Response } from '../support/harness.ts';
import { startOAuthTestApp, type Api, type OAuthTestApp } from '../oauth/oauth-test-app.ts';

let t: OAuthTestApp;
let api: Api;

before(async () => {
  t = await startOAuthTestApp();
  api = client(t.app);
});
after(() => t.close());

const MISSING = '00000000-0000-4000-8000-000000000000';
/** A value that must never be seen again once sent as a secret. */
const SECRET = 'sk-live-9f8e7d6c5b4a-do-not-echo';
/** A secret given as a number (a type error) must not be echoed either. */
const NUMERIC_SECRET = 987_654_321_987;

/** A 422 whose items point at `loc`, with the secret nowhere in the answer. */
function assertRefusedWithoutSecret(res: Response, loc: (string | number)[], label: string): void {
  const text = JSON.stringify(res.body);
  assert.equal(res.status, 422, `${label}: ${text.slice(0, 300)}`);
  assert.equal(res.body.code, 'validation_failed', label);
  const found = res.body.detail.some((item: { loc: unknown[] }) => loc.every((part, i) => item.loc[i] === part));
  assert.ok(
    found,
    `${label}: some loc starts with ${JSON.stringify(loc)}, got ${JSON.stringify(res.body.detail.map((i: { loc: unknown }) => i.loc))}`,
  );
  for (const secret of [SECRET, String(NUMERIC_SECRET)])
    assert.ok(!text.includes(secret), `${label}: the answer echoes the secret: ${text.slice(0, 400)}`);
}

function assertLogsClean(): void {
  const logs = t.logs.join('\n');
  for (const secret of [SECRET, String(NUMERIC_SECRET)])
    assert.ok(!logs.includes(secret), 'a log line carries the secret');
}

const deployment = {
  name: 'secretive',
  source: 'internal_container',
  source_revision_config: { image_uri: 'reg.example.com/agent:1' },
};

/** Bodies whose secrets are wrong in every way a schema notices, with where the 422 must point. */
function badSecrets(): { label: string; secrets: unknown; loc: (string | number)[] }[] {
  return [
    {
      label: 'a value over the length limit',
      secrets: [{ name: 'TOKEN', value: SECRET + 'x'.repeat(70_000) }],
      loc: ['body', 'secrets', 0, 'value'],
    },
    {
      label: 'a value holding NUL',
      secrets: [{ name: 'TOKEN', value: `${SECRET}\u0000` }],
      loc: ['body', 'secrets', 0, 'value'],
    },
    {
      label: 'a value of the wrong type',
      secrets: [{ name: 'TOKEN', value: NUMERIC_SECRET }],
      loc: ['body', 'secrets', 0, 'value'],
    },
    { label: 'a value in a list', secrets: [{ name: 'TOKEN', value: [SECRET] }], loc: ['body', 'secrets', 0, 'value'] },
    { label: 'secrets as an object', secrets: { TOKEN: SECRET }, loc: ['body', 'secrets'] },
    { label: 'a secret item that is a string', secrets: [SECRET], loc: ['body', 'secrets', 0] },
    {
      label: 'a secret item without a name',
      secrets: [{ value: SECRET, extra: 1 }],
      loc: ['body', 'secrets', 0, 'name'],
    },
  ];
}

describe('deployment secrets', () => {
  test('POST /v2/deployments never echoes a secret value in a 422', async () => {
    for (const { label, secrets, loc } of badSecrets()) {
      assertRefusedWithoutSecret(await api.post('/v2/deployments', { ...deployment, secrets }), loc, `POST ${label}`);
    }
    // A body that is not an object at all holds the secret too.
    assertRefusedWithoutSecret(
      await api.post('/v2/deployments', [{ ...deployment, secrets: [{ name: 'TOKEN', value: SECRET }] }]),
      ['body'],
      'POST a list body',
    );
    // Errors elsewhere in a body that holds a secret leave the secret out as well.
    assertRefusedWithoutSecret(
      await api.post('/v2/deployments', { ...deployment, name: 42, secrets: [{ name: 'TOKEN', value: SECRET }] }),
      ['body', 'name'],
      'POST a bad name',
    );
    assertLogsClean();
  });

  test('PATCH /v2/deployments/{id} never echoes a secret value in a 422', async () => {
    for (const { label, secrets, loc } of badSecrets()) {
      assertRefusedWithoutSecret(await api.patch(`/v2/deployments/${MISSING}`, { secrets }), loc, `PATCH ${label}`);
    }
    assertLogsClean();
  });

  test('what is not a secret is still echoed, so the 422 stays useful', async () => {
    const res = await api.post('/v2/deployments', { ...deployment, secrets: [{ name: '1 bad name', value: SECRET }] });
    assertRefusedWithoutSecret(res, ['body', 'secrets', 0, 'name'], 'a bad secret name');
    const item = res.body.detail.find((i: { loc: unknown[] }) => i.loc.join('.') === 'body.secrets.0.name');
    assert.equal(item.input, '1 bad name', 'the name of a secret is not secret');
    const image = await api.post('/v2/deployments', {
      ...deployment,
      source_revision_config: { image_uri: 'has space' },
    });
    assert.equal(image.status, 422);
    assert.equal(image.body.detail[0].input, 'has space');
  });
});

describe('OAuth provider client_secret', () => {
  // Providers are changed with an organization admin key only (docs/oauth.md).
  const orgAdmin = () => client(t.app, t.orgKey);
  const provider = {
    provider_id: 'leaky-idp',
    name: 'Leaky',
    client_id: 'client',
    auth_url: 'https://idp.example.com/auth',
    token_url: 'https://idp.example.com/token',
  };
  const bad = [
    { label: 'too long', client_secret: SECRET + 'x'.repeat(5000) },
    { label: 'holding NUL', client_secret: `${SECRET}\u0000` },
    { label: 'of the wrong type', client_secret: NUMERIC_SECRET },
    { label: 'in an object', client_secret: { value: SECRET } },
  ];

  test('POST /v2/auth/providers never echoes client_secret in a 422', async () => {
    for (const { label, client_secret } of bad) {
      assertRefusedWithoutSecret(
        await orgAdmin().post('/v2/auth/providers', { ...provider, client_secret }),
        ['body', 'client_secret'],
        `POST ${label}`,
      );
    }
    assertRefusedWithoutSecret(
      await orgAdmin().post('/v2/auth/providers', [{ ...provider, client_secret: SECRET }]),
      ['body'],
      'POST a list body',
    );
    assertLogsClean();
  });

  test('PATCH /v2/auth/providers/{provider_id} never echoes client_secret in a 422', async () => {
    for (const { label, client_secret } of bad) {
      assertRefusedWithoutSecret(
        await orgAdmin().patch('/v2/auth/providers/leaky-idp', { client_secret }),
        ['body', 'client_secret'],
        `PATCH ${label}`,
      );
    }
    assertLogsClean();
  });
});

describe('a field marked writeOnly', () => {
  let app: FastifyInstance;
  before(async () => {
    app = Fastify();
    app.setValidatorCompiler(createValidatorCompiler(new DeferredCompiles()));
    registerJsonBodyParser(app);
    registerErrorHandler(app);
    const pin = { type: 'string', pattern: '^[0-9]{4}$', writeOnly: true };
    app.post(
      '/vault',
      {
        schema: {
          querystring: {
            type: 'object',
            properties: { token: { type: 'string', maxLength: 4, writeOnly: true }, page: { type: 'integer' } },
          },
          body: {
            type: 'object',
            properties: {
              keys: {
                type: ['array', 'null'],
                items: {
                  type: 'object',
                  properties: { id: { type: 'string' }, key: { type: 'string', maxLength: 4, writeOnly: true } },
                },
              },
              vault: { type: 'object', additionalProperties: { type: 'string', maxLength: 4, writeOnly: true } },
              nested: { anyOf: [{ type: 'object', properties: { pin } }, { type: 'null' }] },
              whole: { type: 'object', writeOnly: true, properties: { a: { type: 'integer' } } },
              plain: { type: 'string', maxLength: 4 },
            },
          },
        },
      },
      async () => ({ ok: true }),
    );
    await app.ready();
  });
  after(() => app.close());

  const call = async (body: unknown, query = '') => {
    const res = await app.inject({
      method: 'POST',
      url: `/vault${query}`,
      headers: { 'content-type': 'application/json' },
      payload: JSON.stringify(body),
    });
    return { status: res.statusCode, body: JSON.parse(res.body), headers: res.headers } as Response;
  };

  test('is never echoed, wherever it sits in the schema', async () => {
    const cases: { label: string; body: unknown; query?: string; loc: (string | number)[] }[] = [
      { label: 'in a list item', body: { keys: [{ id: 'a', key: SECRET }] }, loc: ['body', 'keys', 0, 'key'] },
      { label: 'a list item holding one', body: { keys: [[SECRET]] }, loc: ['body', 'keys', 0] },
      { label: 'the list holding them', body: { keys: SECRET }, loc: ['body', 'keys'] },
      { label: 'in a map', body: { vault: { db: SECRET } }, loc: ['body', 'vault', 'db'] },
      { label: 'a map holding them', body: { vault: [SECRET] }, loc: ['body', 'vault'] },
      { label: 'in a union branch', body: { nested: { pin: SECRET } }, loc: ['body', 'nested'] },
      { label: 'a whole secret object', body: { whole: { a: SECRET } }, loc: ['body', 'whole', 'a'] },
      { label: 'in the query', body: {}, query: `?token=${SECRET}`, loc: ['query', 'token'] },
    ];
    for (const c of cases) assertRefusedWithoutSecret(await call(c.body, c.query), c.loc, c.label);
  });

  test('leaves other fields echoed', async () => {
    const inputs = async (body: unknown, query = '') => {
      const res = await call(body, query);
      assert.equal(res.status, 422);
      return Object.fromEntries(
        res.body.detail.map((i: { loc: unknown[]; input: unknown }) => [i.loc.join('.'), i.input]),
      );
    };
    assert.deepEqual(await inputs({ plain: 'too long', keys: [{ id: 7, key: '1234' }] }), {
      'body.plain': 'too long',
      'body.keys.0.id': 7,
    });
    assert.deepEqual(await inputs({}, '?page=x'), { 'query.page': 'x' });
  });
});
