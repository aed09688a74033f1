/**
 * `npm test` runs each test file as a bundle (scripts/test-bundles.ts), in which every module must see its
 * own source file's paths as it would run as TypeScript: a module that found its fixtures beside the
 * bundle instead would test other files than its source says, or none.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { after, before, test } from 'node:test';
import { bundleDir, bundleTests, sourceOfBundle } from '../scripts/test-bundles.ts';

const FIXTURES = path.resolve('test/fixtures/bundles');
let dir: string;

before(async () => (dir = await bundleDir()));
after(() => fs.rm(dir, { recursive: true, force: true }));

test("a bundled module's url, dirname and filename are its source's", async () => {
  const [bundle] = await bundleTests(['test/fixtures/bundles/meta-paths.ts'], dir);
  assert.equal(sourceOfBundle(bundle!), path.normalize('test/fixtures/bundles/meta-paths.ts'));
  const { paths } = (await import(pathToFileURL(bundle!).href)) as { paths: Record<string, string> };
  const source = path.join(FIXTURES, 'meta-paths.ts');
  assert.deepEqual(paths, { url: pathToFileURL(source).href, dirname: FIXTURES, filename: source });
});

test('a module that uses anything else of its meta object is not bundled: the bundle would answer for itself', async () => {
  for (const file of ['test/fixtures/bundles/meta-resolve.ts', 'test/fixtures/bundles/meta-whole.ts'])
    await assert.rejects(bundleTests([file], dir), (error: Error) => {
      assert.match(error.message, new RegExp(path.basename(file).replace('.', '\\.')));
      assert.match(error.message, /url, dirname and filename/);
      return true;
    });
});

test("npm packages are bundled too, each keeping its own paths; those that start or read files of their own by run-time paths stay Node's", async () => {
  const [bundle] = await bundleTests(['test/fixtures/bundles/package-paths.mjs'], dir);
  const { swaggerPackage, pinoLoaded } = (await import(pathToFileURL(bundle!).href)) as Record<string, unknown>;
  // Found beside the package's own file in node_modules, not beside the bundle (where it would read nothing).
  assert.equal(swaggerPackage, '@fastify/swagger');
  assert.equal(pinoLoaded, true);
  const text = await bundledText(bundle!);
  assert.doesNotMatch(text, /from ["']@fastify\/swagger/, 'the bundled package is not imported from node_modules');
  assert.match(text, /from ["']pino["']/, 'pino is imported from node_modules');
});

test("a package our code imports when needed is Node's: a CommonJS one's named exports are there", async () => {
  const [bundle] = await bundleTests(['test/fixtures/bundles/package-import.ts'], dir);
  const { undiciFetch } = (await import(pathToFileURL(bundle!).href)) as { undiciFetch: () => Promise<unknown> };
  assert.equal(typeof (await undiciFetch()), 'function');
});

/** A bundle's own text with that of the chunks it imports. */
async function bundledText(bundle: string): Promise<string> {
  const text = await fs.readFile(bundle, 'utf8');
  const chunks = [...text.matchAll(/from ["'](\.\.?\/[^"']*chunks\/[^"']+)["']/g)].map((m) =>
    path.resolve(path.dirname(bundle), m[1]!),
  );
  return [text, ...(await Promise.all(chunks.map((c) => fs.readFile(c, 'utf8'))))].join('\n');
}
