/**
 * How the local data plane isolates what it runs (install and build commands, apps): bubblewrap when
 * it is on the machine, else bare processes. Either way a command gets only the environment we give it
 * (none of the service's variables), and when the service runs as root it runs as `nobody`.
 *
 * Under bubblewrap the whole file system is visible read-only except: the service's data directory
 * (its encryption key, database files and other apps' sources) is replaced by an empty tmpfs, the
 * command's own directory is bound back writable, /tmp is private, and the command gets its own PID
 * namespace (it cannot see or signal the service or other apps) and dies with the service.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import type { Logger } from 'pino';
import type { SandboxMode } from '../config.ts';

const run = promisify(execFile);

/**
 * Where an app's directory appears inside the bubblewrap sandbox: /home is replaced by a tmpfs (which
 * also hides the machine's users' homes), so the mount point can be made on a read-only root.
 */
const SANDBOX_HOME = '/home';
const SANDBOX_APP_DIR = '/home/app';
/** The installation the service's own Node.js comes from (bin/node under it). */
const NODE_PREFIX = path.dirname(path.dirname(process.execPath));

/** The unprivileged user apps run as when the service is root. */
const NOBODY = { uid: 65534, gid: 65534 };

export interface SpawnPlan {
  file: string;
  args: string[];
  /** Working directory to spawn in (on the host). */
  cwd: string;
  uid?: number;
  gid?: number;
}

export interface Sandbox {
  readonly kind: 'bwrap' | 'none';
  /** The user commands run as; null means the service's own user. */
  readonly user: { uid: number; gid: number } | null;
  /** A sentence for the start-up log saying what isolation is in force. */
  readonly description: string;
  /**
   * Where a command sees its app directory's `src` (its working directory) and `home`. Under
   * bubblewrap every app directory appears at /home/app, so build output that records absolute paths (a
   * Python virtualenv, for one) stays valid when it is copied to another revision.
   */
  appPaths(appDir: string): { src: string; home: string };
  /** How to run `sh -c <command>` in `<appDir>/src` (it may write `appDir` only) under this sandbox. */
  plan(command: string, appDir: string): SpawnPlan;
  /** Gives the command's user ownership of a directory it must write (no-op when it is us). */
  ownTree(dir: string): Promise<void>;
}

async function findBwrap(): Promise<string | null> {
  for (const candidate of ['/usr/bin/bwrap', '/usr/local/bin/bwrap']) {
    try {
      await fs.access(candidate, fs.constants.X_OK);
      return candidate;
    } catch {
      // Not here; try the next place.
    }
  }
  return null;
}

/** bubblewrap needs unprivileged user namespaces (or setuid); try it once rather than trusting it exists. */
async function bwrapWorks(bwrap: string, user: { uid: number; gid: number } | null): Promise<boolean> {
  try {
    await run(
      bwrap,
      ['--ro-bind', '/', '/', '--dev', '/dev', '--proc', '/proc', '--unshare-pid', '--die-with-parent', '/bin/true'],
      { ...(user ?? {}), timeout: 10_000 },
    );
    return true;
  } catch {
    return false;
  }
}

async function chownTree(dir: string, uid: number, gid: number): Promise<void> {
  await fs.lchown(dir, uid, gid);
  for (const entry of await fs.readdir(dir, { withFileTypes: true })) {
    const child = path.join(dir, entry.name);
    if (entry.isDirectory()) await chownTree(child, uid, gid);
    else await fs.lchown(child, uid, gid);
  }
}

export async function createSandbox(options: {
  mode: SandboxMode;
  dataDir: string;
  logger: Pick<Logger, 'info' | 'warn'>;
}): Promise<Sandbox> {
  const { mode, dataDir } = options;
  const user = process.getuid?.() === 0 ? NOBODY : null;
  const ownTree = async (dir: string) => {
    if (user) await chownTree(dir, user.uid, user.gid);
  };
  const bwrap = mode === 'none' ? null : await findBwrap();
  const usable = bwrap !== null && (await bwrapWorks(bwrap, user));
  if (mode === 'bwrap' && !usable) {
    throw new Error(
      'SLIPWAY_SANDBOX=bwrap but bubblewrap is not installed or cannot create namespaces here (install the bubblewrap package, or set SLIPWAY_SANDBOX=auto)',
    );
  }
  const who = user ? 'as user nobody' : "as the service's own user";
  if (usable && bwrap) {
    return {
      kind: 'bwrap',
      user,
      description: `apps run under bubblewrap ${who}: read-only system, private /tmp and PID namespace, the data directory hidden`,
      ownTree,
      appPaths: () => ({ src: `${SANDBOX_APP_DIR}/src`, home: `${SANDBOX_APP_DIR}/home` }),
      plan(command, appDir) {
        const args = [
          '--die-with-parent',
          '--unshare-pid',
          '--unshare-ipc',
          '--unshare-uts',
          '--ro-bind',
          '/',
          '/',
          '--dev',
          '/dev',
          '--proc',
          '/proc',
          '--tmpfs',
          '/tmp',
          '--tmpfs',
          SANDBOX_HOME,
          // A Node.js installed under /home (nvm, for one) stays usable.
          ...(NODE_PREFIX.startsWith(`${SANDBOX_HOME}/`) ? ['--ro-bind', NODE_PREFIX, NODE_PREFIX] : []),
          // Hide the service's data directory; the command's own directory appears at /home/app.
          '--tmpfs',
          dataDir,
          '--bind',
          appDir,
          SANDBOX_APP_DIR,
          '--chdir',
          `${SANDBOX_APP_DIR}/src`,
          '/bin/sh',
          '-c',
          command,
        ];
        return { file: bwrap, args, cwd: path.join(appDir, 'src'), ...(user ?? {}) };
      },
    };
  }
  const description =
    mode === 'none'
      ? `apps run without a sandbox (SLIPWAY_SANDBOX=none) ${who}`
      : `bubblewrap is not available, so apps run without a sandbox ${who}` +
        (user ? '' : ': they can read everything the service can, including its data directory; install bubblewrap');
  return {
    kind: 'none',
    user,
    description,
    ownTree,
    appPaths: (appDir) => ({ src: path.join(appDir, 'src'), home: path.join(appDir, 'home') }),
    plan(command, appDir) {
      return { file: '/bin/sh', args: ['-c', command], cwd: path.join(appDir, 'src'), ...(user ?? {}) };
    },
  };
}
