/**
 * The listener's image without Docker (deploy/Dockerfile): the bundle of `npm run build:listener` in a
 * directory of its own, beside a node_modules that holds only the packages of the image's manifest
 * (packages/listener/image/package.json), linked from the repository's install (their own dependencies
 * resolve from there). An import of the bundle that the image would not install is not found when it
 * starts; the workspace code it needs must be inside it.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Metafile } from 'esbuild';
import { LISTENER_BUNDLE, buildListener } from '../../scripts/build-listener.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

/** The image's manifest: the packages it installs beside the bundle. */
export const IMAGE_MANIFEST = 'packages/listener/image/package.json';

export interface ListenerImage {
  /** The bundle's path, to run with `node`. */
  readonly bundle: string;
  readonly metafile: Metafile;
}

/** Builds the bundle into `dir` and links the image's packages beside it. */
export async function buildListenerImage(dir: string): Promise<ListenerImage> {
  const metafile = await buildListener(dir);
  const manifest = JSON.parse(await fs.readFile(path.join(ROOT, IMAGE_MANIFEST), 'utf8')) as {
    dependencies: Record<string, string>;
  };
  for (const name of Object.keys(manifest.dependencies)) {
    const link = path.join(dir, 'node_modules', name);
    await fs.mkdir(path.dirname(link), { recursive: true });
    await fs.symlink(path.join(ROOT, 'node_modules', name), link, 'dir');
  }
  return { bundle: path.join(dir, LISTENER_BUNDLE), metafile };
}
