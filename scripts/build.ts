/**
 * `npm run build [-- --out-dir DIR]`: the service as JavaScript, for a production start without tsx or
 * any development tool (docs/operations.md, "Install"). TypeScript compiles src/ to DIR/src (dist/ by
 * default; tsconfig.build.json rewrites the .ts import specifiers to .js), and what the code reads
 * beside itself at run time is copied to the same places under DIR: migrations/, runtime/ (the
 * LangGraph launcher given to apps), web/dist/ (the dashboard, built first when missing) and
 * package.json (the version, and `"type": "module"` for the .js files).
 *
 * The workspace packages the service imports (@slipway/cli for its `slipway` command, and the
 * @slipway/sdk it is built on) are compiled in the same run and placed in DIR/node_modules/@slipway/,
 * with manifests whose exports name the .js files: Node finds them there before the node_modules
 * beside or above DIR, whose links point at the TypeScript sources in packages/.
 *
 * Run it: `node DIR/src/main.js` (the service), `node DIR/src/cli/main.js` (the CLI, e.g. backup),
 * with the production dependencies in a node_modules beside DIR or above it.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { outDirOf } from './out-dir.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

function run(command: string, args: string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd: ROOT, stdio: 'inherit' });
    child.on('error', reject);
    child.on('close', (code) =>
      code === 0 ? resolve() : reject(new Error(`${path.basename(command)} ${args.join(' ')} exited with ${code}`)),
    );
  });
}

/** The workspace packages compiled into the build, by directory under packages/. */
const PACKAGES = ['sdk', 'cli'];

/** A package's manifest for its compiled files: the exports' .ts targets become .js. */
function compiledManifest(manifest: string): string {
  const parsed = JSON.parse(manifest) as { exports?: Record<string, string> };
  for (const [key, target] of Object.entries(parsed.exports ?? {}))
    parsed.exports![key] = target.replace(/\.ts$/, '.js');
  return `${JSON.stringify(parsed, null, 2)}\n`;
}

async function main(): Promise<void> {
  const out = outDirOf(process.argv.slice(2), path.join(ROOT, 'dist'));
  await fs.rm(out, { recursive: true, force: true });
  if (!(await fs.stat(path.join(ROOT, 'web', 'dist', 'index.html')).catch(() => null)))
    await run(process.execPath, ['--import', 'tsx', 'web/build.ts']);
  await run(process.execPath, [
    path.join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc'),
    '-p',
    'tsconfig.build.json',
    '--outDir',
    out,
  ]);
  for (const name of PACKAGES) {
    const target = path.join(out, 'node_modules', '@slipway', name);
    await fs.mkdir(path.dirname(target), { recursive: true });
    await fs.rename(path.join(out, 'packages', name), target);
    const manifest = await fs.readFile(path.join(ROOT, 'packages', name, 'package.json'), 'utf8');
    await fs.writeFile(path.join(target, 'package.json'), compiledManifest(manifest));
  }
  await fs.rm(path.join(out, 'packages'), { recursive: true, force: true });
  for (const dir of ['migrations', 'runtime', path.join('web', 'dist')])
    await fs.cp(path.join(ROOT, dir), path.join(out, dir), { recursive: true });
  await fs.copyFile(path.join(ROOT, 'package.json'), path.join(out, 'package.json'));
  process.stdout.write(
    `built ${path.relative(process.cwd(), out) || '.'}: start with node ${path.join(path.relative(process.cwd(), out) || '.', 'src', 'main.js')}\n`,
  );
}

main().catch((error: unknown) => {
  process.stderr.write(`build: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
