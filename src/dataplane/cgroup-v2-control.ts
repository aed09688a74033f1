/**
 * Resource limits on cgroup v2 (one hierarchy at /sys/fs/cgroup). A group whose children get controllers
 * may hold no processes itself ("no internal processes"), and the service's own group holds the service,
 * so it cannot be the parent. As root: `/sys/fs/cgroup/<parent>/<name>` (`<parent>` the service's own,
 * parentGroupName), under the root group, which is exempt from that rule and always exists; this is what
 * Docker's cgroupfs driver does, and it works the same under systemd (which never removes groups it did
 * not make, and cannot take a controller away from a parent while a child of it uses the controller).
 * The limits of the service's own unit do not cover these groups. Not root: in the parent of the
 * service's own group, next to it, which works when that parent is delegated to the service's user
 * (systemd: `Delegate=yes` and `DelegateSubgroup=supervisor`, so the service runs in a leaf of its
 * delegated unit; or a unit inside the user's own systemd).
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
  words,
  writeSetting,
  type CgroupFs,
  type CgroupSetup,
} from './cgroup-files.ts';
import { cgroupGroup } from './cgroup-group.ts';
import type { ResourceControl } from './resource-limits.ts';

/** Enables the controllers for the children of `dir`, writing only those not on yet (no write access needed then). */
async function enableControllers(io: CgroupFs, dir: string): Promise<void> {
  const enabled = await words(io, path.join(dir, 'cgroup.subtree_control'));
  const missing = CONTROLLERS.filter((c) => !enabled.includes(c));
  if (missing.length === 0) return;
  await io.writeFile(path.join(dir, 'cgroup.subtree_control'), missing.map((c) => `+${c}`).join(' '));
}

/**
 * The limits of all apps together, on the parent group (its swap too: apps never push the service into
 * swap). A refusal is logged, not fatal: the limits of each instance still hold, which beats none.
 */
async function setParentLimits(ctx: CgroupSetup, dir: string): Promise<void> {
  if (ctx.parentLimits === null) return;
  try {
    await writeSetting(ctx.io, path.join(dir, 'memory.max'), String(ctx.parentLimits.memoryBytes));
    if (await ctx.io.exists(path.join(dir, 'memory.swap.max'))) {
      await writeSetting(ctx.io, path.join(dir, 'memory.swap.max'), '0');
    }
    await writeSetting(ctx.io, path.join(dir, 'pids.max'), String(ctx.parentLimits.pids));
  } catch (error) {
    ctx.logger?.warn(`all apps together are not limited: ${explainRefusal(error, dir)}`);
  }
}

/**
 * Makes the parent group for cgroup v2 under the service's own group `ownPath` (from /proc/self/cgroup);
 * the reason in words when it cannot. The names and limits given to `create` are checked by the caller.
 */
export async function setUpCgroupV2(ctx: CgroupSetup, ownPath: string): Promise<ResourceControl | string> {
  const { io, root, parent } = ctx;
  let baseRel: string;
  if (ctx.uid === 0) {
    baseRel = '/';
  } else if (ownPath === '/') {
    return `the service is not root and its cgroup is the root of ${root}`;
  } else {
    baseRel = path.posix.dirname(ownPath);
  }
  const base = path.join(root, baseRel);
  const offered = await words(io, path.join(base, 'cgroup.controllers'));
  const unavailable = CONTROLLERS.filter((c) => !offered.includes(c));
  if (unavailable.length > 0) {
    return (
      `cgroup v2 group ${base} offers no ${unavailable.join(', ')} controller` +
      (ctx.uid === 0 ? '' : ' (its parent does not delegate it)')
    );
  }
  const parentDir = path.join(base, parent);
  const parentWeight = cpuWeight('cpu.weight', ctx.cpus);
  let made = false;
  let at = base;
  try {
    await enableControllers(io, base);
    at = parentDir;
    made = await makeDir(io, parentDir);
    if (!made) await removeLeftovers(io, parentDir, await io.subgroups(parentDir));
    await enableControllers(io, parentDir);
    // One that was there may be another user's (a root service's, before this one ran as its own user).
    await checkWritable(io, parentDir);
    await setCpuWeight(io, parentDir, 'cpu.weight', parentWeight);
    await setParentLimits(ctx, parentDir);
  } catch (error) {
    if (made) await io.rmdir(parentDir).catch(() => undefined);
    return explainRefusal(error, at);
  }
  const swapFile = 'memory.swap.max';
  return {
    kind: 'cgroup-v2',
    description:
      `cgroup v2: each app instance and build gets a memory limit (no swap), a CPU quota and a task limit, ` +
      `in ${parentDir} (${cpuWeightWords('cpu.weight', parentWeight, ctx.cpus)}; ${parentLimitWords(ctx.parentLimits)})`,
    paths: [parentDir],
    async create(name, limits) {
      const dir = path.join(parentDir, name);
      await freshDir(io, dir, async () => {
        await makeDir(io, parentDir);
        await enableControllers(io, parentDir);
        await setCpuWeight(io, parentDir, 'cpu.weight', parentWeight);
        await setParentLimits(ctx, parentDir);
      });
      try {
        await writeSetting(io, path.join(dir, 'memory.max'), String(limits.memoryBytes));
        // Without swap accounting in the kernel the file is absent and swap is not limited: nothing to do.
        if (await io.exists(path.join(dir, swapFile))) await writeSetting(io, path.join(dir, swapFile), '0');
        await writeSetting(io, path.join(dir, 'cpu.max'), `${cpuQuotaUs(limits.cpu)} ${CPU_PERIOD_US}`);
        await writeSetting(io, path.join(dir, 'cpu.weight'), String(cpuWeight('cpu.weight', requestOf(limits))));
        await writeSetting(io, path.join(dir, 'pids.max'), String(limits.pids));
      } catch (error) {
        await io.rmdir(dir).catch(() => undefined);
        throw error;
      }
      return cgroupGroup(io, [dir], path.join(dir, 'memory.events'), path.join(dir, 'cgroup.kill'), {
        cpu: { file: path.join(dir, 'cpu.stat'), kind: 'cpu.stat' },
        memory: path.join(dir, 'memory.current'),
        throttling: { file: path.join(dir, 'cpu.stat'), kind: 'v2' },
        wait: { file: path.join(dir, 'cpu.pressure'), kind: 'cpu.pressure' },
      });
    },
    // The parent is this service's own (its name is), made by this run or an earlier one.
    dispose: () => disposeDirs(io, [parentDir], ctx.logger),
  };
}
