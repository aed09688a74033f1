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
 * As an ordinary user with a subordinate range (/etc/subuid and /etc/subgid, src/dataplane/
 * subordinate-ids.ts) the same holds with uids of that range: the range's first id for what no
 * deployment owns, the rest one per deployment. The service gives files to them, and takes them back,
 * as root of a user namespace where only its own user and the range are mapped. Without a range (or
 * with no_new_privs) every app runs as the service's user, and the start log says why.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import { promisify } from 'node:util';
import type { AppUidRange } from '../config-apps.ts';
import { runMapped, type SubordinateIds, type SubordinateIdsProbe } from './subordinate-ids.ts';

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
  /** Not root, with a subordinate range: the sandbox maps it, and `userFor` names uids of it. */
  readonly ids: SubordinateIds | null;
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
  /** Not root: whether a subordinate range serves (its `deployments` must then be `range`), or why not. */
  subordinate?: SubordinateIdsProbe;
}): AppUsers {
  const { range, uidOf } = options;
  const root = process.getuid?.() === 0;
  if (!root && options.subordinate?.ids && uidOf) return subordinateAppUsers(options.subordinate.ids, uidOf);
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
    ? "as the service's own user: no uid per deployment (" +
      (options.subordinate?.problem ?? 'that needs root, or a subordinate range in /etc/subuid and /etc/subgid') +
      '), so apps share its per-user kernel limits (processes, inotify instances, message queues)'
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
    ids: null,
  };
}

/** As an ordinary user with a subordinate range: its first id shared, one of the rest per deployment. */
function subordinateAppUsers(ids: SubordinateIds, uidOf: (deploymentId: string) => Promise<number>): AppUsers {
  const { first, count } = ids.deployments;
  const inRange = (uid: number) => uid >= first && uid < first + count;
  const ownerOf = async (deploymentId: string | undefined) =>
    deploymentId === undefined ? ids.shared : await uidOf(deploymentId);
  return {
    fallback: null,
    ids,
    description:
      `as a host uid of its own per deployment, from the service user's subordinate range ` +
      `(/etc/subuid and /etc/subgid ${ids.range.first}-${ids.range.first + ids.range.count - 1}; ` +
      `${ids.shared} for the start-up probe), never the service's own`,
    async ownTree(dir, deploymentId) {
      const uid = await ownerOf(deploymentId);
      await runMapped(ids, ['chown', '-R', '-h', '--', `${uid}:${uid}`, dir]);
    },
    async ownDir(dir, deploymentId) {
      const uid = await ownerOf(deploymentId);
      await runMapped(ids, ['chown', '-h', '--', `${uid}:${uid}`, dir]);
    },
    userFor(dir) {
      const owner = fs.statSync(dir, { throwIfNoEntry: false })?.uid;
      const uid = owner !== undefined && inRange(owner) ? owner : ids.shared;
      return { uid, gid: uid };
    },
  };
}
