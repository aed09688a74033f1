/**
 * The operator's limits on what tenants may ask for, in src/config.ts: the most one app instance (and
 * one build) may have, the most instances a deployment may run, and what all apps together get of the
 * host (their parent cgroup's memory and task limits). A resource spec over a maximum is refused by the
 * API (src/domain/resource-maxima.ts) and clamped again by the local data plane (src/dataplane/
 * resource-limits.ts); a workspace's quota may not exceed the host-wide totals. Defaults are sized from
 * the host (docs/operations.md, "Limits and quotas"). The database storage of each deployment is held the
 * same way: refused by the API over the maximum, and enforced on the own data plane by
 * src/dataplane/app-database-storage.ts.
 */
import fs from 'node:fs';
import os from 'node:os';
import { ConfigError, decimal, integer, type Env } from './config-values.ts';

const MIB = 1024 * 1024;

export interface LimitMaxima {
  /** Memory of one app instance, in MiB: the most `memory_mb`/`memory_limit_mb` (and their kin) may ask. */
  readonly instanceMemoryMb: number;
  /** CPU cores of one app instance: the most `cpu`/`cpu_limit` (and their kin) may ask. */
  readonly instanceCpu: number;
  /** Instances per deployment: the most any `*_scale` field may ask. */
  readonly instances: number;
  /** Memory of one build, in MiB (a build gets at least the default instance memory). */
  readonly buildMemoryMb: number;
  /** CPU cores of one build. */
  readonly buildCpu: number;
  /** Memory of all apps and builds together (their parent cgroup), in MiB: what the host keeps beyond it serves the service and PostgreSQL. */
  readonly appsMemoryMb: number;
  /** Tasks (processes and threads) of all apps and builds together (their parent cgroup). */
  readonly appsPids: number;
  /** Database storage of one deployment, in GiB: the most `db_storage_gi` may ask. */
  readonly databaseStorageGi: number;
  /** Database storage of a deployment whose spec says nothing, in GiB (at most the maximum). */
  readonly defaultDatabaseStorageGi: number;
}

/** What the defaults are sized from; loadConfig reads the real host, tests pass their own. */
export interface HostFacts {
  /** Total memory in bytes. */
  memoryBytes: number;
  /** CPUs the service may use. */
  cpus: number;
  /** The kernel's kernel.pid_max. */
  pidMax: number;
}

export function hostFacts(): HostFacts {
  let pidMax = 32_768;
  try {
    const read = Number.parseInt(fs.readFileSync('/proc/sys/kernel/pid_max', 'utf8').trim(), 10);
    // Not Linux, or /proc hidden: the kernel's historical default, which is the smallest it ships.
    if (Number.isSafeInteger(read) && read > 0) pidMax = read;
  } catch {
    // As above: the smallest default is the safe guess.
  }
  return { memoryBytes: os.totalmem(), cpus: os.availableParallelism(), pidMax };
}

/**
 * The host memory the service and PostgreSQL keep for themselves by default: a quarter of the host, at
 * least 1 GiB (the embedded cluster's shared buffers and the API's heap fit in it on a small machine).
 */
export function defaultReserveMb(host: HostFacts): number {
  return Math.max(1024, Math.floor(host.memoryBytes / MIB / 4));
}

/**
 * Reads the maxima. `defaults` are the per-instance defaults (SLIPWAY_APP_*): a maximum below them would
 * refuse a spec that says nothing, so that is a configuration error, named.
 */
