/**
 * A file system of its own for each deployment's writable data (issue 33, item 4): a sparse image file
 * the size of the deployment's limit, formatted by e2fsprogs' `mkfs.ext4` and loop-mounted by util-linux's
 * `mount` where the deployment's directory is (`<apps data dir>/<deployment id>`, which holds its `data`
 * and `home`). The kernel then keeps the limit: an app that fills it gets ENOSPC, and the file system the
 * service and PostgreSQL write never fills through it.
 *
 * The images live in `<apps data dir>/.images/<deployment id>.img`, a directory only the service can
 * enter. What the service touches is the image (one root-owned file) and the mount point (a directory of
 * the service, in a directory of the service): nothing an app can write is walked, followed or removed.
 * Removing a deployment's disk unmounts it (once every process of the app is gone: the caller's rule)
 * and unlinks its image.
 *
 * Only for a service running as root on a host that can loop-mount: the start-up probe
 * (`probeDiskImages`) does the whole thing once and says why it cannot otherwise.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { findExecutable } from './executables.ts';

const run = promisify(execFile);
const MIB = 1024 * 1024;
/** The size of the probe's image: ext4's small-file-system layout fits it with room to write. */
const PROBE_IMAGE_MB = 16;
/** A temporary image's suffix (one being formatted, or the probe's): removed at start when left behind. */
const PARTIAL = '.partial';
const PROBE_PREFIX = '.probe-';
/**
 * Mount options: no set-uid programs or device nodes from an app's own file system. A thin image is
 * also mounted with `discard`: blocks the app frees are given back to the host's disk (the image file
 * stays as sparse as what the app holds). A preallocated one is not: it keeps its blocks.
 */
const mountOptions = (preallocate: boolean) => (preallocate ? 'loop,nosuid,nodev' : 'loop,nosuid,nodev,discard');
/** Where the builds' images are, in the images' directory (a name no deployment id can have). */
const BUILDS = '.builds';

/** The tools the images need, found in the system's directories, and how images take their room. */
interface ImageTools {
  mkfs: string;
  mount: string;
  umount: string;
  /**
   * Preallocated (`SLIPWAY_APP_DISK_PREALLOCATE`): util-linux's `fallocate`, which gives an image all
   * its blocks on the host's file system when it is made and again each time it is mounted. Null: thin.
   */
  fallocate: string | null;
}

/** Why images cannot be used here, or the tools to make them. */
export type ImageSupport = { tools: ImageTools; reason?: undefined } | { tools?: undefined; reason: string };

export interface DiskImages {
  /** The directory the images are in. */
  readonly dir: string;
  /** Whether the deployment has an image (made by `attach`); a deployment without one has a plain directory. */
  hasImage(deploymentId: string): Promise<boolean>;
  /**
   * Makes the deployment's image when it has none (`sizeBytes`, sparse) and mounts it at `mountPoint`
   * unless it is mounted there already (a service restart leaves it mounted). The file system's root is
   * the service's, passable by anyone (0711).
   */
  attach(deploymentId: string, mountPoint: string, sizeBytes: number): Promise<void>;
  /** Unmounts `mountPoint` when something is mounted there, then removes the deployment's image. */
  detach(deploymentId: string, mountPoint: string): Promise<void>;
  /**
   * The builds' images (`<dir>/.builds/<revision id>.img`), the same way: made and mounted when a build
   * starts, unmounted and removed when it ends.
   */
  readonly builds: Pick<DiskImages, 'attach' | 'detach' | 'hasImage'> & {
    /** The revisions whose builds have an image (one a service that stopped in the middle left). */
    list(): Promise<string[]>;
  };
}

/** Whether something else is mounted at `dir` than its parent's file system (the way mountpoint(1) tells). */
export async function isMountPoint(dir: string): Promise<boolean> {
  const [self, parent] = await Promise.all([
    fs.lstat(dir).catch(() => null),
    fs.lstat(path.dirname(dir)).catch(() => null),
  ]);
  if (!self?.isDirectory() || !parent) return false;
  return self.dev !== parent.dev || self.ino === parent.ino;
}

