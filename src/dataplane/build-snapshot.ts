/**
 * A finished build becomes an immutable snapshot owned by the service: every file and directory of the
 * revision's app directory is given to the service's user and loses its write bits, so neither the app
 * (which sees it read-only, src/dataplane/sandbox.ts) nor anything else running as the app's user can
 * change what a later instance, a restart or a redeploy starts from.
 *
 * The tree was written by the build, as the app's user, so it may hold any symbolic link. coreutils'
 * `chown -R -h` and `chmod -R` walk it with openat and never follow a link (chmod skips links met in
 * the walk; chown -h changes the link itself), which a hand-written walk of paths could not promise.
 * They run when the build's processes are gone: the build's PID namespace ends with its command.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import { promisify } from 'node:util';
import type { SubordinateIds } from './subordinate-ids.ts';

const run = promisify(execFile);

/**
 * Runs a coreutils command on a tree: as it is, or (the service not root, with a subordinate range:
 * src/dataplane/subordinate-ids.ts) as root of a user namespace where the service's user is root and
 * the range is itself, so that files of a deployment's subordinate uid can be taken back and removed.
 */
async function onTree(ids: SubordinateIds | null | undefined, argv: readonly string[]): Promise<void> {
  const [file, ...args] = [...(ids ? ids.prefix() : []), ...argv];
  await run(file!, args);
}

/** Seals `dir`: owned by the service, readable (and enterable) by everyone, writable by no one. */
export async function sealSnapshot(dir: string, ids?: SubordinateIds | null): Promise<void> {
  const uid = process.getuid?.();
  const gid = process.getgid?.();
  // In the mapped namespace the service's user is 0.
  if (ids) await onTree(ids, ['chown', '-R', '-h', '--', '0:0', dir]);
  else if (uid === 0 && gid !== undefined) await run('chown', ['-R', '-h', '--', `${uid}:${gid}`, dir]);
  await onTree(ids, ['chmod', '-R', '--', 'a-w,a+rX', dir]);
}

/**
 * Copies a sealed snapshot to a new revision's app directory (a redeploy): hard links, since nothing can
 * change a sealed file, so the copy takes no space and little time. The copy is sealed too.
 */
export async function copySnapshot(from: string, to: string, ids?: SubordinateIds | null): Promise<void> {
  await removeTree(to, ids);
  await run('cp', ['-a', '--link', '--no-dereference', '--', from, to]);
  await sealSnapshot(to, ids);
}

/**
 * Empties a directory an app may have written, keeping the directory (mode 0755): its content removed
 * as removeTree removes a tree, then the directory made again, by the same user as the removal (with a
 * subordinate range, root of the mapped namespace: the directory's parent is the deployment's uid's).
 */
export async function emptyTree(dir: string, ids?: SubordinateIds | null): Promise<void> {
  await removeTree(dir, ids);
  if (ids) await onTree(ids, ['mkdir', '-m', '0755', '--', dir]);
  else await fs.mkdir(dir, { mode: 0o755 });
}

/**
 * Removes a tree an app may have written (a build's directory, a deployment's data), sealed or not.
 *
 * Not `fs.rm`: its recursive walk checks that a path is a directory and then reads it by its path, so a
 * directory swapped for a link in between is followed, and what the link names is deleted with the
 * service's rights (test/dataplane/tree-removal.test.ts). coreutils' `rm -r` walks with openat and
 * O_NOFOLLOW from descriptors it holds, and checks each directory it enters is the one it saw; it
 * removes a link, never what it names. `--one-file-system` keeps it off anything mounted inside.
 * Callers still remove only once every process that could write the tree is gone (the rule of
 * docs/data-plane.md): this makes a removal safe even so.
 */
export async function removeTree(dir: string, ids?: SubordinateIds | null): Promise<void> {
  // As root of the mapped namespace: a deployment's subordinate uid's files too, and nothing of others.
  if (ids) return onTree(ids, ['rm', '-r', '-f', '--one-file-system', '--', dir]);
  if (process.getuid?.() !== 0) {
    // A sealed tree has no write bits, and a directory without them cannot be emptied by its owner; one
    // the app left unreadable (chmod 000) cannot even be listed, and a removal that fails keeps the
    // deletion from ever finishing. chmod -R walks the same way (openat, links never followed: -P is its
    // default) and makes each directory readable and passable before it enters it.
    await run('chmod', ['-R', '--', 'u+rwX', dir]).catch(() => {
      // Missing, or partly removed already: rm below says what matters.
    });
  }
  await run('rm', ['-r', '-f', '--one-file-system', '--', dir]);
}
