/**
 * The disk limits of the local data plane (issue 33, item 4; docs/data-plane.md, "What an app can
 * reach"): each deployment's writable directories (its `SLIPWAY_DATA_DIR` and its HOME, kept across
 * revisions) and each build's directory have a size limit the operator sets (src/config-disk.ts).
 *
 * Two ways, the start-up probe picks one and the start log says which:
 * - **Hard** (the service runs as root and the host can loop-mount): each deployment's directory is a
 *   file system of its own, an image the size of its limit (src/dataplane/disk-images.ts). The kernel
 *   keeps the limit: the app's writes fail with ENOSPC at it, never beyond. What it holds is read with
 *   statfs every few seconds; a full one stops the app as below.
 * - **Measured** (else, with the reason): what the directories hold is measured with `du`
 *   (src/dataplane/disk-usage.ts) every few seconds while the app runs. Between two measures an app can
 *   write what its disk speed allows, and an operator sizes the disk for that (docs/operations.md,
 *   "Disk"). A deployment's directory made before the images existed (a plain directory) stays measured
 *   in the hard mode too.
 * Either way a full app is stopped the same way: its instances stop, an event `deployment.disk_full`,
 * and its deployment UNKNOWN. A build gets the same as its deployment: in the hard mode an image of
 * the build limit of its own, mounted at its app directory while it runs, whose finished output is
 * copied off it and sealed (`imageBuildDisk`); else it is measured. A build over its limit, or that
 * ends with its file system full, is stopped and fails (`disk_limit`).
 *
 * Images are thin by default (sparse, mounted with `discard`): each takes what it holds, so the
 * images together can fill the host's file system before any is at its limit. Preallocated
 * (`SLIPWAY_APP_DISK_PREALLOCATE`), each takes its whole size when it is made, and again each time
 * it is mounted (a host's fstrim may have given its free blocks back): together they never take
 * more than was free, and one that does not fit fails to be made, with ENOSPC.
 *
 * At start the probe measures a small tree once, as every later measure will; when that fails (no
 * `du`), nothing is measured and the start log says the disk is not limited. It also warns when the
 * apps' data shares a file system with the embedded PostgreSQL cluster and is not on images: a full disk
 * there stops the control plane and every app's database.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from 'pino';
import type { Config } from '../config.ts';
import { cleanPartialImages, createDiskImages, isMountPoint, probeDiskImages, type DiskImages } from './disk-images.ts';
import { measureFileSystem, measureTrees, watchDiskUse, type DiskWatch, type TreeUsage } from './disk-usage.ts';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { emptyTree, removeTree, sealSnapshot } from './build-snapshot.ts';
import { RevisionFailure } from './revision-build.ts';
import type { SubordinateIds } from './subordinate-ids.ts';

const run = promisify(execFile);
const MIB = 1024 * 1024;
/** What the probe writes and must find again. */
const PROBE_BYTES = 256 * 1024;

/**
 * The disk of one build, which writes its revision's app directory (`src` and `home`). Each step runs
 * once the build's processes are gone (the caller's rule), except `watch`.
 */
export interface BuildDisk {
  /** Makes the (empty) app directory ready to write: on a file system of its own in the image mode. */
  prepare(): Promise<void>;
  /** Measures it while the build runs: over its limit or full, `controller` is aborted with the build's failure. */
  watch(controller: AbortController): DiskWatch;
  /** The build's disk failure when its file system of its own is full (what its failure came from), else null. */
  fullFailure(): Promise<RevisionFailure | null>;
  /**
   * Seals the finished build as the revision's app directory, its `home` left empty (`dropBuildHome`): in
   * the image mode its `src` is copied off the image (links copied as links, never followed), sealed, and
   * the image unmounted and removed; else the directory is sealed where it is.
   */
  seal(): Promise<void>;
  /** Unmounts and removes the build's image, if it has one (the empty mount point stays, with the revision). */
  release(): Promise<void>;
}