async function runTool(file: string, args: string[]): Promise<void> {
  try {
    await run(file, args);
  } catch (error) {
    const stderr = (error as { stderr?: string }).stderr?.trim();
    throw new Error(`${path.basename(file)} ${args.join(' ')} failed: ${stderr || (error as Error).message}`, {
      cause: error,
    });
  }
}

/**
 * Gives a preallocated image every block it lacks (mode 0 of fallocate(2): what it holds is kept, the
 * holes get blocks), so that the host's file system cannot run out under it; a host too full for that
 * fails here, with ENOSPC, rather than under the app later. A thin image is left as it is.
 */
async function reserve(tools: ImageTools, image: string, sizeBytes: number): Promise<void> {
  if (tools.fallocate) await runTool(tools.fallocate, ['-l', String(sizeBytes), '--', image]);
}

/**
 * Makes an image of `sizeBytes` at `image`, formatted as ext4 with no blocks kept for root: sparse, or
 * with all its blocks when preallocated.
 */
async function makeImage(tools: ImageTools, image: string, sizeBytes: number): Promise<void> {
  const partial = image + PARTIAL;
  await fs.rm(partial, { force: true });
  const handle = await fs.open(partial, 'wx', 0o600);
  try {
    await handle.truncate(sizeBytes);
  } finally {
    await handle.close();
  }
  await reserve(tools, partial, sizeBytes);
  // -m 0: no blocks kept for root (nothing runs as root there); nodiscard: the file is sparse already, or
  // preallocated (a discard would punch its blocks out again).
  await runTool(tools.mkfs, ['-q', '-F', '-m', '0', '-E', 'nodiscard,root_owner=0:0', '--', partial]);
  await fs.rename(partial, image);
}

async function mountImage(tools: ImageTools, image: string, mountPoint: string): Promise<void> {
  await runTool(tools.mount, ['-t', 'ext4', '-o', mountOptions(tools.fallocate !== null), '--', image, mountPoint]);
  // The file system's own root: the service's, passable but not listable by the app's user.
  await fs.chmod(mountPoint, 0o711);
}

async function unmount(tools: ImageTools, mountPoint: string): Promise<void> {
  if (await isMountPoint(mountPoint)) await runTool(tools.umount, ['--', mountPoint]);
}

/**
 * Whether this host can give each deployment an image: the service runs as root, e2fsprogs and
 * util-linux are there, and a small image can be made, mounted, written, unmounted and removed in `dir`.
 */
export async function probeDiskImages(dir: string, options: { preallocate: boolean }): Promise<ImageSupport> {
  if (process.getuid?.() !== 0) return { reason: 'the service does not run as root, which mounting needs' };
  const [mkfs, mount, umount, fallocate] = await Promise.all(
    ['mkfs.ext4', 'mount', 'umount', 'fallocate'].map((n) => findExecutable(n)),
  );
  if (!mkfs) return { reason: 'no mkfs.ext4 (Debian package e2fsprogs)' };
  if (!mount || !umount) return { reason: 'no mount or umount (Debian package mount)' };
  if (options.preallocate && !fallocate) return { reason: 'no fallocate (Debian package util-linux)' };
  const tools = { mkfs, mount, umount, fallocate: options.preallocate ? fallocate! : null };
  const name = `${PROBE_PREFIX}${randomBytes(6).toString('hex')}`;
  const image = path.join(dir, `${name}.img`);
  const mountPoint = path.join(dir, name);
  try {
    await fs.mkdir(dir, { recursive: true, mode: 0o700 });
    await makeImage(tools, image, PROBE_IMAGE_MB * MIB);
    await fs.mkdir(mountPoint, { mode: 0o700 });
    await mountImage(tools, image, mountPoint);
    await fs.writeFile(path.join(mountPoint, 'probe'), randomBytes(256 * 1024));
    await unmount(tools, mountPoint);
    return { tools };
  } catch (error) {
    return {
      reason: `a loop-mounted image could not be used: ${error instanceof Error ? error.message : String(error)}`,
    };
  } finally {
    await unmount(tools, mountPoint).catch(() => undefined);
    await fs.rm(image + PARTIAL, { force: true });
    await fs.rm(image, { force: true });
    await fs.rmdir(mountPoint).catch(() => undefined);
  }
}

