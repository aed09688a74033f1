/**
 * The `pattern` of every form field of the dashboard is a valid pattern for browsers (issue 23, defect
 * 13). A browser compiles it as `new RegExp('^(?:' + pattern + ')$', 'v')`; under the `v` flag a `-`
 * inside a character class must be escaped, and a pattern that does not compile is silently ignored (the
 * field then checks nothing). It must also still say what the server says.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const WEB = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../web/src');

/** Every constant a `pattern={NAME}` of the dashboard's sources uses, with its value. */
async function formPatterns(): Promise<{ where: string; name: string; pattern: string }[]> {
  const found: { where: string; name: string; pattern: string }[] = [];
  const entries = await fs.readdir(WEB, { withFileTypes: true, recursive: true });
  for (const entry of entries) {
    if (!entry.isFile() || !/\.tsx?$/.test(entry.name)) continue;
    const file = path.join(entry.parentPath, entry.name);
    const text = await fs.readFile(file, 'utf8');
    for (const [, name] of text.matchAll(/pattern=\{([A-Z_]+)\}/g)) {
      const value = new RegExp(`const ${name} = '((?:[^'\\\\]|\\\\.)*)'`).exec(text)?.[1];
      assert.ok(value !== undefined, `${file}: the value of ${name}`);
      found.push({ where: path.relative(WEB, file), name: name!, pattern: value.replaceAll('\\\\', '\\') });
    }
  }
  return found;
}

test('every pattern of a dashboard form compiles as browsers compile it (with the v flag)', async () => {
  const patterns = await formPatterns();
  assert.ok(patterns.length >= 2, 'the deployment name and the secret names at least');
  for (const { where, name, pattern } of patterns) {
    assert.doesNotThrow(() => new RegExp(`^(?:${pattern})$`, 'v'), `${where}: ${name} = ${pattern}`);
  }
});

test('the deployment name field accepts what the server accepts and refuses what it refuses', async () => {
  const name = (await formPatterns()).find((p) => p.where.endsWith('new-deployment.tsx'));
  assert.ok(name);
  const field = new RegExp(`^(?:${name.pattern})$`, 'v');
  for (const good of ['a', 'support-agent', 'a1-b2', `a${'b'.repeat(62)}`]) assert.ok(field.test(good), good);
  for (const bad of ['', '1agent', 'Agent', 'agent-', 'a_b', `a${'b'.repeat(63)}`]) assert.ok(!field.test(bad), bad);
});
