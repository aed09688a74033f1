/**
 * The service's `Warning` headers (a body field or query parameter it does not know: docs/api.md,
 * "Conventions") reach the people who sent them: the SDK hands each to `onWarning`, and `slipway`
 * prints each on stderr. A CLI newer than the service it talks to sends fields the service does not
 * know yet: its user learns that they were ignored.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import { SlipwayClient, parseWarnings } from '@slipway/sdk';
import { ADMIN_KEY, createTestApp, type TestApp } from '../helpers.ts';
import { cliUser } from './cli-runner.ts';

let t: TestApp;
let base: string;
before(async () => {
  t = await createTestApp();
  await t.app.listen({ port: 0, host: '127.0.0.1' });
  base = `http://127.0.0.1:${(t.app.server.address() as AddressInfo).port}`;
});
after(() => t.close());

test('parseWarnings reads each warning of a header, quotes and backslashes unescaped', () => {
  assert.deepEqual(
    parseWarnings('299 - "unknown field \\"secretz\\"; did you mean \\"secrets\\"?", 299 - "a, b \\\\ c"'),
    ['unknown field "secretz"; did you mean "secrets"?', 'a, b \\ c'],
  );
  assert.deepEqual(parseWarnings(null), []);
  assert.deepEqual(parseWarnings('garbage'), []);
});

test('the SDK hands every warning of an answer to onWarning', async () => {
  const said: string[] = [];
  const client = new SlipwayClient({ baseUrl: base, apiKey: ADMIN_KEY, onWarning: (text) => said.push(text) });
  const created = await client.api.POST('/v2/deployments', {
    body: {
      name: 'sdk-warned',
      source: 'internal_container',
      source_revision_config: { image_uri: 'registry.example.com/agent:1' },
      secretz: [],
    } as never,
  });
  assert.equal(created.response.status, 201);
  assert.deepEqual(said, ['unknown field "secretz"; did you mean "secrets"?']);
  said.length = 0;
  await client.deployments.page({ limit: 1 });
  assert.deepEqual(said, [], 'nothing unknown, nothing said');
});

test('slipway prints the warnings of the answers it gets, on stderr', async () => {
  // A service that knows fewer fields than this CLI: it answers the list with a warning.
  const server = http.createServer((req, res) => {
    res.setHeader('warning', ['299 - "unknown query parameter \\"newer_filter\\""']);
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ resources: [], offset: 0 }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const user = await cliUser();
  try {
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const result = await user.run(['ls'], { env: { SLIPWAY_URL: url, SLIPWAY_API_KEY: ADMIN_KEY, NO_COLOR: '1' } });
    assert.equal(result.code, 0, result.stderr);
    assert.match(result.stderr, /warning: unknown query parameter "newer_filter"/);
    assert.doesNotMatch(result.stdout, /newer_filter/, 'stdout stays the listing');
  } finally {
    await user.remove();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
});
