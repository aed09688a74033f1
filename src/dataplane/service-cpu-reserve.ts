/**
 * The service's own CPU weight: a group of its own that weighs SERVICE_RESERVE_FACTOR times as much as all
 * the apps together, so that under app load the API (and the embedded PostgreSQL it starts after this)
 * still gets the CPU promptly.
 * Without it the service is one ordinary process among the apps' parent group, HAProxy, each app's
 * slirp4netns and whatever else the host runs, and the API's latency under app load grew with them
 * (docs/performance.md measures both).
 *
 * Where the group is:
 * - cgroup v1, root: `<own cpu group>/<parent>-service` in the cpu hierarchy, next to the apps' parent
 *   (resource-limits.ts); the service moves itself into it.
 * - cgroup v2, root, when the service's group is the root group (a container with its own cgroup
 *   namespace, a host without systemd): `/sys/fs/cgroup/<parent>-service`, and the service moves itself.
 * - cgroup v2, root, in a group of its own (a systemd unit): not moved out of the unit; the unit's
 *   `CPUWeight=` decides, and the start log says so.
 * - cgroup v2, not root, in a delegated leaf (the shipped unit's `DelegateSubgroup=supervisor`): the
 *   leaf is the service's own, next to the apps' parent; its `cpu.weight` is set, nothing moves.
 * - otherwise (v1 or v2 without delegation, as an ordinary user): no reserve, said at start.
 *
 * What carries the apps' traffic (HAProxy, each app's slirp4netns) is started back in the group the
 * service came from (`ordinary`): it must neither eat into the service's reserve nor be starved. Apps
 * and builds go into groups of their own before they run (resource-limits.ts), so they never share it.
 */
import path from 'node:path';
import {
  cpuWeight,
  explainRefusal,
  makeDir,
  message,
  nodeFs,
  removeGroupDir,
  setCpuWeight,
  words,
  type CgroupFs,
  type CgroupLogger,
  type WeightFile,
} from './cgroup-files.ts';
import { parseSelfCgroup } from './resource-limits.ts';

/**
 * How many times the apps' parent group's weight the reserve weighs. Its weight is what the service gets
 * when it wants the CPU, not what it takes: the API's work comes in short bursts, and a heavier group's
 * wake-up is scheduled sooner. Weighing as much as the apps (1) left the API's p99 under app load 1.47x
 * its p99 alone on a quiet 2-CPU machine and 2.5x on a busy one; 4 cut it to a seventh of that on the
 * busy one, below its p99 alone at the old weight (docs/performance.md, 2026-12-06). What it costs: a service whose API is flooded keeps 4 parts in 5 of
 * the CPUs it contends for against the apps (they keep at least 1 in 5, never nothing).
 */
export const SERVICE_RESERVE_FACTOR = 4;

const WHAT_IT_WEIGHS = `${SERVICE_RESERVE_FACTOR} times what all apps together weigh`;

export interface ServiceCpuReserve {
  /** What the service weighs and where, for the start log. */
  readonly description: string;
  /** The reserve's group directory, or null when there is none. */
  readonly group: string | null;
  /**
   * The command line that runs `argv` in the group the service came from (a shell that moves itself
   * there, then execs; a refused move leaves it where it is). The same argv when nothing moved.
   */
  ordinary(this: void, argv: readonly string[]): string[];
  /** At stop: moves the service back and removes the group (once its last process is gone). */
  release(): Promise<void>;
}

export interface ServiceCpuReserveOptions {
  /** SLIPWAY_SERVICE_CPU_RESERVE (config.serviceCpuReserve). */
  enabled: boolean;
  /** The apps' parent group's name (resource-limits.ts parentGroupName); the reserve is `<parent>-service`. */
  parent: string;
  logger?: CgroupLogger;
  /** Tests: another cgroup root, file system, CPU count, process, user, /proc/self/cgroup. */
  root?: string;
  io?: CgroupFs;
  cpus: number;
  pid?: number;
  uid?: number | null;
  selfCgroup?: string;
}

function none(description: string): ServiceCpuReserve {
  return { description, group: null, ordinary: (argv) => [...argv], release: async () => undefined };
}

/** A shell that moves itself into the group whose cgroup.procs is `$0`, then execs its arguments. */
const MOVE_THEN_EXEC = '{ echo $$ > "$0"; } 2>/dev/null; exec "$@"';

/**
 * Gives the service (process `pid`) its reserve where the host allows it (see the module comment);
 * never fails the start: where it cannot, the description says why.
 */
