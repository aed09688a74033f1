/**
 * Single sign-on settings (src/config.ts): off without an issuer, and every mistake named by its
 * variable at start rather than found at the first sign-in.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigError, loadConfig } from '../../src/config.ts';

const load = (env: Record<string, string>) => loadConfig({ SLIPWAY_DATA_DIR: '/tmp/x', ...env }, '/tmp');

const failsWith = (env: Record<string, string>, variable: string, message: RegExp) =>
  assert.throws(
    () => load(env),
    (error: unknown) => error instanceof ConfigError && error.variable === variable && message.test(error.message),
  );

test('off without an issuer; on with defaults that need nothing more than the client', () => {
  assert.equal(load({}).sso, null);
  const sso = load({ SLIPWAY_SSO_ISSUER: 'https://idp.example.com/realms/x', SLIPWAY_SSO_CLIENT_ID: 'slipway' }).sso;
  assert.deepEqual(sso, {
    issuer: 'https://idp.example.com/realms/x',
    clientId: 'slipway',
    clientSecret: null,
    scopes: ['openid', 'email', 'profile'],
    groupsClaim: 'groups',
    sessionTtlMs: 12 * 3_600_000,
    providerName: 'single sign-on',
  });
  const custom = load({
    SLIPWAY_SSO_ISSUER: 'https://idp.example.com',
    SLIPWAY_SSO_CLIENT_ID: 'slipway',
    SLIPWAY_SSO_SCOPES: 'email groups',
    SLIPWAY_SSO_SESSION_HOURS: '2',
  }).sso;
  assert.deepEqual(custom?.scopes, ['openid', 'email', 'groups'], 'openid always, first');
  assert.equal(custom?.sessionTtlMs, 2 * 3_600_000);
});

test('mistakes are named by their variable', () => {
  failsWith({ SLIPWAY_SSO_CLIENT_ID: 'slipway' }, 'SLIPWAY_SSO_ISSUER', /required with SLIPWAY_SSO_CLIENT_ID/);
  failsWith({ SLIPWAY_SSO_ISSUER: 'https://idp.example.com' }, 'SLIPWAY_SSO_CLIENT_ID', /required/);
  failsWith({ SLIPWAY_SSO_ISSUER: 'not a url', SLIPWAY_SSO_CLIENT_ID: 'x' }, 'SLIPWAY_SSO_ISSUER', /issuer URL/);
  failsWith(
    { SLIPWAY_SSO_ISSUER: 'http://idp.example.com', SLIPWAY_SSO_CLIENT_ID: 'x' },
    'SLIPWAY_SSO_ISSUER',
    /https/,
  );
  assert.equal(
    load({ SLIPWAY_SSO_ISSUER: 'http://127.0.0.1:9', SLIPWAY_SSO_CLIENT_ID: 'x', SLIPWAY_ALLOW_INSECURE_OAUTH: '1' })
      .sso?.issuer,
    'http://127.0.0.1:9',
    'plain http in development mode',
  );
  const base = { SLIPWAY_SSO_ISSUER: 'https://idp.example.com', SLIPWAY_SSO_CLIENT_ID: 'x' };
  failsWith({ ...base, SLIPWAY_SSO_SCOPES: 'openid "bad"' }, 'SLIPWAY_SSO_SCOPES', /not a valid scope/);
  failsWith({ ...base, SLIPWAY_SSO_GROUPS_CLAIM: 'groups claim' }, 'SLIPWAY_SSO_GROUPS_CLAIM', /claim name/);
  failsWith({ ...base, SLIPWAY_SSO_SESSION_HOURS: '0' }, 'SLIPWAY_SSO_SESSION_HOURS', /between 1 and 720/);
});
