/**
 * The URLs a user is given for a deployed app, and how the built-in edge reads a slug back from a request;
 * and the apps settings of the configuration (their own port and origin, TLS, the proxy in use).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigError, loadConfig } from '../../src/config.ts';
import { appUrl } from '../../src/dataplane/app-edge.ts';
import { appSlug, slugFromHost } from '../../src/dataplane/app-urls.ts';

const ID = '0B9E41C7-5d2a-4f1e-9c3b-7a8e6d5f4c21';

test('the slug is the name plus the first 8 hex digits of the id', () => {
  assert.equal(appSlug({ name: 'support-agent', id: ID }), 'support-agent-0b9e41c7');
  // Same name in two workspaces: two slugs.
  assert.notEqual(
    appSlug({ name: 'support-agent', id: ID }),
    appSlug({ name: 'support-agent', id: '1c2d3e4f-0000-4000-8000-000000000000' }),
  );
});

test('a long name is cut so the slug stays one DNS label (63 characters at most)', () => {
  const slug = appSlug({ name: 'a'.repeat(63), id: ID });
  assert.equal(slug.length, 63);
  assert.equal(slug, `${'a'.repeat(54)}-0b9e41c7`);
  // The cut never leaves a dash before the id part's dash.
  const dashed = appSlug({ name: `${'b'.repeat(53)}-cdef`, id: ID });
  assert.equal(dashed, `${'b'.repeat(53)}-0b9e41c7`);
  assert.ok(dashed.length <= 63);
});

test('a name that is not a DNS label is folded into one', () => {
  assert.equal(appSlug({ name: 'My Agent_v2', id: ID }), 'my-agent-v2-0b9e41c7');
  assert.equal(appSlug({ name: '--', id: ID }), 'app-0b9e41c7');
});

test("an app's URL is its slug on the edge's public URL: scheme and port kept, default ports left out", () => {
  const slug = appSlug({ name: 'support-agent', id: ID });
  assert.equal(appUrl({ publicUrl: 'http://localhost:8125' }, slug), 'http://support-agent-0b9e41c7.localhost:8125');
  assert.equal(
    appUrl({ publicUrl: 'https://apps.example.com' }, slug),
    'https://support-agent-0b9e41c7.apps.example.com',
  );
});

test('apps get a port of their own (PORT + 1 by default), never the API port', () => {
  const base = { SLIPWAY_DATA_DIR: '/tmp/x' };
  assert.equal(loadConfig({ ...base }).appsPort, 8125);
  assert.equal(loadConfig({ ...base, PORT: '9000' }).appsPort, 9001);
  assert.equal(loadConfig({ ...base, PORT: '0' }).appsPort, 0);
  assert.equal(loadConfig({ ...base, SLIPWAY_APPS_PORT: '443' }).appsPort, 443);
  assert.throws(
    () => loadConfig({ ...base, PORT: '9000', SLIPWAY_APPS_PORT: '9000' }),
    /SLIPWAY_APPS_PORT: must differ/,
  );
  assert.equal(loadConfig({ ...base, HOST: '0.0.0.0' }).appsHost, '0.0.0.0');
  assert.equal(loadConfig({ ...base, SLIPWAY_APPS_HOST: '::' }).appsHost, '::');
});

test('the apps public URL must name the apps domain, and nothing but scheme, host and port', () => {
  const base = { SLIPWAY_DATA_DIR: '/tmp/x', SLIPWAY_APPS_DOMAIN: 'apps.example.com' };
  assert.equal(
    loadConfig({ ...base, SLIPWAY_APPS_PUBLIC_URL: 'https://apps.example.com/' }).appsPublicUrl,
    'https://apps.example.com',
  );
  assert.equal(loadConfig(base).appsPublicUrl, null);
  for (const bad of ['https://other.example.com', 'ftp://apps.example.com', 'https://apps.example.com/x', 'nonsense']) {
    assert.throws(
      () => loadConfig({ ...base, SLIPWAY_APPS_PUBLIC_URL: bad }),
      (error: unknown) => error instanceof ConfigError && error.variable === 'SLIPWAY_APPS_PUBLIC_URL',
      bad,
    );
  }
});

test('TLS for apps needs both the certificate and the key; the edge proxy is auto, haproxy or builtin', () => {
  const base = { SLIPWAY_DATA_DIR: '/tmp/x' };
  assert.deepEqual(loadConfig({ ...base, SLIPWAY_APPS_TLS_CERT: '/c.pem', SLIPWAY_APPS_TLS_KEY: '/k.pem' }).appsTls, {
    certFile: '/c.pem',
    keyFile: '/k.pem',
  });
  assert.throws(() => loadConfig({ ...base, SLIPWAY_APPS_TLS_CERT: '/c.pem' }), /SLIPWAY_APPS_TLS_KEY/);
  assert.throws(() => loadConfig({ ...base, SLIPWAY_APPS_TLS_KEY: '/k.pem' }), /SLIPWAY_APPS_TLS_CERT/);
  assert.equal(loadConfig(base).edgeProxy, 'auto');
  assert.equal(loadConfig({ ...base, SLIPWAY_EDGE_PROXY: 'HAProxy' }).edgeProxy, 'haproxy');
  assert.throws(() => loadConfig({ ...base, SLIPWAY_EDGE_PROXY: 'nginx' }), /SLIPWAY_EDGE_PROXY/);
});

test('slugFromHost reads <slug>.<appsDomain>, with any port, letter case or trailing dot', () => {
  assert.equal(slugFromHost('support-agent-0b9e41c7.localhost:8124', 'localhost'), 'support-agent-0b9e41c7');
  assert.equal(slugFromHost('Support-Agent-0B9E41C7.Apps.Example.com.', 'apps.example.com'), 'support-agent-0b9e41c7');
  assert.equal(slugFromHost('x-12345678.apps.example.com:443', 'apps.example.com'), 'x-12345678');
});

test('slugFromHost declines every other host', () => {
  for (const host of [
    undefined,
    'localhost:8124', // the service itself
    '127.0.0.1:8124',
    '[::1]:8124',
    'support-agent-0b9e41c7.example.org', // another domain
    'a.support-agent-0b9e41c7.localhost', // deeper than one label
    'api.example.com', // a sibling host that is no app: no id part
    'support-agent.localhost',
    'support-agent-0b9e41c7localhost',
  ]) {
    assert.equal(slugFromHost(host, host?.includes('example.com') ? 'example.com' : 'localhost'), null, String(host));
  }
});
