/**
 * What a test's service left mounted: as root, each deployment's data is a loop-mounted image
 * (src/dataplane/disk-images.ts), which a service that is killed or stopped leaves mounted (a restart
 * uses it again). A test removes its data directory only after this, as an operator would.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import { promisify } from 'node:util';

/** Unmounts what is mounted under `dir` (deepest first). */
export async function unmountUnder(dir: string): Promise<void> {
  const real = await fs.realpath(dir).catch(() => null);
  if (real === null) return;
  const points = (await fs.readFile('/proc/self/mountinfo', 'utf8'))
    .split('\n')
    .map((line) =>
      (line.split(' ')[4] ?? '').replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8))),
    )
    .filter((point) => point.startsWith(`${real}/`))
    .sort((a, b) => b.length - a.length);
  for (const point of points) await promisify(execFile)('umount', ['--', point]);
}
