/**
 * Builds the dashboard into web/dist: `npm ci` runs it (the prepare script), and the dashboard tests
 * run it when the assets are missing. Vite is a dev dependency: an install without dev dependencies
 * (`npm ci --omit=dev`) has no Vite, and then this says so and leaves the service to explain at `/`
 * how to build the pages, rather than failing the whole install.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const WEB_DIR = path.dirname(fileURLToPath(import.meta.url));
export const DIST_DIR = path.join(WEB_DIR, 'dist');

export async function dashboardBuilt(): Promise<boolean> {
  return fs.access(path.join(DIST_DIR, 'index.html')).then(
    () => true,
    () => false,
  );
}

/** Runs `vite build` on web/ with web/vite.config.ts, into web/dist or the given directory. */
export async function buildDashboard(outDir: string = DIST_DIR): Promise<void> {
  const { build } = await import('vite');
  await build({ root: WEB_DIR, logLevel: 'warn', build: { outDir, emptyOutDir: true } });
}

async function main(): Promise<void> {
  try {
    await import('vite');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ERR_MODULE_NOT_FOUND') throw error;
    process.stdout.write(
      'slipway: Vite is not installed (dev dependencies omitted), so the dashboard was not built; run `npm ci` with dev dependencies, then `npm run build:web`.\n',
    );
    return;
  }
  await buildDashboard();
  process.stdout.write(`slipway: dashboard built into ${path.relative(process.cwd(), DIST_DIR) || DIST_DIR}\n`);
}

if (process.argv[1] !== undefined && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main().catch((error: unknown) => {
    process.stderr.write(`${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exit(1);
  });
}
