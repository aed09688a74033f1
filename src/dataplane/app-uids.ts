/**
 * A host uid per deployment (issue 33): when the service runs as root, each deployment's builds and
 * instances run as a uid of its own from SLIPWAY_APP_UIDS (src/store/app-uids.ts keeps which), and its
 * writable directories (its build while it runs, its SLIPWAY_DATA_DIR and HOME) belong to that uid. The
 * kernel's per-user counters (processes, inotify instances, message queues, keys) are then each
 * deployment's own, and even a deployment that reached another's directory could not read it (0700).
 *
 * A command runs as the owner of the directory it writes (its data directory, or its build's app
 * directory): the service gave it that owner, and a process without capabilities cannot give a file
 * away, so the owner says whose it is. Only uids of the range count; anything else (a directory made
 * before this, owned by `nobody`) runs as `nobody`, as every app did before.
 *
 * As an ordinary user the service cannot give files or processes to other uids (that needs root, or
 * newuidmap with an /etc/subuid range, which the sandbox's own network setup rules out: slirp4netns
 * must find the service's own user in the sandbox's namespace), so every app runs as the service's
 * user and the start log says so.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import { promisify } from 'node:util';
import type { AppUidRange } from '../config-apps.ts';

const run = promisify(execFile);

/** The user commands run as when the service is root and a directory is no deployment's. */
export const NOBODY = { uid: 65534, gid: 65534 };

export interface AppUsers {
  /** Who runs what no deployment owns: `nobody` when root; null, the service's own user. */
  readonly fallback: { uid: number; gid: number } | null;
  /** What the start log says about it. */
  readonly description: string;
  /** Gives a whole tree to the deployment's user (or `nobody`); links are changed, never followed. */
  ownTree(dir: string, deploymentId?: string): Promise<void>;
  /** Gives one directory the service has just made (not what is in it) to the deployment's user. */
  ownDir(dir: string, deploymentId: string): Promise<void>;
  /** The user a command that writes `dir` runs as; null: the service's own. */
  userFor(dir: string): { uid: number; gid: number } | null;
}

/** Gives `dir` and everything in it to `uid`:`gid`: coreutils walks with openat and changes links themselves. */
export async function chownTree(dir: string, uid: number, gid: number): Promise<void> {
  await run('chown', ['-R', '-h', '--', `${uid}:${gid}`, dir]);
}

/** Users of /etc/passwd and ranges of /etc/subuid that share ids with the range, for the start log. */
export function rangeOverlaps(range: AppUidRange, files = { passwd: '/etc/passwd', subuid: '/etc/subuid' }): string[] {
  const last = range.first + range.count - 1;
  const read = (file: string) => {
    try {
      return fs.readFileSync(file, 'utf8').split('\n');
    } catch {
      return [];
    }
  };
  const found: string[] = [];
  for (const line of read(files.passwd)) {
    const [name, , uid] = line.split(':');
    if (name && Number(uid) >= range.first && Number(uid) <= last) found.push(`user ${name} (${uid})`);
  }
  for (const line of read(files.subuid)) {
    const [name, start, count] = line.split(':');
    const from = Number(start);
    const to = from + Number(count) - 1;
    if (name && Number.isFinite(to) && from <= last && to >= range.first)
      found.push(`the /etc/subuid range of ${name} (${from}-${to})`);
  }
  return found;
}

/**
 * The users of this service's apps. `uidOf` gives a deployment its uid (stored, the same after a
 * restart); without it, or when the service is not root, there is no uid per deployment.
 */
export function createAppUsers(options: {
  range: AppUidRange;
  uidOf?: (deploymentId: string) => Promise<number>;
}): AppUsers {
  const { range, uidOf } = options;
  const root = process.getuid?.() === 0;
  const fallback = root ? NOBODY : null;
  const inRange = (uid: number) => uid >= range.first && uid < range.first + range.count;
  const ownerOf = async (deploymentId: string | undefined) => {
    if (!root) return null;
    if (!uidOf || deploymentId === undefined) return NOBODY;
    const uid = await uidOf(deploymentId);
    return { uid, gid: uid };
  };
  const overlaps = root && uidOf ? rangeOverlaps(range) : [];
  const last = range.first + range.count - 1;
  const description = !root
    ? "as the service's own user: no uid per deployment (that needs the service to run as root), so apps share its per-user kernel limits (processes, inotify instances)"
    : !uidOf
      ? 'as user nobody'
      : `as a uid of its own per deployment (SLIPWAY_APP_UIDS ${range.first}-${last})` +
        (overlaps.length ? `, BUT that range is also ${overlaps.join(', ')}: choose one nobody else uses` : '');
  return {
    fallback,
    description,
    async ownTree(dir, deploymentId) {
      const owner = await ownerOf(deploymentId);
      if (owner) await chownTree(dir, owner.uid, owner.gid);
    },
    async ownDir(dir, deploymentId) {
      const owner = await ownerOf(deploymentId);
      if (owner) await fs.promises.lchown(dir, owner.uid, owner.gid);
    },
    userFor(dir) {
      if (!fallback) return null;
      const owner = fs.statSync(dir, { throwIfNoEntry: false })?.uid;
      return owner !== undefined && inRange(owner) ? { uid: owner, gid: owner } : fallback;
    },
  };
}