/**
 * Removes what a service that stopped in the middle left in the images' directory: a probe's mount and
 * image, an image whose formatting did not finish. Deployments' images stay (their deployments' next
 * start mounts them again, their teardown removes them).
 */
export async function cleanPartialImages(tools: ImageTools, dir: string): Promise<string[]> {
  const removed: string[] = [];
  const entries = async (d: string) =>
    (await fs.readdir(d, { withFileTypes: true }).catch(() => [])).map((entry) => ({
      entry,
      file: path.join(d, entry.name),
    }));
  for (const { entry, file } of [...(await entries(dir)), ...(await entries(path.join(dir, BUILDS)))]) {
    if (entry.isDirectory() && entry.name.startsWith(PROBE_PREFIX)) {
      await unmount(tools, file);
      await fs.rmdir(file);
      removed.push(file);
    } else if (entry.isFile() && (entry.name.startsWith(PROBE_PREFIX) || entry.name.endsWith(PARTIAL))) {
      await fs.unlink(file);
      removed.push(file);
    }
  }
  return removed;
}

export function createDiskImages(tools: ImageTools, dir: string): DiskImages {
  const builds = path.join(dir, BUILDS);
  return { ...imagesIn(tools, dir), builds: { ...imagesIn(tools, builds), list: () => listImages(builds) } };
}

async function listImages(dir: string): Promise<string[]> {
  const entries = await fs.readdir(dir, { withFileTypes: true }).catch(() => []);
  return entries.filter((e) => e.isFile() && e.name.endsWith('.img')).map((e) => e.name.slice(0, -'.img'.length));
}

/** The images in `dir`, one per id (a deployment's or a build's revision's). */
function imagesIn(tools: ImageTools, dir: string): Omit<DiskImages, 'builds'> {
  const imageOf = (id: string): string => {
    if (!/^[A-Za-z0-9_-]+$/.test(id)) throw new Error(`not an id: ${id}`);
    return path.join(dir, `${id}.img`);
  };
  const exists = (file: string) =>
    fs.lstat(file).then(
      (stat) => stat.isFile(),
      () => false,
    );
  /** One attach or detach at a time per deployment. */
  const busy = new Map<string, Promise<void>>();
  const serially = (deploymentId: string, work: () => Promise<void>): Promise<void> => {
    const next = (busy.get(deploymentId) ?? Promise.resolve()).catch(() => undefined).then(work);
    const settled = next.catch(() => undefined);
    busy.set(deploymentId, settled);
    void settled.then(() => {
      if (busy.get(deploymentId) === settled) busy.delete(deploymentId);
    });
    return next;
  };

  return {
    dir,
    hasImage: (deploymentId) => exists(imageOf(deploymentId)),
    attach: (deploymentId, mountPoint, sizeBytes) =>
      serially(deploymentId, async () => {
        const image = imageOf(deploymentId);
        // A host's fstrim may have given a preallocated image's free blocks back: they are taken again.
        if (await exists(image)) await reserve(tools, image, (await fs.stat(image)).size);
        if (await isMountPoint(mountPoint)) return;
        if (!(await exists(image))) {
          await fs.mkdir(dir, { recursive: true, mode: 0o700 });
          await makeImage(tools, image, sizeBytes);
        }
        await fs.mkdir(mountPoint, { mode: 0o711 }).catch((error: NodeJS.ErrnoException) => {
          if (error.code !== 'EEXIST') throw error;
        });
        await mountImage(tools, image, mountPoint);
      }),
    detach: (deploymentId, mountPoint) =>
      serially(deploymentId, async () => {
        await unmount(tools, mountPoint);
        await fs.rm(imageOf(deploymentId), { force: true });
      }),
  };
}
