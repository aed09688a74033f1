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

const run = promisify(execFile);

/** Seals `dir`: owned by the service, readable (and enterable) by everyone, writable by no one. */
export async function sealSnapshot(dir: string): Promise<void> {
  const uid = process.getuid?.();
  const gid = process.getgid?.();
  if (uid === 0 && gid !== undefined) await run('chown', ['-R', '-h', '--', `${uid}:${gid}`, dir]);
  await run('chmod', ['-R', '--', 'a-w,a+rX', dir]);
}

/**
 * Copies a sealed snapshot to a new revision's app directory (a redeploy): hard links, since nothing can
 * change a sealed file, so the copy takes no space and little time. The copy is sealed too.
 */
export async function copySnapshot(from: string, to: string): Promise<void> {
  await fs.rm(to, { recursive: true, force: true });
  await run('cp', ['-a', '--link', '--no-dereference', '--', from, to]);
  await sealSnapshot(to);
}

/** Removes a revision's files, sealed or not (a service that is not root needs its write bits back first). */
export async function removeTree(dir: string): Promise<void> {
  if (process.getuid?.() !== 0) {
    await run('chmod', ['-R', '--', 'u+w', dir]).catch(() => {
      // Missing, or partly removed already: rm below says what matters.
    });
  }
  await fs.rm(dir, { recursive: true, force: true, maxRetries: 3 });
}
