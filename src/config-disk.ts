/**
 * The operator's disk settings for the local data plane, in src/config.ts: where the apps' own data
 * lives, how big each deployment's data (its `SLIPWAY_DATA_DIR` and its HOME) and each build may grow,
 * and how often that is measured (src/dataplane/disk-limits.ts; docs/operations.md, "Disk").
 */
import path from 'node:path';
import { flag, integer, text, type Env } from './config-values.ts';

export interface DiskLimits {
  /**
   * Where each deployment's writable directories are made (`<this>/<deployment id>/{data,home}`).
   * Defaults to `deployments` in the data directory, beside the embedded PostgreSQL: the service warns
   * at start when the two share a file system.
   */
  readonly appsDataDir: string;
  /** The most one deployment's data and home directories together may hold, in MiB. */
  readonly appDiskMb: number;
  /** The most one build's directory (source, dependencies, output) may hold, in MiB. */
  readonly buildDiskMb: number;
  /** How often what apps and builds hold is measured, in milliseconds. */
  readonly checkIntervalMs: number;
  /**
   * Where deployments and builds get images of their own (the service runs as root): each takes its
   * whole size on the host's file system when it is made (and is mounted without `discard`), so the
   * images together can never fill that file system; else (the default) they are thin, taking what
   * they hold, and together can.
   */
  readonly preallocate: boolean;
}

export function diskLimits(env: Env, cwd: string, dataDir: string): DiskLimits {
  const appsDataDir = text(env, 'SLIPWAY_APPS_DATA_DIR');
  return {
    appsDataDir: appsDataDir === null ? path.join(dataDir, 'deployments') : path.resolve(cwd, appsDataDir),
    appDiskMb: integer(env, 'SLIPWAY_APP_DISK_MB', 1024, 1, 1024 * 1024 * 1024),
    buildDiskMb: integer(env, 'SLIPWAY_BUILD_DISK_MB', 4096, 1, 1024 * 1024 * 1024),
    checkIntervalMs: integer(env, 'SLIPWAY_DISK_CHECK_SECONDS', 5, 1, 3600) * 1000,
    preallocate: flag(env, 'SLIPWAY_APP_DISK_PREALLOCATE'),
  };
}
