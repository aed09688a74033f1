/**
 * The service's CPU reserve (src/dataplane/service-cpu-reserve.ts) for the bench, whose services run in
 * its own process: the bench process and its PostgreSQL go into the reserve for the API runs, as the
 * service and its embedded PostgreSQL do in production, and out of it for the run that shows what the API
 * gets without one. Where the reserve is not a group the bench can move into and out of (not root, a
 * systemd unit's group), there is none and the bench says why.
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { reserveServiceCpu } from '../src/dataplane/service-cpu-reserve.ts';

export interface BenchReserve {
  readonly description: string;
  /** The bench process and its PostgreSQL into the reserve. */
  inside(): Promise<void>;
  /** Both back where they came from. */
  outside(): Promise<void>;
  /** The reserve's weight times `factor` of what the service gives it (1: as the service does). */
  weigh(factor: number): Promise<void>;
  dispose(): Promise<void>;
}

/** The process ids of `pid`'s descendants whose command is `comm`. */
async function descendants(pid: number, comm: string): Promise<number[]> {
  const found: number[] = [];
  const walk = async (parent: number): Promise<void> => {
    const tasks = await fs.readdir(`/proc/${parent}/task`).catch(() => [] as string[]);
    for (const task of tasks) {
      const text = await fs.readFile(`/proc/${parent}/task/${task}/children`, 'utf8').catch(() => '');
      for (const child of text.split(/\s+/).filter(Boolean).map(Number)) {
        if ((await fs.readFile(`/proc/${child}/comm`, 'utf8').catch(() => '')).trim() === comm) found.push(child);
        await walk(child);
      }
    }
  };
  await walk(pid);
  return found;
}

export async function benchServiceReserve(): Promise<BenchReserve | string> {
  const reserve = await reserveServiceCpu({
    enabled: true,
    parent: `slipway-bench-${process.pid}`,
    cpus: os.availableParallelism(),
  });
  const group = reserve.group;
  // A moved-into group lies in the group the process came from; the v2 leaf case moves nothing.
  if (group === null || !group.endsWith('-service')) {
    await reserve.release();
    return reserve.description;
  }
  const home = path.join(path.dirname(group), 'cgroup.procs');
  const weightFile = (await fs.access(path.join(group, 'cpu.weight')).then(
    () => true,
    () => false,
  ))
    ? path.join(group, 'cpu.weight')
    : path.join(group, 'cpu.shares');
  const given = Number((await fs.readFile(weightFile, 'utf8')).trim());
  const most = weightFile.endsWith('cpu.weight') ? 10_000 : 262_144;
  const moveAll = async (procs: string) => {
    for (const pid of [process.pid, ...(await descendants(process.pid, 'postgres'))])
      await fs.writeFile(procs, String(pid)).catch(() => undefined);
  };
  // Out until asked: what the bench starts meanwhile (services, their edges, apps) must not inherit it.
  await moveAll(home);
  return {
    description: reserve.description,
    inside: () => moveAll(path.join(group, 'cgroup.procs')),
    outside: () => moveAll(home),
    weigh: (factor) => fs.writeFile(weightFile, String(Math.min(most, Math.round(given * factor)))),
    async dispose() {
      await moveAll(home);
      await reserve.release();
    },
  };
}
