/**
 * The cgroup file system as the resource limits (src/dataplane/resource-limits.ts) use it: the file
 * operations (injectable, so that tests give the logic a fake hierarchy) and the few steps both cgroup
 * versions take on them (write a setting, make a group's directory fresh, remove parents at shutdown).
 */
import { constants as fsConstants } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

/**
 * The file operations on the cgroup file system, so that tests can give the cgroup v2 logic a fake
 * hierarchy (test/fakes/cgroup-v2.ts). Errors carry Node's `code` (ENOENT, EACCES, EBUSY, EEXIST...).
 */
export interface CgroupFs {
  readFile(file: string): Promise<string>;
  /** One write(2) of `data` to an existing file (cgroup files take one value per write). */
  writeFile(file: string, data: string): Promise<void>;
  mkdir(dir: string): Promise<void>;
  rmdir(dir: string): Promise<void>;
  exists(file: string): Promise<boolean>;
  /** The names of the groups directly under `dir` (its subdirectories). */
  subgroups(dir: string): Promise<string[]>;
}

export interface CgroupLogger {
  warn(message: string): void;
}

/** What setting up either cgroup version works with. */
export interface CgroupSetup {
  /** Where the cgroup file systems are mounted. */
  root: string;
  /** Name of the parent group the groups are made in (one per service: src/dataplane/resource-limits.ts). */
  parent: string;
  /** The CPUs the service may use: the parent group weighs as many ordinary processes. */
  cpus: number;
  io: CgroupFs;
  /** The service's user id; null where there is none (not POSIX). */
  uid: number | null;
  logger: CgroupLogger | undefined;
  /**
   * Memory (bytes) and tasks of all apps and builds together, written on the parent group: what the host
   * keeps beyond them serves the service and PostgreSQL (config.limits.appsMemoryMb and appsPids). Null:
   * the parent has no limits of its own.
   */
  parentLimits: { memoryBytes: number; pids: number } | null;
}

/** The parent's limits in words, for the start log. */
export function parentLimitWords(limits: CgroupSetup['parentLimits']): string {
  if (limits === null) return 'no limits of their own on all apps together';
  return `all apps and builds together at most ${Math.round(limits.memoryBytes / 1024 ** 2)} MiB of memory and ${limits.pids} tasks`;
}

export const CONTROLLERS = ['memory', 'cpu', 'pids'] as const;
export type Controller = (typeof CONTROLLERS)[number];

/** The CFS period: quotas are per 100 ms, the kernel's default; the quota's floor is 1 ms. */
export const CPU_PERIOD_US = 100_000;
const CPU_MIN_QUOTA_US = 1_000;

export function cpuQuotaUs(cpu: number): number {
  return Math.max(CPU_MIN_QUOTA_US, Math.round(cpu * CPU_PERIOD_US));
}

export const nodeFs: CgroupFs = {
  readFile: (file) => fs.readFile(file, 'utf8'),
  async writeFile(file, data) {
    // Not fs.writeFile: O_CREAT|O_TRUNC mean nothing on cgroup files, and some (cgroup.kill) are write-only.
    const handle = await fs.open(file, fsConstants.O_WRONLY);
    try {
      await handle.write(data);
    } finally {
      await handle.close();
    }
  },
  mkdir: (dir) => fs.mkdir(dir),
  rmdir: (dir) => fs.rmdir(dir),
  exists: (file) =>
    fs.access(file).then(
      () => true,
      () => false,
    ),
  subgroups: async (dir) =>
    (await fs.readdir(dir, { withFileTypes: true })).filter((e) => e.isDirectory()).map((e) => e.name),
};

export function errorCode(error: unknown): string | undefined {
  return error instanceof Error && 'code' in error && typeof error.code === 'string' ? error.code : undefined;
}

