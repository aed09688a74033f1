/**
 * How much of the machine other processes used while a run was measured. Numbers from a shared
 * machine are only comparable when nobody else was busy; the report marks runs that were disturbed.
 *
 * Linux only (/proc): the CPU time of the whole machine minus that of this process and all its
 * descendants (the load generator, the embedded PostgreSQL and its backends). Elsewhere it reports
 * nothing. A PostgreSQL on DATABASE_URL that runs on this machine counts as "other".
 */
import fs from 'node:fs/promises';

export interface CpuSample {
  /** Jiffies of the whole machine: busy, and in all (busy + idle). */
  busy: number;
  total: number;
  /** Jiffies used by this process tree, including its exited children. */
  ours: number;
}

async function machine(): Promise<{ busy: number; total: number }> {
  const line = (await fs.readFile('/proc/stat', 'utf8')).split('\n')[0]!;
  const [user, nice, system, idle, iowait, irq, softirq, steal] = line.trim().split(/\s+/).slice(1, 9).map(Number) as number[];
  const busy = user! + nice! + system! + irq! + softirq! + steal!;
  return { busy, total: busy + idle! + iowait! };
}

async function processTree(root: number): Promise<number> {
  const parents = new Map<number, number>();
  const used = new Map<number, number>();
  for (const entry of await fs.readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = await fs.readFile(`/proc/${entry}/stat`, 'utf8').catch(() => null);
    if (stat === null) continue; // the process ended while we listed
    // Fields after the command name (which may hold spaces), from field 3 (state) on.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const pid = Number(entry);
    parents.set(pid, Number(fields[1]));
    used.set(pid, Number(fields[11]) + Number(fields[12]) + Number(fields[13]) + Number(fields[14]));
  }
  let total = 0;
  for (const [pid, jiffies] of used) {
    for (let p: number | undefined = pid; p !== undefined && p > 0; p = parents.get(p)) {
      if (p === root) {
        total += jiffies;
        break;
      }
    }
  }
  return total;
}

export async function sampleCpu(): Promise<CpuSample | null> {
  try {
    const [m, ours] = await Promise.all([machine(), processTree(process.pid)]);
    return { ...m, ours };
  } catch {
    return null; // no /proc here: the report goes without the disturbance column
  }
}

/** Share of the machine's CPU time (0..1) that other processes used between two samples. */
export function otherLoad(before: CpuSample | null, after: CpuSample | null): number | null {
  if (before === null || after === null || after.total <= before.total) return null;
  const others = after.busy - before.busy - (after.ours - before.ours);
  return Math.max(0, others / (after.total - before.total));
}
