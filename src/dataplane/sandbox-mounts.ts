/**
 * Where things are inside a bubblewrap sandbox (src/dataplane/sandbox.ts), and what of the machine it
 * hides: the mount points of an app's directory, the machine's directories replaced by empty tmpfs
 * mounts, and a minimal /dev.
 */
import fs from 'node:fs/promises';
import path from 'node:path';

/**
 * Where an app's directory appears inside the bubblewrap sandbox: /home is replaced by a tmpfs (which
 * also hides the machine's users' homes), so the mount points can be made on a read-only root.
 */
export const SANDBOX_HOME = '/home';
export const SANDBOX_APP_DIR = '/home/app';
/** Where the Unix sockets of the host forwards appear inside. */
export const SANDBOX_SOCKET_DIR = '/home/app/.slipway';
/** The installation the service's own Node.js comes from (bin/node under it). */
export const NODE_PREFIX = path.dirname(path.dirname(process.execPath));

/**
 * Directories of the machine an app has no business in, replaced by empty tmpfs mounts: daemons' state
 * and sockets (MariaDB's socket is under /var/lib on Fedora-like systems; a container engine's state,
 * spools, mail), the machine's logs and backups, root's home and an operator's own trees. /run is hidden
 * the same way in every sandbox; /tmp and /var/tmp become the app's own. Only those present are hidden.
 */
const HIDDEN_DIRS = [
  '/var/lib',
  '/var/log',
  '/var/spool',
  '/var/mail',
  '/var/backups',
  '/var/cache',
  '/var/tmp',
  '/root',
  '/srv',
  '/mnt',
  '/media',
];

/** The hidden directories present on this machine (a tmpfs needs an existing directory on a read-only root). */
export async function presentHiddenDirs(): Promise<string[]> {
  const present: string[] = [];
  for (const dir of HIDDEN_DIRS) {
    const stat = await fs.lstat(dir).catch(() => null);
    if (stat?.isDirectory()) present.push(dir);
  }
  return present;
}

/**
 * A minimal /dev, made by hand: bubblewrap's `--dev` also mounts a devpts, for which an unprivileged
 * bubblewrap maps the caller to root and later moves the sandbox into a nested user namespace, after
 * which slirp4netns can no longer join its network namespace. Apps need no terminal.
 */
export const DEV_ARGS = [
  '--tmpfs',
  '/dev',
  ...['null', 'zero', 'full', 'random', 'urandom'].flatMap((d) => ['--dev-bind', `/dev/${d}`, `/dev/${d}`]),
  '--symlink',
  '/proc/self/fd',
  '/dev/fd',
  ...['stdin', 'stdout', 'stderr'].flatMap((d, i) => ['--symlink', `/proc/self/fd/${i}`, `/dev/${d}`]),
  '--tmpfs',
  '/dev/shm',
];
