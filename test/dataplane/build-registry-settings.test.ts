/**
 * The operator's registry settings as configured (SLIPWAY_BUILD_*) and as read from npm's and pip's
 * files: defaults from the service user's own files, refusals that name the variable without quoting a
 * proxy's password, and the registries a build log names.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigError } from '../../src/config-values.ts';
import { registrySettings } from '../../src/config-registries.ts';
import { npmrcSettings, pipIndexes } from '../../src/dataplane/build-registries.ts';

test("by default the service user's own ~/.npmrc, pip.conf and proxy variables", () => {
  const settings = registrySettings(
    { HOME: '/home/svc', https_proxy: 'http://proxy.corp:3128', NO_PROXY: '.corp' },
    '/',
  );
  assert.equal(settings.npmrc, '/home/svc/.npmrc');
  assert.equal(settings.pipConf, '/home/svc/.config/pip/pip.conf');
  assert.deepEqual(settings.explicit, { npmrc: false, pipConf: false });
  assert.equal(settings.httpsProxy, 'http://proxy.corp:3128/');
  assert.equal(settings.httpProxy, null);
  assert.equal(settings.noProxy, '.corp');
});

test('set once in the configuration: files, registries, CA bundle, proxies; none switches a file off', () => {
  const settings = registrySettings(
    {
      HOME: '/home/svc',
      SLIPWAY_BUILD_NPMRC: 'none',
      SLIPWAY_BUILD_PIP_CONF: 'etc/pip.conf',
      SLIPWAY_BUILD_NPM_REGISTRY: 'https://npm.corp/',
      SLIPWAY_BUILD_PIP_INDEX_URL: 'https://pypi.corp/simple/',
      SLIPWAY_BUILD_CA_FILE: '/etc/ssl/corp.pem',
      SLIPWAY_BUILD_HTTPS_PROXY: 'http://user:secret@proxy.corp:3128',
      HTTPS_PROXY: 'http://ignored:1',
    },
    '/srv/slipway',
  );
  assert.equal(settings.npmrc, null);
  assert.equal(settings.pipConf, '/srv/slipway/etc/pip.conf');
  assert.deepEqual(settings.explicit, { npmrc: true, pipConf: true });
  assert.equal(settings.npmRegistry, 'https://npm.corp/');
  assert.equal(settings.pipIndexUrl, 'https://pypi.corp/simple/');
  assert.equal(settings.caFile, '/etc/ssl/corp.pem');
  assert.equal(settings.httpsProxy, 'http://user:secret@proxy.corp:3128/');
});

test("a bad setting names its variable, and never quotes a proxy's password", () => {
  assert.throws(
    () => registrySettings({ SLIPWAY_BUILD_NPM_REGISTRY: 'ftp://npm.corp' }, '/'),
    (error: unknown) => error instanceof ConfigError && /SLIPWAY_BUILD_NPM_REGISTRY/.test(error.message),
  );
  assert.throws(
    () => registrySettings({ HTTPS_PROXY: 'socks://user:hunter2@proxy' }, '/'),
    (error: unknown) =>
      error instanceof ConfigError && /HTTPS_PROXY/.test(error.message) && !error.message.includes('hunter2'),
  );
});

test("npm's and pip's files are read as npm and pip read them", () => {
  const npm = npmrcSettings(
    '; comment\n# comment\nregistry = "https://npm.corp/"\n@acme:registry=http://127.0.0.1:4873/\n//npm.corp/:_authToken=abc\nregistry=https://npm2.corp/\n',
  );
  assert.equal(npm.get('registry'), 'https://npm2.corp/');
  assert.equal(npm.get('@acme:registry'), 'http://127.0.0.1:4873/');
  assert.equal(npm.get('//npm.corp/:_authToken'), 'abc');
  const pip = pipIndexes(
    '[global]\nindex-url = https://pypi.corp/simple\nextra-index-url =\n    https://a.corp/simple\n    https://b.corp/simple\ntrusted_host: a.corp b.corp\n[install]\nfind-links = /wheels\n',
  );
  assert.deepEqual(pip, {
    indexUrl: 'https://pypi.corp/simple',
    extraIndexUrls: ['https://a.corp/simple', 'https://b.corp/simple'],
    findLinks: ['/wheels'],
    trustedHosts: ['a.corp', 'b.corp'],
  });
});
