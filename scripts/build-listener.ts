/**
 * `npm run build:listener [-- --out-dir DIR]`: the Kubernetes listener agent (@slipway/listener) as one
 * JavaScript file, DIR/listener.mjs (packages/listener/dist/ by default), with its source map. Its
 * image (deploy/Dockerfile) runs it with `node`: no TypeScript, tsx or build tool at run time.
 *
 * esbuild bundles the agent's own code and the workspace packages it imports (the part of @slipway/sdk
 * it uses, type-only imports erased), rather than tsc as scripts/build.ts does for the service: one
 * file needs no compiled copies of the workspace packages placed in a node_modules of its own. Every
 * other package stays an import of the bundle, installed beside it from the image's own manifest and
 * lock (packages/listener/image/); test/listener-agent/image.test.ts compares those with the bundle's
 * imports, so a package the agent starts to import cannot be left out of the image.
 *
 * Run it: `node --enable-source-maps DIR/listener.mjs`, with those packages in a node_modules beside
 * DIR or above it.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { build, type Metafile, type Plugin } from 'esbuild';
import { outDirOf } from './out-dir.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/** The bundle's file name in the output directory. */
export const LISTENER_BUNDLE = 'listener.mjs';

/** The names of the repository's workspace packages (the root manifest's `workspaces`). */
async function workspacePackages(): Promise<string[]> {
  const root = JSON.parse(await fs.readFile(path.join(ROOT, 'package.json'), 'utf8')) as { workspaces: string[] };
  return Promise.all(
    root.workspaces.map(async (dir) => {
      const manifest = JSON.parse(await fs.readFile(path.join(ROOT, dir, 'package.json'), 'utf8')) as {
        name: string;
      };
      return manifest.name;
    }),
  );
}

/** A workspace package is bundled; any other package (and Node's own modules) is left an import. */
function packagesExternal(workspaces: readonly string[]): Plugin {
  return {
    name: 'packages-external',
    setup(on) {
      on.onResolve({ filter: /^[^./]/ }, (args) =>
        workspaces.some((name) => args.path === name || args.path.startsWith(`${name}/`))
          ? undefined
          : { path: args.path, external: true },
      );
    },
  };
}

/** Bundles the agent into `outDir` (emptied first); the metafile says what went in and what it imports. */
export async function buildListener(outDir: string): Promise<Metafile> {
  await fs.rm(outDir, { recursive: true, force: true });
  const result = await build({
    absWorkingDir: ROOT,
    entryPoints: [path.join(ROOT, 'packages/listener/src/main.ts')],
    outfile: path.join(outDir, LISTENER_BUNDLE),
    tsconfig: path.join(ROOT, 'tsconfig.json'),
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    sourcemap: true,
    plugins: [packagesExternal(await workspacePackages())],
    metafile: true,
    logLevel: 'warning',
  });
  return result.metafile;
}

async function main(): Promise<void> {
  const out = outDirOf(process.argv.slice(2), path.join(ROOT, 'packages/listener/dist'));
  await buildListener(out);
  const bundle = path.relative(process.cwd(), path.join(out, LISTENER_BUNDLE));
  process.stdout.write(`built ${bundle}: start with node --enable-source-maps ${bundle}\n`);
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((error: unknown) => {
    process.stderr.write(`build:listener: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(1);
  });
}
