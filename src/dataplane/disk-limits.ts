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
 * and its deployment UNKNOWN. Builds are measured in both modes: a build over its limit is stopped and
 * fails (`disk_limit`).
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
import { removeTree } from './build-snapshot.ts';
import { RevisionFailure } from './revision-build.ts';
import type { SubordinateIds } from './subordinate-ids.ts';

const MIB = 1024 * 1024;
/** What the probe writes and must find again. */
const PROBE_BYTES = 256 * 1024;

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

export async function createDiskLimiter(options: {
  config: Pick<Config, 'databaseUrl' | 'dataDir' | 'disk'>;
  logger: Pick<Logger, 'info' | 'warn' | 'error'>;
  /** Apps run as subordinate uids: their trees are measured and removed in the namespace that maps them. */
  ids?: SubordinateIds | null;
}): Promise<DiskLimiter> {
  const { config, logger, ids } = options;
  const { appsDataDir, appDiskMb, buildDiskMb, checkIntervalMs } = config.disk;
  await fs.mkdir(appsDataDir, { recursive: true, mode: 0o711 });
  const imagesDir = path.join(appsDataDir, '.images');
  const appLimitBytes = appDiskMb * MIB;
  const buildLimitBytes = buildDiskMb * MIB;
  const support = await probeDiskImages(imagesDir);
  if (support.tools) {
    for (const file of await cleanPartialImages(support.tools, imagesDir))
      logger.info({ file }, 'removed a disk image left by a service that stopped in the middle');
  }
  // Images are sparse files there too: they take what their apps hold, up to their limits.
  const shared = await sharedFileSystemWarning(config);
  if (shared) logger.warn(shared);
  const deploymentDirs = support.tools
    ? imageDeploymentDirs(createDiskImages(support.tools, imagesDir), appLimitBytes)
    : plainDeploymentDirs(imagesDir, ids);
  const appMode = support.tools
    ? `loop-mounted, each deployment's data and home a file system of ${appDiskMb} MiB of its own ` +
      `(images in ${imagesDir}; a directory made before images, measured)`
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
  if (failed) {
    const description =
      `disk: ${support.tools ? appMode : 'apps NOT LIMITED'}; ` +
      `builds NOT LIMITED (measuring a tree failed: ${failed})`;
    logger.warn(`${description}: ${support.tools ? 'builds' : 'apps and builds'} can fill the disk`);
    return { description, appLimitBytes, watchBuild: () => NOT_WATCHED, watchApp, ...deploymentDirs };
  }
  return {
    description:
      `disk: ${appMode}; builds measured every ${checkIntervalMs / 1000} s, ${buildDiskMb} MiB per build; ` +
      'an app or build over its limit is stopped',
    appLimitBytes,
    watchBuild: (root, controller) =>
      watchDiskUse({
        measure: () => measureTrees([root], ids),
        limitBytes: buildLimitBytes,
        intervalMs: checkIntervalMs,
        onFull: (usage) => controller.abort(buildDiskFailure(buildLimitBytes, usage)),
        onError,
      }),
    watchApp,
    ...deploymentDirs,
  };
}
