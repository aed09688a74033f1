/**
 * One cgroup of an app instance or build, made by either cgroup version's control
 * (cgroup-v1-control.ts, cgroup-v2-control.ts): adding a process, reading what it uses and how often the
 * OOM killer struck, and emptying and removing it at the end.
 */
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { errorCode, message, removeGroupDir, writeSetting, type CgroupFs } from './cgroup-files.ts';
import type { ResourceGroup, Usage } from './resource-limits.ts';

/** How long remove() keeps killing and waiting: a forking group needs a few rounds. */
const KILL_ROUNDS = 60;

/** Where a group's usage is read: a file and how to read a number from it. */
export interface UsageFiles {
  /** cgroup v2 `cpu.stat` (usage_usec) or v1 `cpuacct.usage` (nanoseconds); null: not kept here. */
  cpu: { file: string; kind: 'cpu.stat' | 'cpuacct.usage' } | null;
  /** v2 `memory.current` or v1 `memory.usage_in_bytes`. */
  memory: string;
  /** The cpu controller's `cpu.stat`: time its CPU quota held the group back (v2 throttled_usec, v1 throttled_time). */
  throttling: { file: string; kind: 'v2' | 'v1' };
  /**
   * Time its processes waited for a CPU: v2's `cpu.pressure` (the time at least one of them was
   * runnable and not running, `some total`), or on v1, which keeps no such figure per group, the cpu
   * group's thread list (`tasks`), whose threads' run delays (/proc/<tid>/schedstat) are added up.
   */
  wait: { file: string; kind: 'cpu.pressure' | 'tasks' };
}

async function procsOf(io: CgroupFs, dir: string): Promise<number[]> {
  let text: string;
  try {
    text = await io.readFile(path.join(dir, 'cgroup.procs'));
  } catch (error) {
    if (errorCode(error) === 'ENOENT') return [];
    throw error;
  }
  return text
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map(Number);
}

/** The `oom_kill <n>` line of memory.oom_control (v1) or memory.events (v2). */
async function readOomKills(io: CgroupFs, file: string): Promise<number> {
  const match = /^oom_kill (\d+)$/m.exec(await io.readFile(file));
  return match ? Number(match[1]) : 0;
}

/**
 * Empties the group and removes its directories. Killing pid by pid can race with forks (a fork bomb
 * makes new pids while we kill), so it repeats until a read finds the group empty; the task limit bounds
 * how many there can be. A pid read from cgroup.procs is killed at once, so it cannot have been reused.
 */
async function emptyAndRemove(io: CgroupFs, dirs: readonly string[], killFile: string | null): Promise<void> {
  // cgroup v2 (Linux 5.14+) kills the whole subtree at once, forks included.
  if (killFile && (await io.exists(killFile))) await io.writeFile(killFile, '1').catch(() => undefined);
  let left: number[] = [];
  for (let round = 0; round < KILL_ROUNDS; round += 1) {
    left = [...new Set((await Promise.all(dirs.map((dir) => procsOf(io, dir)))).flat())];
    if (left.length === 0) break;
    for (const pid of left) {
      // The service itself is never killed, should a caller have added it by mistake.
      if (pid === process.pid) continue;
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // Gone already.
      }
    }
    await sleep(round < 10 ? 10 : 50);
  }
  const failures: string[] = [];
  for (const dir of dirs) {
    // A killed process leaves the group a moment after the signal, when it has finished exiting.
    const error = await removeGroupDir(io, dir, async (failure) => errorCode(failure) === 'EBUSY');
    if (error !== null) failures.push(`${dir}: ${message(error)}`);
  }
  if (failures.length > 0) {
    throw new Error(
      `could not remove cgroup ${failures.join('; ')}` +
        (left.length > 0 ? ` (processes left: ${left.join(' ')})` : ''),
    );
  }
}

async function readNumber(io: CgroupFs, file: string): Promise<number | null> {
  const value = Number((await io.readFile(file).catch(() => '')).trim());
  return Number.isFinite(value) && (await io.exists(file)) ? value : null;
}

/** A `<key> <number>` line of a flat-keyed file (cpu.stat); null when absent. */
function keyedNumber(text: string, key: string): number | null {
  const value = new RegExp(`^${key} (\\d+)$`, 'm').exec(text)?.[1];
  return value === undefined ? null : Number(value);
}

/** Seconds the group's processes waited for a CPU (UsageFiles.wait); null when the kernel keeps no figure. */
async function readWaitSeconds(io: CgroupFs, wait: UsageFiles['wait']): Promise<number | null> {
  const text = await io.readFile(wait.file).catch(() => null);
  if (text === null) return null;
  if (wait.kind === 'cpu.pressure') {
    const total = /^some .*\btotal=(\d+)/m.exec(text)?.[1];
    return total === undefined ? null : Number(total) / 1e6;
  }
  const tids = text.split('\n').filter((line) => /^\d+$/.test(line));
  let ns = 0;
  for (const tid of tids) {
    // The second field: nanoseconds spent runnable on a run queue. A thread gone meanwhile counts nothing.
    const fields = (await io.readFile(`/proc/${tid}/schedstat`).catch(() => '')).split(' ');
    const delay = Number(fields[1]);
    if (Number.isFinite(delay)) ns += delay;
  }
  return ns / 1e9;
}

async function readUsage(io: CgroupFs, files: UsageFiles): Promise<Usage> {
  let cpuSeconds: number | null = null;
  if (files.cpu?.kind === 'cpuacct.usage') {
    const ns = await readNumber(io, files.cpu.file);
    cpuSeconds = ns === null ? null : ns / 1e9;
  } else if (files.cpu?.kind === 'cpu.stat') {
    const usec = keyedNumber(await io.readFile(files.cpu.file).catch(() => ''), 'usage_usec');
    cpuSeconds = usec === null ? null : usec / 1e6;
  }
  const stat = await io.readFile(files.throttling.file).catch(() => '');
  const throttled =
    files.throttling.kind === 'v2' ? keyedNumber(stat, 'throttled_usec') : keyedNumber(stat, 'throttled_time');
  return {
    cpuSeconds,
    memoryBytes: await readNumber(io, files.memory),
    cpuThrottledSeconds: throttled === null ? null : throttled / (files.throttling.kind === 'v2' ? 1e6 : 1e9),
    cpuWaitSeconds: await readWaitSeconds(io, files.wait),
  };
}

export function cgroupGroup(
  io: CgroupFs,
  dirs: readonly string[],
  oomFile: string,
  killFile: string | null,
  usageFiles: UsageFiles,
): ResourceGroup {
  let removal: Promise<void> | null = null;
  return {
    paths: dirs,
    async add(pid) {
      if (!Number.isSafeInteger(pid) || pid <= 0) throw new RangeError(`${pid} is not a process id`);
      for (const dir of dirs) await writeSetting(io, path.join(dir, 'cgroup.procs'), String(pid));
    },
    oomKills: () => readOomKills(io, oomFile),
    usage: () => readUsage(io, usageFiles),
    remove() {
      // Concurrent calls share one removal; after a failure a later call tries again.
      removal ??= emptyAndRemove(io, dirs, killFile).catch((error: unknown) => {
        removal = null;
        throw error;
      });
      return removal;
    },
  };
}
