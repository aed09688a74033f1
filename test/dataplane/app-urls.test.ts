/**
 * The URLs a user is given for a deployed app, and how the built-in edge reads a slug back from a request;
 * and the apps settings of the configuration (their own port and origin, TLS, the proxy in use).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigError, loadConfig } from '../../src/config.ts';
import { appUrl } from '../../src/dataplane/app-edge.ts';
import { slugFromHost } from '../../src/dataplane/app-urls.ts';

test("an app's URL is its slug on the edge's public URL: scheme and port kept, default ports left out", () => {
  // Slugs are chosen by the database (test/store/app-slugs.test.ts).
  const slug = 'support-agent-0b9e41c7';
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
  // The long form, given when another deployment held the short one.
  assert.equal(slugFromHost('agent-0b9e41c75d2a4f1e.localhost', 'localhost'), 'agent-0b9e41c75d2a4f1e');
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
    'agent-0b9e41c75d2a.localhost', // an id part of neither 8 nor 16 digits
    `${'a'.repeat(55)}-0b9e41c7.localhost`, // longer than a DNS label
  ]) {
    assert.equal(slugFromHost(host, host?.includes('example.com') ? 'example.com' : 'localhost'), null, String(host));
  }
});
