/**
 * The disk limits of the local data plane (issue 33, item 4; docs/data-plane.md, "What an app can
 * reach"): each deployment's writable directories (its `SLIPWAY_DATA_DIR` and its HOME, kept across
 * revisions) and each build's directory have a size limit the operator sets (src/config-disk.ts).
 *
 * How it is kept: what they hold is measured (src/dataplane/disk-usage.ts) every few seconds while the
 * app or the build runs. A build over its limit is stopped and fails (`disk_limit`); a serving app over
 * its limit has its instances stopped, an event `deployment.disk_full`, and its deployment UNKNOWN. This
 * is a limit the service defends, not one the kernel enforces: between two measures an app can write
 * what its disk speed allows, and an operator sizes the disk for that (docs/operations.md, "Disk").
 * Filesystem project quotas or a file system per deployment would make it a hard limit; neither is
 * made here yet (the debt is written in docs/operations.md).
 *
 * At start the probe measures a small tree once, as every later measure will; when that fails (no
 * `du`), nothing is measured and the start log says the disk is not limited. It also warns when the
 * apps' data shares a file system with the embedded PostgreSQL cluster: a full disk there stops the
 * control plane and every app's database.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from 'pino';
import type { Config } from '../config.ts';
import { measureTrees, watchDiskUse, type DiskWatch, type TreeUsage } from './disk-usage.ts';
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
  /** Measures a running app's writable directories; over their limit, `onFull` is called once. */
  watchApp(dirs: readonly string[], onFull: (usage: TreeUsage) => void): DiskWatch;
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

export async function createDiskLimiter(options: {
  config: Pick<Config, 'databaseUrl' | 'dataDir' | 'disk'>;
  logger: Pick<Logger, 'warn' | 'error'>;
  /** Apps run as subordinate uids: their trees are measured in the namespace that maps them. */
  ids?: SubordinateIds | null;
}): Promise<DiskLimiter> {
  const { config, logger, ids } = options;
  const { appsDataDir, appDiskMb, buildDiskMb, checkIntervalMs } = config.disk;
  await fs.mkdir(appsDataDir, { recursive: true, mode: 0o711 });
  const shared = await sharedFileSystemWarning(config);
  if (shared) logger.warn(shared);
  const appLimitBytes = appDiskMb * MIB;
  const buildLimitBytes = buildDiskMb * MIB;
  const failed = await probe(appsDataDir);
  if (failed) {
    const description = `disk: NOT LIMITED (measuring a tree failed: ${failed})`;
    logger.warn(`${description}: apps and builds can fill the disk`);
    return {
      description,
      appLimitBytes,
      watchBuild: () => NOT_WATCHED,
      watchApp: () => NOT_WATCHED,
    };
  }
  const onError = (error: unknown) => logger.error({ err: error }, 'could not measure what an app or a build holds');
  return {
    description:
      `disk: measured every ${checkIntervalMs / 1000} s, ${appDiskMb} MiB per deployment's data and home ` +
      `(in ${appsDataDir}), ${buildDiskMb} MiB per build; an app or build over its limit is stopped`,
    appLimitBytes,
    watchBuild: (root, controller) =>
      watchDiskUse({
        dirs: [root],
        limitBytes: buildLimitBytes,
        intervalMs: checkIntervalMs,
        onFull: (usage) => controller.abort(buildDiskFailure(buildLimitBytes, usage)),
        onError,
        ids,
      }),
    watchApp: (dirs, onFull) =>
      watchDiskUse({ dirs, limitBytes: appLimitBytes, intervalMs: checkIntervalMs, onFull, onError, ids }),
  };
}