export interface DiskLimiter {
  /** What is limited and how, for the start log. */
  readonly description: string;
  /** The most a deployment's data and home directories may hold, in bytes. */
  readonly appLimitBytes: number;
  /**
   * Measures a build's directory while it runs: over its limit, `controller` is aborted with the
   * build's failure (`BUILD_FAILED`, `disk_limit`), which stops the build's command.
   */
  watchBuild(root: string, controller: AbortController): DiskWatch;
  /**
   * The disk of the build of revision `revisionId`, whose app directory is `appDir` (in `root`, the
   * revision's directory): an image of its own in the image mode, else `watchBuild`'s measure.
   */
  buildDisk(revisionId: string, root: string, appDir: string): BuildDisk;
  /**
   * Measures a running app's writable directories (`dirs`, in its deployment's directory `root`, made
   * by `prepareDeploymentDir`); over their limit, `onFull` is called once.
   */
  watchApp(root: string, dirs: readonly string[], onFull: (usage: TreeUsage) => void): DiskWatch;
  /**
   * Makes the deployment's own directory `root` ready to hold its data and home: on its own image in
   * the hard mode (made once, mounted when it is not), else a plain directory of the service.
   */
  prepareDeploymentDir(deploymentId: string, root: string): Promise<void>;
  /**
   * Removes the deployment's directory `root`, once every process of the app is gone: its image is
   * unmounted and removed, a plain directory removed without following a link.
   */
  removeDeploymentDir(deploymentId: string, root: string): Promise<void>;
}

const NOT_WATCHED: DiskWatch = { stop: () => undefined };

/** The failure of a build whose directory went over its limit. */
export function buildDiskFailure(limitBytes: number, usage: TreeUsage): RevisionFailure {
  if (usage.fileSystemFull)
    return new RevisionFailure(
      'BUILD_FAILED',
      'disk_limit',
      `The build filled its file system of ${Math.round(limitBytes / MIB)} MiB (the limit per build, ` +
        'SLIPWAY_BUILD_DISK_MB, set by the operator): its writes failed with ENOSPC and the build was stopped. ' +
        'Make the build write less (leave caches and test data out of the source), or ask the operator for a larger limit.',
    );
  const held = usage.unreadable
    ? 'could not all be read (a directory the build made unreadable counts as over the limit)'
    : `held ${Math.ceil(usage.bytes / MIB)} MiB`;
  return new RevisionFailure(
    'BUILD_FAILED',
    'disk_limit',
    `The build's directory ${held}, over the limit of ${Math.round(limitBytes / MIB)} MiB per build ` +
      '(SLIPWAY_BUILD_DISK_MB, set by the operator): the build was stopped. Make the build write less ' +
      '(leave caches and test data out of the source), or ask the operator for a larger limit.',
  );
}

/** Measures a tree it wrote, once, as every later measure will: what fails here would fail there. */
async function probe(dir: string): Promise<string | null> {
  const scratch = path.join(dir, `.disk-probe-${randomBytes(4).toString('hex')}`);
  try {
    await fs.mkdir(scratch, { recursive: true, mode: 0o700 });
    await fs.writeFile(path.join(scratch, 'probe'), randomBytes(PROBE_BYTES));
    const usage = await measureTrees([scratch]);
    if (usage.unreadable || usage.bytes < PROBE_BYTES)
      return `du counted ${usage.bytes} bytes of a ${PROBE_BYTES}-byte file`;
    return null;
  } catch (error) {
    return error instanceof Error ? error.message : String(error);
  } finally {
    await fs.rm(scratch, { recursive: true, force: true });
  }
}

/** The directory whose file system the embedded cluster writes, or null with an external database. */
function clusterDir(config: Pick<Config, 'databaseUrl' | 'dataDir'>): string | null {
  return config.databaseUrl === null ? path.join(config.dataDir, 'postgres') : null;
}

