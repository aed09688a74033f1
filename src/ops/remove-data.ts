/**
 * `slipway remove-data --yes`: removes what the service keeps on disk (its data directory, and the apps'
 * data directory when it lies elsewhere), for a user who wants to start again from nothing. `rm -rf` is
 * not enough: a finished build is sealed (no write bits, so its owner cannot empty its directories), and
 * without root the apps' files may belong to the user's subordinate uids. The removal is the service's
 * own (removeTree of src/dataplane/build-snapshot.ts: links are removed, never followed), done while the
 * command holds the data directory, so no service runs on it meanwhile.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import type { Logger } from 'pino';
import type { Config } from '../config.ts';
import { ConfigError } from '../config.ts';
import { lockDataDir } from '../db/data-dir-lock.ts';
import { removeTree } from '../dataplane/build-snapshot.ts';
import { probeSubordinateIds } from '../dataplane/subordinate-ids.ts';

const run = promisify(execFile);

/** The directories `remove-data` removes: the data directory, and the apps' when it is not inside it. */
export function dataDirectories(config: Pick<Config, 'dataDir' | 'disk'>): string[] {
  const dataDir = path.resolve(config.dataDir);
  const apps = path.resolve(config.disk.appsDataDir);
  const inside = apps === dataDir || apps.startsWith(`${dataDir}${path.sep}`);
  return inside ? [dataDir] : [dataDir, apps];
}

/** Mount points at or under `dir` (a deployment's disk image, a build's), deepest first, from /proc/self/mountinfo. */
async function mountsUnder(dir: string): Promise<string[]> {
  const text = await fs.readFile('/proc/self/mountinfo', 'utf8').catch(() => '');
  const points = text
    .split('\n')
    .map((line) => line.split(' ')[4])
    .filter((point): point is string => point !== undefined && point !== '')
    // mountinfo escapes space, tab, newline and backslash as octal.
    .map((point) =>
      point.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(Number.parseInt(octal, 8))),
    )
    .filter((point) => point === dir || point.startsWith(`${dir}/`));
  return [...new Set(points)].sort((a, b) => b.length - a.length);
}

export interface RemoveDataOptions {
  config: Pick<Config, 'dataDir' | 'disk' | 'databaseUrl'>;
  logger: Pick<Logger, 'warn'>;
  say: (line: string) => void;
}

/**
 * Removes the service's directories. Refuses (ConfigError) while a service or another operator command
 * holds the data directory, and, without root, while a file system is mounted inside (root unmounts them:
 * a crashed service's disk images).
 */
export async function removeData({ config, logger, say }: RemoveDataOptions): Promise<void> {
  const dirs = dataDirectories(config);
  const present = [];
  for (const dir of dirs) if (await fs.lstat(dir).catch(() => null)) present.push(dir);
  if (present.length === 0) {
    say(`Nothing to remove: ${dirs.join(' and ')} ${dirs.length > 1 ? 'do' : 'does'} not exist.`);
    return;
  }
  const lock = await lockDataDir(dirs[0]!, { logger, command: 'remove-data' });
  try {
    const root = process.getuid?.() === 0;
    for (const dir of present) {
      for (const point of await mountsUnder(dir)) {
        if (!root)
          throw new ConfigError(
            'SLIPWAY_DATA_DIR',
            `${point} is a mounted file system; unmount it as root (umount ${point}) and run this again; nothing was removed`,
          );
        await run('umount', ['--', point]);
        say(`Unmounted ${point}`);
      }
    }
    // Without root, the apps' files may be the user's subordinate uids': removed from a namespace that maps them.
    const ids = root ? null : (await probeSubordinateIds()).ids;
    for (const dir of present) {
      await removeTree(dir, ids);
      say(`Removed ${dir}`);
    }
  } finally {
    // Its file went with the directory.
    await lock.release().catch(() => undefined);
  }
  if (config.databaseUrl)
    say('The database of DATABASE_URL is not touched: drop its tables, or the database, yourself.');
}
