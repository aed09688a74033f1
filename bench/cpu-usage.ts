/**
 * Where the CPU time of a run went, from /proc (Linux; elsewhere the report goes without it):
 * - per request, in this process (the service or the bare app), in the embedded PostgreSQL (the
 *   postmaster and its backends) and in the load generator. On a machine of a few cores these add up
 *   to the ceiling of each scenario: cores x 1000 / (sum of ms per request) requests per second.
 * - the share of the machine that other processes used meanwhile. Numbers from a shared machine are
 *   only comparable when nobody else was busy; the report marks disturbed runs.
 *
 * A PostgreSQL on DATABASE_URL is not ours: its CPU is not attributed, and if it runs on this machine
 * it counts as "other".
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs/promises';

/** Clock ticks per second of /proc's CPU times (USER_HZ); 100 on every Linux we know. */
const TICKS_PER_SECOND = (() => {
  try {
    const value = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim());
    return Number.isFinite(value) && value > 0 ? value : 100;
  } catch {
    return 100;
  }
})();

interface ProcessEntry {
  ppid: number;
  name: string;
  /** utime + stime */
  own: number;
  /** cutime + cstime: exited and reaped children */
  children: number;
}

export interface CpuSample {
  /** Ticks of the whole machine: busy, and in all (busy + idle). */
  busy: number;
  total: number;
  /** Ticks of this process tree, including exited children. */
  ours: number;
  self: number;
  postgres: number | null;
  loadgen: number | null;
  /** Ticks of the slirp4netns processes below us (the data plane's user-mode networking; 0 when none). */
  slirp: number;
  /**
   * Ticks of the reverse proxies below us, nginx and HAProxy: the data plane's app edge, the bench's
   * plain nginx (0 when none).
   */
  proxies: number;
}

async function machine(): Promise<{ busy: number; total: number }> {
  const line = (await fs.readFile('/proc/stat', 'utf8')).split('\n')[0]!;
  const [user, nice, system, idle, iowait, irq, softirq, steal] = line.trim().split(/\s+/).slice(1, 9).map(Number);
  const busy = user! + nice! + system! + irq! + softirq! + steal!;
  return { busy, total: busy + idle! + iowait! };
}

async function processes(): Promise<Map<number, ProcessEntry>> {
  const out = new Map<number, ProcessEntry>();
  for (const entry of await fs.readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = await fs.readFile(`/proc/${entry}/stat`, 'utf8').catch(() => null);
    if (stat === null) continue; // the process ended while we listed
    // The name is in parentheses and may hold spaces; the fields after it start at field 3 (state).
    const name = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    out.set(Number(entry), {
      ppid: Number(fields[1]),
      name,
      own: Number(fields[11]) + Number(fields[12]),
      children: Number(fields[13]) + Number(fields[14]),
    });
  }
  return out;
}

/** Ticks of `root` and everything below it. */
function subtree(all: Map<number, ProcessEntry>, root: number): number {
  let total = 0;
  for (const [pid, entry] of all) {
    for (let p: number | undefined = pid; p !== undefined && p > 0; p = all.get(p)?.ppid) {
      if (p === root) {
        total += entry.own + entry.children;
        break;
      }
    }
  }
  return total;
}

/** Whether `pid` is `root` or below it. */
function below(all: Map<number, ProcessEntry>, pid: number, root: number): boolean {
  for (let p: number | undefined = pid; p !== undefined && p > 0; p = all.get(p)?.ppid) if (p === root) return true;
  return false;
}

/** Ticks of the processes of this name below us, each counted once with what is below it. */
function named(all: Map<number, ProcessEntry>, name: string): number {
  return [...all]
    .filter(([pid, e]) => e.name === name && below(all, pid, process.pid) && all.get(e.ppid)?.name !== name)
    .reduce((sum, [pid]) => sum + subtree(all, pid), 0);
}

export async function sampleCpu(loadgenPid: number | undefined): Promise<CpuSample | null> {
  try {
    const [m, all] = await Promise.all([machine(), processes()]);
    const me = all.get(process.pid);
    if (!me) return null;
    // The embedded server is our child named postgres (its backends are its children).
    const postmaster = [...all].find(([, e]) => e.ppid === process.pid && e.name === 'postgres')?.[0];
    return {
      ...m,
      ours: subtree(all, process.pid),
      self: me.own,
      postgres: postmaster === undefined ? null : subtree(all, postmaster),
      loadgen: loadgenPid === undefined ? null : subtree(all, loadgenPid),
      slirp: named(all, 'slirp4netns'),
      proxies: named(all, 'nginx') + named(all, 'haproxy'),
    };
  } catch {
    return null; // no /proc here
  }
}

export interface RunCpu {
  /** Share of the machine's CPU time (0..1) that other processes used. */
  otherShare: number;
  /** CPU milliseconds per request in this process, in PostgreSQL, in the load generator. */
  nodeMs: number;
  postgresMs: number | null;
  loadgenMs: number | null;
}

export function cpuBetween(before: CpuSample | null, after: CpuSample | null, requests: number): RunCpu | null {
  if (before === null || after === null || after.total <= before.total || requests <= 0) return null;
  const perRequest = (a: number | null, b: number | null) =>
    a === null || b === null ? null : ((b - a) * 1000) / TICKS_PER_SECOND / requests;
  const others = after.busy - before.busy - (after.ours - before.ours);
  return {
    otherShare: Math.max(0, others / (after.total - before.total)),
    nodeMs: perRequest(before.self, after.self)!,
    postgresMs: perRequest(before.postgres, after.postgres),
    loadgenMs: perRequest(before.loadgen, after.loadgen),
  };
}