/** A warning when the apps' data directory and the embedded cluster share a file system. */
async function sharedFileSystemWarning(
  config: Pick<Config, 'databaseUrl' | 'dataDir' | 'disk'>,
): Promise<string | null> {
  const cluster = clusterDir(config);
  if (cluster === null) return null;
  // The cluster's own directory when it exists yet, else the data directory it will be made in.
  const clusterStat = (await fs.stat(cluster).catch(() => null)) ?? (await fs.stat(config.dataDir).catch(() => null));
  const appsStat = await fs.stat(config.disk.appsDataDir).catch(() => null);
  if (!clusterStat || !appsStat || clusterStat.dev !== appsStat.dev) return null;
  return (
    `the apps' data (${config.disk.appsDataDir}) is on the same file system as the embedded PostgreSQL ` +
    `cluster (${cluster}): an app's data counts against its limit, but many apps at their limits, or a ` +
    `build between two measures, can still fill the disk PostgreSQL writes its WAL to. Set ` +
    `SLIPWAY_APPS_DATA_DIR to a directory on another file system (docs/operations.md, "Disk").`
  );
}

/** Whether `root` is a directory made before images existed: a plain one, with something in it. */
async function isPlainDirectory(root: string): Promise<boolean> {
  const entries = await fs.readdir(root).catch(() => null);
  return entries !== null && entries.length > 0 && !(await isMountPoint(root));
}

/**
 * The deployment's directory in the hard mode: its image, mounted; or, for a directory made before
 * images existed, the plain directory, measured.
 */
function imageDeploymentDirs(images: DiskImages, appLimitBytes: number) {
  return {
    async prepareDeploymentDir(deploymentId: string, root: string): Promise<void> {
      if (!(await images.hasImage(deploymentId)) && (await isPlainDirectory(root))) return;
      await images.attach(deploymentId, root, appLimitBytes);
    },
    async removeDeploymentDir(deploymentId: string, root: string): Promise<void> {
      await images.detach(deploymentId, root);
      // The empty mount point, or a plain directory of before: rm walks without following links.
      await removeTree(root);
    },
  };
}

/** The deployment's directory in the measured mode: a plain directory (a subordinate uid's: `ids`). */
function plainDeploymentDirs(imagesDir: string, ids: SubordinateIds | null | undefined) {
  return {
    async prepareDeploymentDir(deploymentId: string, root: string): Promise<void> {
      // Data on an image that this service cannot mount (it ran as root before) is not there to use.
      const image = await fs.lstat(path.join(imagesDir, `${deploymentId}.img`)).catch(() => null);
      if (image && !(await isMountPoint(root)))
        throw new Error(
          `The deployment's data is on a disk image (${imagesDir}) that only a service running as root can mount`,
        );
      await fs.mkdir(root, { recursive: true, mode: 0o711 });
    },
    async removeDeploymentDir(_deploymentId: string, root: string): Promise<void> {
      await removeTree(root, ids);
    },
  };
}

/**
 * A build on a file system of its own (the image mode): an image of the build's limit mounted at its
 * app directory while it runs. What the service does with it is the deployments' order: the build's
 * processes gone, then a read and a copy of its output (`cp -a`, which copies a link as a link and
 * leaves the image's file system for nothing, as a hard link cannot), then the unmount and the image's
 * removal. Nothing the build wrote is walked to be removed: the image goes whole.
 */
