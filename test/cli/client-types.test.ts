/**
 * The committed client types (packages/sdk/src/api-types.ts) are what `npm run generate:client` makes of
 * the OpenAPI document the service serves: a route schema change without regenerating fails here.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import { after, before, test } from 'node:test';
import { API_TYPES_FILE, renderApiTypes } from '../../scripts/generate-client.ts';
import { client, createTestApp, type TestApp } from '../helpers.ts';

let t: TestApp;
before(async () => {
  t = await createTestApp();
});
after(() => t.close());

test('packages/sdk/src/api-types.ts matches the served /openapi.json', async () => {
  const served = await client(t.app, null).get('/openapi.json');
  assert.equal(served.status, 200);
  const expected = await renderApiTypes(served.body);
  const committed = await fs.readFile(API_TYPES_FILE, 'utf8');
  // Not assert.equal on 8000 lines: the first differing line says what changed.
  if (committed !== expected) {
    const a = committed.split('\n');
    const b = expected.split('\n');
    const at = a.findIndex((line, i) => line !== b[i]);
    assert.fail(
      `packages/sdk/src/api-types.ts is stale: run \`npm run generate:client\`.\nFirst difference at line ${at + 1}:\n  committed: ${a[at]}\n  generated: ${b[at]}`,
    );
  }
});