export function limitMaxima(
  env: Env,
  host: HostFacts,
  defaults: { memoryBytes: number; cpu: number; pids: number },
): LimitMaxima {
  const hostMb = Math.floor(host.memoryBytes / MIB);
  const defaultMb = Math.round(defaults.memoryBytes / MIB);
  // All apps together: the host less the reserve, never below one default instance.
  const appsMemoryMb = integer(
    env,
    'SLIPWAY_APPS_MEMORY_MB',
    Math.max(defaultMb, hostMb - defaultReserveMb(host)),
    16,
    1024 * 1024 * 1024,
  );
  // One instance: half of what all apps get, so one tenant's instance never takes the apps' whole share.
  const instanceMemoryMb = integer(
    env,
    'SLIPWAY_MAX_INSTANCE_MEMORY_MB',
    Math.max(defaultMb, Math.floor(appsMemoryMb / 2)),
    16,
    4 * 1024 * 1024,
  );
  const instanceCpu = decimal(env, 'SLIPWAY_MAX_INSTANCE_CPU', Math.max(defaults.cpu, host.cpus), 0.01, 512);
  const instances = integer(env, 'SLIPWAY_MAX_INSTANCES', 10, 1, 1000);
  const buildMemoryMb = integer(env, 'SLIPWAY_MAX_BUILD_MEMORY_MB', instanceMemoryMb, 16, 4 * 1024 * 1024);
  const buildCpu = decimal(env, 'SLIPWAY_MAX_BUILD_CPU', instanceCpu, 0.01, 512);
  // Half of the kernel's task ids: the other half keeps the service, PostgreSQL and the host's own daemons able to fork.
  const appsPids = integer(
    env,
    'SLIPWAY_APPS_PIDS',
    Math.max(defaults.pids, Math.floor(host.pidMax / 2)),
    16,
    4_194_304,
  );

  // A fixed size, not one read from the disk: with DATABASE_URL the cluster's disk is not this host's.
  // 10 GiB holds a busy agent's threads and checkpoints for months with TTLs; an operator sizes it to
  // the cluster's disk (docs/operations.md, "Limits and quotas").
  const databaseStorageGi = decimal(env, 'SLIPWAY_MAX_DATABASE_STORAGE_GI', 10, 0.01, 65_536);
  // 1 GiB, as a listener's database volume gets by default (docs/listener.md); never above the maximum.
  const defaultDatabaseStorageGi = decimal(
    env,
    'SLIPWAY_APP_DATABASE_STORAGE_GI',
    Math.min(1, databaseStorageGi),
    0.01,
    65_536,
  );

  const atLeast = (name: string, value: number, least: number, what: string) => {
    if (value < least) throw new ConfigError(name, `(${value}) must be at least ${what} (${least})`);
  };
  atLeast('SLIPWAY_MAX_INSTANCE_MEMORY_MB', instanceMemoryMb, defaultMb, 'SLIPWAY_APP_MEMORY_MB');
  atLeast('SLIPWAY_MAX_INSTANCE_CPU', instanceCpu, defaults.cpu, 'SLIPWAY_APP_CPU');
  atLeast('SLIPWAY_MAX_BUILD_MEMORY_MB', buildMemoryMb, defaultMb, 'SLIPWAY_APP_MEMORY_MB');
  atLeast('SLIPWAY_MAX_BUILD_CPU', buildCpu, defaults.cpu, 'SLIPWAY_APP_CPU');
  atLeast('SLIPWAY_APPS_MEMORY_MB', appsMemoryMb, instanceMemoryMb, 'SLIPWAY_MAX_INSTANCE_MEMORY_MB');
  atLeast('SLIPWAY_APPS_MEMORY_MB', appsMemoryMb, buildMemoryMb, 'SLIPWAY_MAX_BUILD_MEMORY_MB');
  atLeast('SLIPWAY_APPS_PIDS', appsPids, defaults.pids, 'SLIPWAY_APP_PIDS');
  atLeast(
    'SLIPWAY_MAX_DATABASE_STORAGE_GI',
    databaseStorageGi,
    defaultDatabaseStorageGi,
    'SLIPWAY_APP_DATABASE_STORAGE_GI',
  );
  return Object.freeze({
    instanceMemoryMb,
    instanceCpu,
    instances,
    buildMemoryMb,
    buildCpu,
    appsMemoryMb,
    appsPids,
    databaseStorageGi,
    defaultDatabaseStorageGi,
  });
}
