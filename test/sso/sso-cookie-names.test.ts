/**
 * The session cookie never reaches an app: both app edges drop the service's own cookies by name
 * (src/dataplane/edge-haproxy-config.ts, SERVICE_COOKIE_NAME_PATTERN; test/dataplane/app-edge.test.ts
 * sends them through). This keeps the names single sign-on sets inside that pattern, on http and https.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { SERVICE_COOKIE_NAME_PATTERN } from '../../src/dataplane/edge-haproxy-config.ts';
import { cookieNames } from '../../src/sso/session-cookie.ts';

test('every cookie single sign-on sets is one the app edges strip', () => {
  const pattern = new RegExp(`^${SERVICE_COOKIE_NAME_PATTERN}`);
  for (const publicUrl of ['http://localhost:8124', 'https://slipway.example.com']) {
    const names = cookieNames(publicUrl);
    for (const name of [names.session, names.state]) assert.match(name, pattern, `${name} (${publicUrl})`);
  }
  assert.equal(cookieNames('https://slipway.example.com').session, '__Host-slipway_session');
  assert.equal(cookieNames('http://localhost:8124').session, 'slipway_session');
});