function imageBuildDisk(
  images: DiskImages,
  limitBytes: number,
  intervalMs: number,
  onError: (error: unknown) => void,
  revisionId: string,
  appDir: string,
): BuildDisk {
  const measure = async (): Promise<TreeUsage> =>
    (await isMountPoint(appDir)) ? measureFileSystem(appDir) : { bytes: 0, unreadable: false };
  return {
    async prepare() {
      await fs.mkdir(appDir, { recursive: true, mode: 0o755 });
      await images.builds.attach(revisionId, appDir, limitBytes);
      await fs.chmod(appDir, 0o755);
      // ext4's own directory for fsck, root's and unreadable: nothing the build needs to see.
      await fs.rmdir(path.join(appDir, 'lost+found')).catch(() => undefined);
      for (const part of ['home', 'src']) await fs.mkdir(path.join(appDir, part), { mode: 0o755 });
    },
    watch: (controller) =>
      watchDiskUse({
        measure,
        limitBytes,
        intervalMs,
        onFull: (usage) => controller.abort(buildDiskFailure(limitBytes, usage)),
        onError,
      }),
    async fullFailure() {
      const usage = await measure().catch(() => null);
      return usage?.fileSystemFull ? buildDiskFailure(limitBytes, usage) : null;
    },
    async seal() {
      const sealing = `${appDir}.sealing`;
      await removeTree(sealing);
      await fs.mkdir(sealing, { mode: 0o755 });
      // Only `src`: the build's HOME (npm's and pip's caches, mostly) is no app's (dropBuildHome).
      await run('cp', ['-a', '--no-dereference', '--', path.join(appDir, 'src'), sealing]);
      await fs.mkdir(path.join(sealing, 'home'), { mode: 0o755 });
      await sealSnapshot(sealing);
      await images.builds.detach(revisionId, appDir);
      await fs.rmdir(appDir);
      await fs.rename(sealing, appDir);
    },
    release: () => images.builds.detach(revisionId, appDir),
  };
}

/**
 * Empties the finished build's HOME, before its directory is sealed: what a build writes there (npm's
 * and pip's caches, tens to hundreds of MiB for a LangGraph project) is never an app's, whose HOME is a
 * fresh one of its own (src/dataplane/sandbox.ts), so keeping it would only cost every revision its
 * disk, and every seal, copy and removal its walk. Emptied as any tree a build wrote is removed
 * (`emptyTree`: a link it planted there is removed, never followed).
 */
async function dropBuildHome(appDir: string, ids: SubordinateIds | null | undefined): Promise<void> {
  await emptyTree(path.join(appDir, 'home'), ids);
}

/** A build in a plain directory, measured by `watch` (`watchBuild`). */
function plainBuildDisk(
  watchBuild: DiskLimiter['watchBuild'],
  ids: SubordinateIds | null | undefined,
  root: string,
  appDir: string,
): BuildDisk {
  return {
    async prepare() {
      for (const part of ['home', 'src']) await fs.mkdir(path.join(appDir, part), { recursive: true, mode: 0o755 });
    },
    watch: (controller) => watchBuild(root, controller),
    fullFailure: () => Promise.resolve(null),
    async seal() {
      await dropBuildHome(appDir, ids);
      await sealSnapshot(appDir, ids);
    },
    release: () => Promise.resolve(),
  };
}

/**
 * Unmounts and removes the builds' images a service that stopped in the middle left (its builds'
 * processes ended with it), each mounted at its revision's app directory in `dataDir`.
 */
async function cleanBuildImages(
  images: DiskImages,
  dataDir: string,
  logger: Pick<Logger, 'info' | 'error'>,
): Promise<void> {
  for (const revisionId of await images.builds.list()) {
    const appDir = path.join(dataDir, 'revisions', revisionId, 'app');
    try {
      await images.builds.detach(revisionId, appDir);
      logger.info({ revisionId }, 'removed the disk image of a build a service that stopped in the middle left');
    } catch (error) {
      logger.error({ err: error, revisionId }, 'could not remove the disk image a build left');
    }
  }
}

