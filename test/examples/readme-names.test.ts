/**
 * The README's walk-throughs, followed in order on one service, never reuse a deployment name (issue
 * 23, defect 13): each create would otherwise meet the one before it and answer 409.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import { test } from 'node:test';

test('every deployment the README creates has a name of its own', async () => {
  const readme = await fs.readFile(new URL('../../README.md', import.meta.url), 'utf8');
  const names = [
    ...[...readme.matchAll(/slipway deploy \S+ --name ([a-z][a-z0-9-]*)/g)].map((m) => m[1]!),
    ...[...readme.matchAll(/"name": "([a-z][a-z0-9-]*)"/g)].map((m) => m[1]!),
  ];
  assert.ok(names.length >= 3, `the walk-throughs create deployments: ${names.join(', ')}`);
  assert.deepEqual(
    names.filter((name, i) => names.indexOf(name) !== i),
    [],
    `names created twice: ${names.join(', ')}`,
  );
});
