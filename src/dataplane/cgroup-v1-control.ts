/**
 * Resource limits on cgroup v1 (one hierarchy per controller: /sys/fs/cgroup/memory, cpu, pids):
 * `<own>/<parent>/<name>` in each (`<parent>` the service's own, parentGroupName), where `<own>` is the
 * service's own group in that hierarchy (/proc/self/cgroup). Nesting keeps the limits the service itself
 * runs under (a container's, a systemd unit's) in force for what it starts and charges their memory to
 * it; a group at the root would escape them. v1 lets a group hold processes and children at once, so the
 * service's own group can be the parent. When the own group is not visible under the mount (a container
 * that mounts only its part of the hierarchy without a cgroup namespace), the mount point is used: there
 * it is the container's group.
 */
import path from 'node:path';
import {
  CONTROLLERS,
  CPU_PERIOD_US,
  checkWritable,
  cpuQuotaUs,
  cpuWeight,
  cpuWeightWords,
  disposeDirs,
  explainRefusal,
  freshDir,
  makeDir,
  parentLimitWords,
  removeLeftovers,
  requestOf,
  setCpuWeight,
  writeSetting,
  type CgroupSetup,
  type Controller,
} from './cgroup-files.ts';
import { cgroupGroup } from './cgroup-group.ts';
import type { ResourceControl } from './resource-limits.ts';

/** The file that shows a v1 hierarchy's group can take the limit we set (a kernel may lack CFS quotas). */
const V1_LIMIT_FILE: Record<Controller, string> = {
  memory: 'memory.limit_in_bytes',
  cpu: 'cpu.cfs_quota_us',
  pids: 'pids.max',
};

/**
 * The limits of all apps together on the parent group of `controller` (memory: swap included where the
 * kernel accounts it, the memory limit first, as memsw may never be below it). A refusal (a limit below
 * what apps adopted from an earlier run use now) is logged, not fatal: each instance's limits still hold.
 */
async function setParentLimit(ctx: CgroupSetup, controller: Controller, dir: string): Promise<void> {
  const { io, parentLimits: limits } = ctx;
  if (limits === null) return;
  try {
    if (controller === 'memory') {
      await writeSetting(io, path.join(dir, 'memory.limit_in_bytes'), String(limits.memoryBytes));
      const swap = path.join(dir, 'memory.memsw.limit_in_bytes');
      if (await io.exists(swap)) await writeSetting(io, swap, String(limits.memoryBytes));
    } else if (controller === 'pids') {
      await writeSetting(io, path.join(dir, 'pids.max'), String(limits.pids));
    }
  } catch (error) {
    ctx.logger?.warn(`all apps together are not limited: ${explainRefusal(error, dir)}`);
  }
}

/**
 * Makes the parent groups for cgroup v1 under the service's own groups `own` (controller to path, from
 * /proc/self/cgroup); the reason in words when it cannot. Names and limits are checked by the caller.
 */