export function message(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

export async function writeSetting(io: CgroupFs, file: string, value: string): Promise<void> {
  try {
    await io.writeFile(file, value);
  } catch (error) {
    throw new Error(`could not write ${JSON.stringify(value)} to ${file}: ${message(error)}`, { cause: error });
  }
}

/** The kernel's default weight of a group or a process at nice 0: v1 `cpu.shares`, v2 `cpu.weight`. */
export const DEFAULT_CPU_WEIGHT = { 'cpu.shares': 1024, 'cpu.weight': 100 } as const;
export type WeightFile = keyof typeof DEFAULT_CPU_WEIGHT;
/** The range each file takes (kernel: sched_group_set_shares, cpu_weight_write_u64). */
const WEIGHT_RANGE: Record<WeightFile, [number, number]> = { 'cpu.shares': [2, 262_144], 'cpu.weight': [1, 10_000] };

/**
 * The weight for `cores` cores' worth of CPU: the default weight per core, within what the file takes.
 * The apps' parent group gets it for the CPUs the service may use (so that, against a busy ordinary
 * process on every CPU, the apps together still get half of each CPU they use: their fair share), and
 * each instance and build for its `cpu` request (so that within the parent they share in proportion to
 * their requests). This is how the kubelet weighs pods (cpu.shares of 1024 per requested core) and its
 * pods' parent (its allocatable CPUs).
 */
export function cpuWeight(file: WeightFile, cores: number): number {
  const [least, most] = WEIGHT_RANGE[file];
  return Math.min(most, Math.max(least, Math.round(cores * DEFAULT_CPU_WEIGHT[file])));
}

/** The cores an instance's weight stands for: its `cpu` request, else its limit (src/dataplane/resource-limits.ts). */
export function requestOf(limits: { cpu: number; cpuRequest?: number | undefined }): number {
  return limits.cpuRequest ?? limits.cpu;
}

/**
 * Gives a group `weight` in `file`. A group that an earlier version of Slipway put in the idle class
 * (`cpu.idle` 1, Linux 5.15 and later) leaves it first: the kernel refuses a weight for an idle group,
 * and an idle group gets only the cycles every other process leaves (a host whose CPUs ordinary work
 * keeps busy starved builds and apps until their deadlines).
 */
export async function setCpuWeight(io: CgroupFs, dir: string, file: WeightFile, weight: number): Promise<void> {
  const idleFile = path.join(dir, 'cpu.idle');
  if ((await io.exists(idleFile)) && (await io.readFile(idleFile)).trim() !== '0') {
    await writeSetting(io, idleFile, '0');
  }
  await writeSetting(io, path.join(dir, file), String(weight));
}

/** The words of the description of a control about the CPU weights, for the start log. */
export function cpuWeightWords(file: WeightFile, parentWeight: number, cpus: number): string {
  return (
    `all apps and builds together weigh ${parentWeight} (${file}), ${cpus} ordinary process${cpus === 1 ? '' : 'es'}' worth, ` +
    `so that on a busy host they get their share of each CPU; each instance weighs its cpu request, ` +
    `${DEFAULT_CPU_WEIGHT[file]} a core`
  );
}

/**
 * Checks that the service may make groups in `dir` (an existing one may belong to another user, as a
 * root service's did when a non-root one came after it): makes a child and removes it. Throws the
 * error of the step that failed.
 */
export async function checkWritable(io: CgroupFs, dir: string): Promise<void> {
  const probe = path.join(dir, `probe-${process.pid}`);
  await makeDir(io, probe);
  await io.rmdir(probe);
}

/**
 * Removes empty groups under `dir` that an earlier run of this service left behind (it crashed, or
 * was killed, before it removed them); one that still holds processes is left, and is replaced or
 * emptied when its name is used again (freshDir).
 */
export async function removeLeftovers(io: CgroupFs, dir: string, children: readonly string[]): Promise<void> {
  for (const child of children) {
    // EBUSY (still populated), ENOENT (gone meanwhile), EACCES (not the service's: checkWritable says so).
    await io.rmdir(path.join(dir, child)).catch(() => undefined);
  }
}

/** Makes a directory; false when it was already there. */
export async function makeDir(io: CgroupFs, dir: string): Promise<boolean> {
  try {
    await io.mkdir(dir);
    return true;
  } catch (error) {
    if (errorCode(error) === 'EEXIST') return false;
    throw error;
  }
}

/** Makes a group's directory; an empty leftover is replaced (rmdir fails with EBUSY on a populated one). */
export async function freshDir(io: CgroupFs, dir: string, remakeParent?: () => Promise<void>): Promise<void> {
  let made: boolean;
  try {
    made = await makeDir(io, dir);
  } catch (error) {
    // Someone removed the parent (an operator cleaning up, or a test sharing the name with another
    // control that stopped): it is made again.
    if (errorCode(error) !== 'ENOENT' || remakeParent === undefined) throw error;
    await remakeParent();
    made = await makeDir(io, dir);
  }
  if (made) return;
  try {
    await io.rmdir(dir);
  } catch (error) {
    throw new Error(`cgroup ${dir} already exists and is in use: ${message(error)}`, { cause: error });
  }
  await io.mkdir(dir);
}

/** The words of a file (a list of controllers); none when it does not exist. */
export async function words(io: CgroupFs, file: string): Promise<string[]> {
  try {
    return (await io.readFile(file)).split(/\s+/).filter(Boolean);
  } catch (error) {
    if (errorCode(error) === 'ENOENT') return [];
    throw error;
  }
}

/** How often, 25 ms apart, a group's directory is tried again while the kernel still counts an exiting process in it. */
const RMDIR_ATTEMPTS = 40;

/**
 * Removes a group's directory. The last processes of a group may still be exiting (rmdir fails with
 * EBUSY until the kernel has let them go), so while `mayWait` says the error is that, it is tried again
 * 25 ms apart, for a second at most. Resolves to null once the directory is gone (or was), else to the
 * last error.
 */
export async function removeGroupDir(
  io: CgroupFs,
  dir: string,
  mayWait: (error: unknown) => Promise<boolean>,
): Promise<unknown> {
  for (let attempt = 1; ; attempt += 1) {
    try {
      await io.rmdir(dir);
      return null;
    } catch (error) {
      if (errorCode(error) === 'ENOENT') return null;
      if (attempt >= RMDIR_ATTEMPTS || !(await mayWait(error))) return error;
      await sleep(25);
    }
  }
}

/**
 * Removes the parent groups (at service stop, after every group in them was removed). A parent without
 * subgroups is tried again while its last processes exit; one with subgroups left (a group that could
 * not be removed, logged where it failed) is left, and so is one that is gone.
 */
export async function disposeDirs(io: CgroupFs, dirs: readonly string[], logger: CgroupLogger | undefined) {
  const subgroupsOf = (dir: string) => io.subgroups(dir).catch(() => [] as string[]);
  for (const dir of dirs) {
    const busy = (error: unknown) => ['EBUSY', 'ENOTEMPTY'].includes(errorCode(error) ?? '');
    const error = await removeGroupDir(
      io,
      dir,
      async (failure) => busy(failure) && (await subgroupsOf(dir)).length === 0,
    );
    if (error === null) continue;
    const left = busy(error) ? await subgroupsOf(dir) : [];
    logger?.warn(
      `could not remove cgroup ${dir}: ${message(error)}` +
        (left.length > 0 ? ` (groups left: ${left.join(' ')})` : ''),
    );
  }
}

/** Why a place for the groups could not be made, in words for the start log. */
export function explainRefusal(error: unknown, dir: string): string {
  switch (errorCode(error)) {
    case 'EACCES':
    case 'EPERM':
    case 'EROFS':
      return `${dir} is not writable by the service (it is not root, and the cgroup is not delegated to its user)`;
    case 'EBUSY':
      return `${dir} holds processes, and cgroup v2 passes controllers on only from a group without processes`;
    default:
      return `${dir}: ${message(error)}`;
  }
}