export async function reserveServiceCpu(options: ServiceCpuReserveOptions): Promise<ServiceCpuReserve> {
  if (!options.enabled) return none('the service has no CPU reserve (SLIPWAY_SERVICE_CPU_RESERVE=0)');
  const io = options.io ?? nodeFs;
  const root = options.root ?? '/sys/fs/cgroup';
  const pid = options.pid ?? process.pid;
  const uid = options.uid ?? process.getuid?.() ?? null;
  let selfText = options.selfCgroup;
  if (selfText === undefined) {
    try {
      selfText = await io.readFile('/proc/self/cgroup');
    } catch (error) {
      return none(`the service has no CPU reserve: cgroups are not available here (${message(error)})`);
    }
  }
  const own = parseSelfCgroup(selfText);
  const name = `${options.parent}-service`;
  const unified = await words(io, path.join(root, 'cgroup.controllers'));
  if (unified.includes('cpu')) {
    if (uid !== 0) return weighOwnLeaf(io, path.join(root, own.v2), options);
    if (own.v2 !== '/')
      return none(
        `the service has no CPU reserve of its own: it stays in its group ${own.v2} (a systemd unit's ` +
          `CPUWeight= sets what it weighs)`,
      );
    return moveInto(io, root, path.join(root, name), 'cpu.weight', pid, options);
  }
  const mount = path.join(root, 'cpu');
  if (uid !== 0 || !(await io.exists(path.join(mount, 'cgroup.procs'))))
    return none(
      uid !== 0
        ? 'the service has no CPU reserve: as an ordinary user it needs a delegated cgroup v2 group'
        : `the service has no CPU reserve: no cgroup v1 cpu hierarchy at ${mount}`,
    );
  let base = path.join(mount, own.v1.get('cpu') ?? '/');
  if (!(await io.exists(path.join(base, 'cgroup.procs')))) base = mount;
  return moveInto(io, base, path.join(base, name), 'cpu.shares', pid, options);
}

/** v2 without root: the service's own delegated leaf gets the weight; nothing moves. */
async function weighOwnLeaf(io: CgroupFs, leaf: string, options: ServiceCpuReserveOptions) {
  const weight = cpuWeight('cpu.weight', options.cpus * SERVICE_RESERVE_FACTOR);
  try {
    // The unit passes the cpu controller on to its leaves only once asked (the apps' parent asks too).
    const unit = path.dirname(leaf);
    const enabled = await words(io, path.join(unit, 'cgroup.subtree_control'));
    if (!enabled.includes('cpu')) await io.writeFile(path.join(unit, 'cgroup.subtree_control'), '+cpu');
    await setCpuWeight(io, leaf, 'cpu.weight', weight);
  } catch (error) {
    return none(`the service has no CPU reserve: ${explainRefusal(error, leaf)}`);
  }
  return {
    description: `the service's own group ${leaf} weighs ${weight} (cpu.weight), ${WHAT_IT_WEIGHS}`,
    group: leaf,
    ordinary: (argv: readonly string[]) => [...argv],
    release: async () => undefined,
  };
}

/** As root: makes `dir` in `base`, weighs it, moves the service in; back to `base` at release. */
async function moveInto(
  io: CgroupFs,
  base: string,
  dir: string,
  file: WeightFile,
  pid: number,
  options: ServiceCpuReserveOptions,
): Promise<ServiceCpuReserve> {
  const weight = cpuWeight(file, options.cpus * SERVICE_RESERVE_FACTOR);
  const home = path.join(base, 'cgroup.procs');
  let made = false;
  try {
    if (file === 'cpu.weight') {
      const enabled = await words(io, path.join(base, 'cgroup.subtree_control'));
      if (!enabled.includes('cpu')) await io.writeFile(path.join(base, 'cgroup.subtree_control'), '+cpu');
    }
    made = await makeDir(io, dir);
    await setCpuWeight(io, dir, file, weight);
    await io.writeFile(path.join(dir, 'cgroup.procs'), String(pid));
  } catch (error) {
    if (made) await io.rmdir(dir).catch(() => undefined);
    return none(`the service has no CPU reserve: ${explainRefusal(error, dir)}`);
  }
  return {
    description:
      `the service runs in ${dir}, which weighs ${weight} (${file}), ${WHAT_IT_WEIGHS}; ` +
      `HAProxy and the apps' slirp4netns run in ${base}`,
    group: dir,
    ordinary: (argv) => ['/bin/sh', '-c', MOVE_THEN_EXEC, home, ...argv],
    async release() {
      try {
        await io.writeFile(home, String(pid));
      } catch (error) {
        options.logger?.warn(`could not move the service back to ${base}: ${message(error)}`);
        return;
      }
      // What the service started in it and has not stopped yet (a child still exiting) keeps it a moment.
      const error = await removeGroupDir(io, dir, async () => true);
      if (error !== null) options.logger?.warn(`could not remove cgroup ${dir}: ${message(error)}`);
    },
  };
}
