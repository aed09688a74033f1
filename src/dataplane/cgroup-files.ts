/**
 * The cgroup file system as the resource limits (src/dataplane/resource-limits.ts) use it: the file
 * operations (injectable, so that tests give the logic a fake hierarchy) and the few steps both cgroup
 * versions take on them (write a setting, make a group's directory fresh, remove parents at shutdown).
 */
import { constants as fsConstants } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';

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
}

export interface CgroupLogger {
  warn(message: string): void;
}

/** What setting up either cgroup version works with. */
export interface CgroupSetup {
  /** Where the cgroup file systems are mounted. */
  root: string;
  /** Name of the parent group the groups are made in. */
  parent: string;
  io: CgroupFs;
  /** The service's user id; null where there is none (not POSIX). */
  uid: number | null;
  logger: CgroupLogger | undefined;
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

/**
 * The CPU standing of the parent group of all apps and builds: the idle class when the kernel has it
 * (`cpu.idle`, Linux 5.15 and later), else a quarter of the default weight in `weightFile`
 * (src/dataplane/resource-limits.ts says why). Against the groups and tasks beside it (the service's),
 * an idle group runs only when they leave a CPU free, and a task of theirs that wakes takes the CPU back
 * at once, where a weight lets it wait for its share. The kernel gives an idle group the least weight
 * and refuses a weight for it, so an idle group (one an earlier run left, say) is left as it is. True
 * when the group is idle.
 */
export async function setAppsCpuStanding(
  io: CgroupFs,
  dir: string,
  weightFile: 'cpu.shares' | 'cpu.weight',
  weight: number,
): Promise<boolean> {
  const idleFile = path.join(dir, 'cpu.idle');
  if (await io.exists(idleFile)) {
    if ((await io.readFile(idleFile)).trim() !== '1') await writeSetting(io, idleFile, '1');
    return true;
  }
  await writeSetting(io, path.join(dir, weightFile), String(weight));
  return false;
}

/** The words the description of a control gives the CPU standing of the apps' group. */
export function cpuStandingWords(idle: boolean): string {
  return idle
    ? 'in the idle CPU class beside the service: they run on the cycles it leaves, and yield them as soon as it wants them'
    : 'weighted to yield the CPU to the service when both are busy (the kernel has no idle class for groups)';
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
    // The parent group is shared by the services of a machine, and the last one to stop removes it when
    // it is empty: another service that still runs makes it again.
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

export async function disposeDirs(io: CgroupFs, dirs: readonly string[], logger: CgroupLogger | undefined) {
  for (const dir of dirs) {
    try {
      await io.rmdir(dir);
    } catch (error) {
      // Still in use (another group, another service sharing the name) or gone: both fine.
      const code = errorCode(error);
      if (code !== 'EBUSY' && code !== 'ENOENT' && code !== 'ENOTEMPTY') {
        logger?.warn(`could not remove cgroup ${dir}: ${message(error)}`);
      }
    }
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