export async function createDiskLimiter(options: {
  config: Pick<Config, 'databaseUrl' | 'dataDir' | 'disk'>;
  logger: Pick<Logger, 'info' | 'warn' | 'error'>;
  /** Apps run as subordinate uids: their trees are measured and removed in the namespace that maps them. */
  ids?: SubordinateIds | null;
}): Promise<DiskLimiter> {
  const { config, logger, ids } = options;
  const { appsDataDir, appDiskMb, buildDiskMb, checkIntervalMs, preallocate } = config.disk;
  await fs.mkdir(appsDataDir, { recursive: true, mode: 0o711 });
  const imagesDir = path.join(appsDataDir, '.images');
  const appLimitBytes = appDiskMb * MIB;
  const buildLimitBytes = buildDiskMb * MIB;
  const support = await probeDiskImages(imagesDir, { preallocate });
  const images = support.tools ? createDiskImages(support.tools, imagesDir) : null;
  if (support.tools && images) {
    for (const file of await cleanPartialImages(support.tools, imagesDir))
      logger.info({ file }, 'removed a disk image left by a service that stopped in the middle');
    await cleanBuildImages(images, config.dataDir, logger);
  }
  // Images are sparse files there too: they take what their apps hold, up to their limits.
  const shared = await sharedFileSystemWarning(config);
  if (shared) logger.warn(shared);
  const deploymentDirs = images ? imageDeploymentDirs(images, appLimitBytes) : plainDeploymentDirs(imagesDir, ids);
  const allocation = preallocate
    ? "preallocated: each takes its whole size on the host's file system when it is made, so together " +
      'they never take more than was free then, and one that does not fit fails to be made'
    : "thin: each takes only what it holds, so together they can fill the host's file system before any " +
      'is at its limit (SLIPWAY_APP_DISK_PREALLOCATE=1 reserves their whole size)';
  const appMode = support.tools
    ? `loop-mounted, each deployment's data and home a file system of ${appDiskMb} MiB of its own ` +
      `(images in ${imagesDir}, ${allocation}; a directory made before images, measured)`
    : `measured every ${checkIntervalMs / 1000} s, ${appDiskMb} MiB per deployment's data and home ` +
      `(in ${appsDataDir}; no file system of its own: ${support.reason})`;
  const failed = await probe(appsDataDir);
  const onError = (error: unknown) => logger.error({ err: error }, 'could not measure what an app or a build holds');
  /** A deployment on its image is read with statfs; a plain directory is measured, when `du` can. */
  const measureApp = async (root: string, dirs: readonly string[]): Promise<TreeUsage> => {
    if (support.tools && (await isMountPoint(root))) return measureFileSystem(root);
    return failed ? { bytes: 0, unreadable: false } : measureTrees(dirs, ids);
  };
  const watchApp = (root: string, dirs: readonly string[], onFull: (usage: TreeUsage) => void): DiskWatch =>
    !support.tools && failed
      ? NOT_WATCHED
      : watchDiskUse({
          measure: () => measureApp(root, dirs),
          limitBytes: appLimitBytes,
          intervalMs: checkIntervalMs,
          onFull,
          onError,
        });
  const watchBuild: DiskLimiter['watchBuild'] = (root, controller) =>
    failed
      ? NOT_WATCHED
      : watchDiskUse({
          measure: () => measureTrees([root], ids),
          limitBytes: buildLimitBytes,
          intervalMs: checkIntervalMs,
          onFull: (usage) => controller.abort(buildDiskFailure(buildLimitBytes, usage)),
          onError,
        });
  const buildDisk: DiskLimiter['buildDisk'] = (revisionId, root, appDir) =>
    images
      ? imageBuildDisk(images, buildLimitBytes, checkIntervalMs, onError, revisionId, appDir)
      : plainBuildDisk(watchBuild, ids, root, appDir);
  const buildMode = images
    ? `each build on a file system of ${buildDiskMb} MiB of its own (an image as above, removed when it ends)`
    : failed
      ? `builds NOT LIMITED (measuring a tree failed: ${failed})`
      : `builds measured every ${checkIntervalMs / 1000} s, ${buildDiskMb} MiB per build`;
  const appPart = images
    ? `${appMode}${failed ? ` (NOT measured: ${failed})` : ''}`
    : failed
      ? `apps NOT LIMITED (measuring a tree failed: ${failed})`
      : appMode;
  const description = `disk: ${appPart}; ${buildMode}; an app or build over its limit is stopped`;
  if (failed)
    logger.warn(
      `${description}: ${images ? "deployments' directories made before images" : 'apps and builds'} can fill the disk`,
    );
  return { description, appLimitBytes, watchBuild, buildDisk, watchApp, ...deploymentDirs };
}