export async function setUpCgroupV1(ctx: CgroupSetup, own: Map<string, string>): Promise<ResourceControl | string> {
  const { io, root, parent } = ctx;
  const parents = new Map<Controller, string>();
  const made: string[] = [];
  const parentWeight = cpuWeight('cpu.shares', ctx.cpus);
  const refuse = async (reason: string) => {
    await disposeDirs(io, made.reverse(), ctx.logger);
    return reason;
  };
  for (const controller of CONTROLLERS) {
    const mount = path.join(root, controller);
    if (!(await io.exists(path.join(mount, 'cgroup.procs')))) {
      return refuse(`no cgroup v1 ${controller} hierarchy at ${mount}`);
    }
    let base = path.join(mount, own.get(controller) ?? '/');
    if (!(await io.exists(path.join(base, 'cgroup.procs')))) base = mount;
    const dir = path.join(base, parent);
    try {
      if (await makeDir(io, dir)) made.push(dir);
      else await removeLeftovers(io, dir, await io.subgroups(dir));
      // One that was there may be another user's (a root service's, before this one ran as its own user).
      await checkWritable(io, dir);
    } catch (error) {
      return refuse(explainRefusal(error, dir));
    }
    if (!(await io.exists(path.join(dir, V1_LIMIT_FILE[controller])))) {
      return refuse(`cgroup v1 group ${dir} has no ${V1_LIMIT_FILE[controller]} (not supported by this kernel)`);
    }
    try {
      if (controller === 'cpu') await setCpuWeight(io, dir, 'cpu.shares', parentWeight);
      else await setParentLimit(ctx, controller, dir);
    } catch (error) {
      return refuse(explainRefusal(error, dir));
    }
    parents.set(controller, dir);
  }
  const dirOf = (controller: Controller) => parents.get(controller)!;
  // CPU time is kept by the cpuacct controller: in the cpu hierarchy when the two are mounted together
  // (cpu,cpuacct), else in a hierarchy of its own, where groups are made for accounting only.
  let accounting: string | null = null;
  if (await io.exists(path.join(dirOf('cpu'), 'cpuacct.usage'))) {
    accounting = dirOf('cpu');
  } else if (await io.exists(path.join(root, 'cpuacct', 'cgroup.procs'))) {
    const mount = path.join(root, 'cpuacct');
    let base = path.join(mount, own.get('cpuacct') ?? '/');
    if (!(await io.exists(path.join(base, 'cgroup.procs')))) base = mount;
    const dir = path.join(base, parent);
    try {
      if (await makeDir(io, dir)) made.push(dir);
      else await removeLeftovers(io, dir, await io.subgroups(dir));
      await checkWritable(io, dir);
      accounting = dir;
    } catch (error) {
      ctx.logger?.warn(`the CPU time of apps is not measured: ${explainRefusal(error, dir)}`);
    }
  }
  const separateAccounting = accounting !== null && accounting !== dirOf('cpu');
  const swapFile = 'memory.memsw.limit_in_bytes';
  const swapLimited = await io.exists(path.join(dirOf('memory'), swapFile));
  return {
    kind: 'cgroup-v1',
    description:
      `cgroup v1: each app instance and build gets a memory limit ` +
      (swapLimited ? '(swap included)' : '(swap not limited: the kernel has no swap accounting)') +
      `, a CPU quota and a task limit, in ${CONTROLLERS.map(dirOf).join(', ')} ` +
      `(${cpuWeightWords('cpu.shares', parentWeight, ctx.cpus)}; ${parentLimitWords(ctx.parentLimits)})`,
    paths: [...CONTROLLERS.map(dirOf), ...(separateAccounting ? [accounting!] : [])],
    async create(name, limits) {
      const dirs = [
        ...CONTROLLERS.map((controller) => path.join(dirOf(controller), name)),
        ...(separateAccounting ? [path.join(accounting!, name)] : []),
      ];
      const [memory, cpu, pids] = dirs as [string, string, string];
      const created: string[] = [];
      try {
        for (const dir of dirs) {
          const parentOf = path.dirname(dir);
          await freshDir(io, dir, async () => {
            await makeDir(io, parentOf);
            if (parentOf === dirOf('cpu')) await setCpuWeight(io, parentOf, 'cpu.shares', parentWeight);
            if (parentOf === dirOf('memory')) await setParentLimit(ctx, 'memory', parentOf);
            if (parentOf === dirOf('pids')) await setParentLimit(ctx, 'pids', parentOf);
          });
          created.push(dir);
        }
        // memsw may never be below the memory limit, so the memory limit goes first; equal, swap adds nothing.
        await writeSetting(io, path.join(memory, 'memory.limit_in_bytes'), String(limits.memoryBytes));
        if (swapLimited) await writeSetting(io, path.join(memory, swapFile), String(limits.memoryBytes));
        await writeSetting(io, path.join(cpu, 'cpu.cfs_period_us'), String(CPU_PERIOD_US));
        await writeSetting(io, path.join(cpu, 'cpu.cfs_quota_us'), String(cpuQuotaUs(limits.cpu)));
        await writeSetting(io, path.join(cpu, 'cpu.shares'), String(cpuWeight('cpu.shares', requestOf(limits))));
        await writeSetting(io, path.join(pids, 'pids.max'), String(limits.pids));
      } catch (error) {
        for (const dir of created.reverse()) await io.rmdir(dir).catch(() => undefined);
        throw error;
      }
      return cgroupGroup(io, dirs, path.join(memory, 'memory.oom_control'), null, {
        cpu: accounting === null ? null : { file: path.join(accounting, name, 'cpuacct.usage'), kind: 'cpuacct.usage' },
        memory: path.join(memory, 'memory.usage_in_bytes'),
        throttling: { file: path.join(cpu, 'cpu.stat'), kind: 'v1' },
        wait: { file: path.join(cpu, 'tasks'), kind: 'tasks' },
      });
    },
    // The parents are this service's own (their name is), made by this run or an earlier one.
    dispose: () =>
      disposeDirs(io, [...CONTROLLERS.map(dirOf), ...(separateAccounting ? [accounting!] : [])], ctx.logger),
  };
}
