/**
 * Who chooses whether a LangGraph deployment's /mcp and /a2a need a protocol credential
 * (docs/langgraph.md, "Who may call MCP and A2A"): the deployment's own SLIPWAY_PROTOCOLS_AUTH, unless
 * the operator requires it of every deployment (SLIPWAY_APPS_PROTOCOLS_AUTH=credential), which a
 * deployment's env or secrets cannot undo.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigError, loadConfig } from '../../src/config.ts';
import { runEnvironment, type PlatformVariables } from '../../src/dataplane/app-environment.ts';

const PLATFORM: PlatformVariables = {
  deploymentId: 'd',
  revisionId: 'r',
  endpoint: null,
  tracingProjectId: 't',
  tracingProjectName: 'n',
  apiUrl: 'http://10.0.2.2:8124',
  publicUrl: 'https://slipway.example.com',
  agentCredential: 'slwa_x',
  databaseUrl: null,
  listenHost: '127.0.0.1',
};
const PATHS = { src: '/src', home: '/home' };

test("the deployment's own setting, unless the operator requires a credential", () => {
  const own = runEnvironment(PATHS, { SLIPWAY_PROTOCOLS_AUTH: 'credential' }, {}, PLATFORM);
  assert.equal(own.SLIPWAY_PROTOCOLS_AUTH, 'credential');
  assert.equal(runEnvironment(PATHS, {}, {}, PLATFORM).SLIPWAY_PROTOCOLS_AUTH, undefined);
  const forced = runEnvironment(
    PATHS,
    { SLIPWAY_PROTOCOLS_AUTH: 'open' },
    { SLIPWAY_PROTOCOLS_AUTH: 'open' },
    { ...PLATFORM, protocolsAuth: 'credential' },
  );
  assert.equal(forced.SLIPWAY_PROTOCOLS_AUTH, 'credential');
});

test("the protected-resource metadata's authority: the service's public URL, which the app's env cannot change", () => {
  const env = runEnvironment(PATHS, { SLIPWAY_PUBLIC_URL: 'https://evil.example' }, {}, PLATFORM);
  assert.equal(env.SLIPWAY_PUBLIC_URL, 'https://slipway.example.com');
  assert.equal(env.SLIPWAY_API_URL, 'http://10.0.2.2:8124', 'the address the app itself calls stays its own');
});

test('SLIPWAY_APPS_PROTOCOLS_AUTH: deployment by default, credential, and nothing else', () => {
  const base = { SLIPWAY_DATA_DIR: '/tmp/slipway-protocols-auth-setting' };
  assert.equal(loadConfig(base).appsProtocolsAuth, 'deployment');
  assert.equal(loadConfig({ ...base, SLIPWAY_APPS_PROTOCOLS_AUTH: 'credential' }).appsProtocolsAuth, 'credential');
  assert.throws(
    () => loadConfig({ ...base, SLIPWAY_APPS_PROTOCOLS_AUTH: 'closed' }),
    (error: unknown) => error instanceof ConfigError && /deployment or credential/.test(error.message),
  );
});

test("SLIPWAY_ENDPOINT: the endpoint the instances serve, empty for the deployment's own URL, which the app's env cannot name", () => {
  const env = { SLIPWAY_ENDPOINT: 'pr-1' };
  assert.equal(runEnvironment(PATHS, env, {}, PLATFORM).SLIPWAY_ENDPOINT, '');
  assert.equal(runEnvironment(PATHS, env, {}, { ...PLATFORM, endpoint: 'staging' }).SLIPWAY_ENDPOINT, 'staging');
});
