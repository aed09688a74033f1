/**
 * The URLs a user is given for a deployed app, and how the router reads a slug back from a request.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { appSlug, appUrls, slugFromHost, slugFromPath } from '../../src/dataplane/app-urls.ts';

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

test('URLs take the scheme and port of the public URL and leave out default ports', () => {
  const deployment = { name: 'support-agent', id: ID };
  assert.deepEqual(appUrls(deployment, { publicUrl: 'http://127.0.0.1:8124', appsDomain: 'localhost' }), {
    slug: 'support-agent-0b9e41c7',
    hostUrl: 'http://support-agent-0b9e41c7.localhost:8124',
    pathUrl: 'http://127.0.0.1:8124/apps/support-agent-0b9e41c7/',
  });
  assert.deepEqual(appUrls(deployment, { publicUrl: 'https://slipway.example.com', appsDomain: 'apps.example.com' }), {
    slug: 'support-agent-0b9e41c7',
    hostUrl: 'https://support-agent-0b9e41c7.apps.example.com',
    pathUrl: 'https://slipway.example.com/apps/support-agent-0b9e41c7/',
  });
  assert.equal(
    appUrls(deployment, { publicUrl: 'http://slipway.example.com:80', appsDomain: 'example.com' }).hostUrl,
    'http://support-agent-0b9e41c7.example.com',
  );
  assert.equal(
    appUrls(deployment, { publicUrl: 'https://slipway.example.com:8443/', appsDomain: 'example.com' }).pathUrl,
    'https://slipway.example.com:8443/apps/support-agent-0b9e41c7/',
  );
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

test('slugFromPath splits /apps/<slug> from what the app sees', () => {
  assert.deepEqual(slugFromPath('/apps/support-agent-0b9e41c7/'), { slug: 'support-agent-0b9e41c7', rest: '/' });
  assert.deepEqual(slugFromPath('/apps/support-agent-0b9e41c7/threads/1?x=1&y=/2'), {
    slug: 'support-agent-0b9e41c7',
    rest: '/threads/1?x=1&y=/2',
  });
  assert.deepEqual(slugFromPath('/apps/support-agent-0b9e41c7'), { slug: 'support-agent-0b9e41c7', rest: '' });
  assert.deepEqual(slugFromPath('/apps/support-agent-0b9e41c7?x=1'), { slug: 'support-agent-0b9e41c7', rest: '?x=1' });
  for (const url of [
    undefined,
    '/',
    '/apps',
    '/apps/',
    '/apps/support-agent/',
    '/v2/deployments',
    '/x/apps/support-agent-0b9e41c7/',
  ]) {
    assert.equal(slugFromPath(url), null, String(url));
  }
});
