/**
 * Resource limits of what the local data plane runs (app instances, builds), through Linux cgroups: a
 * memory limit that swap does not extend, a CPU quota, and a limit on the number of tasks. Each process
 * tree gets a group of its own, made fresh before it starts and removed (with whatever is left in it)
 * when it ends.
 *
 * Where the groups go:
 * - cgroup v1 (one hierarchy per controller: /sys/fs/cgroup/memory, cpu, pids): `<own>/slipway/<name>` in
 *   each, where `<own>` is the service's own group in that hierarchy (/proc/self/cgroup). Nesting keeps
 *   the limits the service itself runs under (a container's, a systemd unit's) in force for what it
 *   starts and charges their memory to it; a group at the root would escape them. v1 lets a group hold
 *   processes and children at once, so the service's own group can be the parent. When the own group is
 *   not visible under the mount (a container that mounts only its part of the hierarchy without a cgroup
 *   namespace), the mount point is used: there it is the container's group.
 * - cgroup v2 (one hierarchy at /sys/fs/cgroup): a group whose children get controllers may hold no
 *   processes itself ("no internal processes"), and the service's own group holds the service, so it
 *   cannot be the parent. As root: `/sys/fs/cgroup/slipway/<name>`, under the root group, which is exempt
 *   from that rule and always exists; this is what Docker's cgroupfs driver does, and it works the same
 *   under systemd (which never removes groups it did not make, and cannot take a controller away from a
 *   parent while a child of it uses the controller). The limits of the service's own unit do not cover
 *   these groups. Not root: in the parent of the service's own group, next to it, which works when that
 *   parent is delegated to the service's user (systemd: `Delegate=yes` and `DelegateSubgroup=supervisor`,
 *   so the service runs in a leaf of its delegated unit; or a unit inside the user's own systemd).
 *
 * When neither works (not root and nothing delegated, controllers missing), `kind` is 'none', the
 * description says why, and every operation does nothing.
 *
 * A process must be added before it forks: children inherit the group of their parent when they are
 * forked, and moving a process later leaves the children it already has where they were. Callers hold
 * the command (bubblewrap's --block-fd, or a shell waiting on a pipe) until add() has returned.
 */
import { constants as fsConstants } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

export interface Limits {
  /** Memory (with swap) in bytes; the kernel's OOM killer kills a process of the group beyond it. */
  memoryBytes: number;
  /** CPU time as a number of cores (0.5: half of one core's time in every period). */
  cpu: number;
  /** Tasks (processes and threads) the group may hold at once; forking beyond it fails. */
  pids: number;
}

const MIB = 1024 * 1024;

/**
 * Limits of an app instance whose resource spec says nothing. 1 GiB holds an ordinary Node.js or
 * Python agent service and an ordinary `npm install`/`pip install`, while one runaway app cannot take
 * the machine's memory; one core keeps a busy loop from starving the service and other apps. The task
 * limit counts threads, not only processes (a Node.js process has about a dozen, a JVM dozens): 512
 * leaves room for a build's parallel jobs and stops a fork bomb long before the machine's own limit.
 */
export const DEFAULT_LIMITS: Readonly<Limits> = Object.freeze({ memoryBytes: 1024 * MIB, cpu: 1, pids: 512 });

export interface ResourceGroup {
  /** The group's directories: one per controller on cgroup v1, one on v2, none when nothing is enforced. */
  readonly paths: readonly string[];
  /**
   * Moves a process into the group; what it forks afterwards is in the group too, what it forked
   * before is not. Any pid the caller may signal works (the service, as root, moves `nobody`'s processes).
   */
  add(pid: number): Promise<void>;
  /** Times the kernel's OOM killer killed a process of this group (memory over the limit). */
  oomKills(): Promise<number>;
  /** What the group's processes use now; a figure the kernel does not keep here is null. */
  usage(): Promise<Usage>;
  /**
   * Kills whatever is still in the group (SIGKILL, repeated until it is empty, within a bound) and
   * removes its directories. Idempotent. Throws when the group could not be removed (a process stuck in
   * the kernel); the caller logs it.
   */
  remove(): Promise<void>;
}

export interface Usage {
  /** CPU time the group's processes have had since it was made, in seconds (a counter). */
  cpuSeconds: number | null;
  /** Memory the group's processes hold now, page cache included, in bytes. */
  memoryBytes: number | null;
}

export interface ResourceControl {
  readonly kind: 'cgroup-v1' | 'cgroup-v2' | 'none';
  /** For the start log: which limits are enforced and where, or why none are. */
  readonly description: string;
  /** The parent groups (`slipway`) the groups are made in; empty when nothing is enforced. */
  readonly paths: readonly string[];
  /**
   * Makes a fresh group with these limits. `name` is one path component of letters, digits, `.`, `_`
   * and `-`, unique among the groups that exist (`<deployment>-<instance>-<n>`, say). A leftover empty
   * group of that name (from before a crash) is replaced; one that still holds processes is an error.
   */
  create(name: string, limits: Limits): Promise<ResourceGroup>;
  /** Removes the parent groups when this made them and they are empty (at shutdown; never throws). */
  dispose(): Promise<void>;
}

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

export interface ResourceControlOptions {
  /** Where the cgroup file systems are mounted; default /sys/fs/cgroup. */
  root?: string;
  /** Name of the parent group the groups are made in; default `slipway`. */
  parent?: string;
  logger?: { warn(message: string): void };
  /** For tests: the file system under `root` (default: the real one). */
  fs?: CgroupFs;
  /** For tests: the text of /proc/self/cgroup (default: read it). */
  selfCgroup?: string;
  /** For tests: the service's user id (default: process.getuid()). */
  uid?: number;
}

const CONTROLLERS = ['memory', 'cpu', 'pids'] as const;
type Controller = (typeof CONTROLLERS)[number];

/**
 * The CPU weight of the parent group, all apps and builds together, against the processes next to it (the
 * service's own threads on cgroup v1, the other top-level groups on v2): a quarter of the default (v1
 * `cpu.shares` 1024, v2 `cpu.weight` 100). Weights only matter when the CPUs are all busy: an idle
 * service leaves apps every cycle, a busy one (the API answering while an app is under load) is served
 * first, so one tenant's traffic does not slow every tenant's API calls.
 */
const APPS_CPU_SHARES_V1 = 256;
const APPS_CPU_WEIGHT_V2 = 25;

/** The CFS period: quotas are per 100 ms, the kernel's default; the quota's floor is 1 ms. */
const CPU_PERIOD_US = 100_000;
const CPU_MIN_QUOTA_US = 1_000;

/** One path component, never `.` or `..`: a group name cannot reach outside its parent. */
const NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;

/** How long remove() keeps killing and waiting: a forking group needs a few rounds. */
const KILL_ROUNDS = 60;
const RMDIR_ATTEMPTS = 40;

const nodeFs: CgroupFs = {
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

function errorCode(error: unknown): string | undefined {
  return error instanceof Error && 'code' in error && typeof error.code === 'string' ? error.code : undefined;
}

function message(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/**
 * Reads the limits of an app instance from a deployment's resource spec (src/routes/deployment-schemas.ts:
 * `memory_limit_mb`/`memory_mb` are integer megabytes, taken as MiB; `cpu_limit`/`cpu` are numbers of
 * cores). The limit field wins; the request field alone is the best bound there is (Kubernetes would
 * let it burst, a local process has no node to burst on). The schema takes numbers only, so strings
 * ("500m") are not read; a zero (allowed by the schema) says nothing. The spec has no process count: the
 * default's.
 */
export function limitsFromResourceSpec(spec: Record<string, unknown> | null | undefined, defaults: Limits): Limits {
  const positive = (value: unknown): number | null =>
    typeof value === 'number' && Number.isFinite(value) && value > 0 ? value : null;
  const mib = positive(spec?.memory_limit_mb) ?? positive(spec?.memory_mb);
  return {
    memoryBytes: mib === null ? defaults.memoryBytes : Math.round(mib * MIB),
    cpu: positive(spec?.cpu_limit) ?? positive(spec?.cpu) ?? defaults.cpu,
    pids: defaults.pids,
  };
}

function checkName(name: string, what: string): void {
  if (!NAME.test(name)) throw new Error(`${what} ${JSON.stringify(name)} is not a safe cgroup name`);
}

function checkLimits(limits: Limits): void {
  const { memoryBytes, cpu, pids } = limits;
  if (!Number.isSafeInteger(memoryBytes) || memoryBytes < MIB) {
    throw new RangeError(`memory limit ${memoryBytes} is not a whole number of bytes of at least 1 MiB`);
  }
  if (!Number.isFinite(cpu) || cpu <= 0) throw new RangeError(`CPU limit ${cpu} is not a positive number of cores`);
  if (!Number.isSafeInteger(pids) || pids < 1) throw new RangeError(`task limit ${pids} is not a positive integer`);
}

function cpuQuotaUs(cpu: number): number {
  return Math.max(CPU_MIN_QUOTA_US, Math.round(cpu * CPU_PERIOD_US));
}

/** The service's groups from /proc/self/cgroup: v2's `0::<path>` and v1's `<n>:<controllers>:<path>`. */
function parseSelfCgroup(text: string): { v2: string; v1: Map<string, string> } {
  let v2 = '/';
  const v1 = new Map<string, string>();
  for (const line of text.split('\n')) {
    const first = line.indexOf(':');
    const second = line.indexOf(':', first + 1);
    if (first < 0 || second < 0) continue;
    const controllers = line.slice(first + 1, second);
    const groupPath = line.slice(second + 1) || '/';
    if (line.slice(0, first) === '0' && controllers === '') v2 = groupPath;
    else for (const controller of controllers.split(',')) v1.set(controller, groupPath);
  }
  return { v2, v1 };
}

async function writeSetting(io: CgroupFs, file: string, value: string): Promise<void> {
  try {
    await io.writeFile(file, value);
  } catch (error) {
    throw new Error(`could not write ${JSON.stringify(value)} to ${file}: ${message(error)}`, { cause: error });
  }
}

/** Makes a directory; false when it was already there. */
async function makeDir(io: CgroupFs, dir: string): Promise<boolean> {
  try {
    await io.mkdir(dir);
    return true;
  } catch (error) {
    if (errorCode(error) === 'EEXIST') return false;
    throw error;
  }
}

/** Makes a group's directory; an empty leftover is replaced (rmdir fails with EBUSY on a populated one). */
async function freshDir(io: CgroupFs, dir: string, remakeParent?: () => Promise<void>): Promise<void> {
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
    for (let attempt = 0; ; attempt += 1) {
      try {
        await io.rmdir(dir);
        break;
      } catch (error) {
        const code = errorCode(error);
        if (code === 'ENOENT') break;
        // A killed process leaves the group a moment after the signal, when it has finished exiting.
        if (code === 'EBUSY' && attempt < RMDIR_ATTEMPTS) {
          await sleep(25);
          continue;
        }
        failures.push(`${dir}: ${message(error)}`);
        break;
      }
    }
  }
  if (failures.length > 0) {
    throw new Error(
      `could not remove cgroup ${failures.join('; ')}` +
        (left.length > 0 ? ` (processes left: ${left.join(' ')})` : ''),
    );
  }
}

/** Where a group's usage is read: a file and how to read a number from it. */
interface UsageFiles {
  /** cgroup v2 `cpu.stat` (usage_usec) or v1 `cpuacct.usage` (nanoseconds); null: not kept here. */
  cpu: { file: string; kind: 'cpu.stat' | 'cpuacct.usage' } | null;
  /** v2 `memory.current` or v1 `memory.usage_in_bytes`. */
  memory: string;
}

async function readNumber(io: CgroupFs, file: string): Promise<number | null> {
  const value = Number((await io.readFile(file).catch(() => '')).trim());
  return Number.isFinite(value) && (await io.exists(file)) ? value : null;
}

async function readUsage(io: CgroupFs, files: UsageFiles): Promise<Usage> {
  let cpuSeconds: number | null = null;
  if (files.cpu?.kind === 'cpuacct.usage') {
    const ns = await readNumber(io, files.cpu.file);
    cpuSeconds = ns === null ? null : ns / 1e9;
  } else if (files.cpu?.kind === 'cpu.stat') {
    const text = await io.readFile(files.cpu.file).catch(() => '');
    const usec = /^usage_usec (\d+)$/m.exec(text)?.[1];
    cpuSeconds = usec === undefined ? null : Number(usec) / 1e6;
  }
  return { cpuSeconds, memoryBytes: await readNumber(io, files.memory) };
}

function cgroupGroup(
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

const noGroup: ResourceGroup = Object.freeze({
  paths: [],
  add: async () => undefined,
  oomKills: async () => 0,
  usage: async () => ({ cpuSeconds: null, memoryBytes: null }),
  remove: async () => undefined,
});

function noControl(reason: string): ResourceControl {
  return {
    kind: 'none',
    description: `no resource limits: ${reason}`,
    paths: [],
    async create(name, limits) {
      // The same checks as with cgroups, so that a bad caller fails the same way everywhere.
      checkName(name, 'group name');
      checkLimits(limits);
      return noGroup;
    },
    dispose: async () => undefined,
  };
}

async function disposeDirs(io: CgroupFs, dirs: readonly string[], logger: ResourceControlOptions['logger']) {
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

interface Context {
  root: string;
  parent: string;
  io: CgroupFs;
  uid: number | null;
  logger: ResourceControlOptions['logger'];
}

/** Why a place for the groups could not be made, in words for the start log. */
function explainRefusal(error: unknown, dir: string): string {
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

async function words(io: CgroupFs, file: string): Promise<string[]> {
  try {
    return (await io.readFile(file)).split(/\s+/).filter(Boolean);
  } catch (error) {
    if (errorCode(error) === 'ENOENT') return [];
    throw error;
  }
}

/** Enables the controllers for the children of `dir`, writing only those not on yet (no write access needed then). */
async function enableControllers(io: CgroupFs, dir: string): Promise<void> {
  const enabled = await words(io, path.join(dir, 'cgroup.subtree_control'));
  const missing = CONTROLLERS.filter((c) => !enabled.includes(c));
  if (missing.length === 0) return;
  await io.writeFile(path.join(dir, 'cgroup.subtree_control'), missing.map((c) => `+${c}`).join(' '));
}

async function setUpV2(ctx: Context, ownPath: string): Promise<ResourceControl | string> {
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
  let made = false;
  let at = base;
  try {
    await enableControllers(io, base);
    at = parentDir;
    made = await makeDir(io, parentDir);
    await enableControllers(io, parentDir);
    await writeSetting(io, path.join(parentDir, 'cpu.weight'), String(APPS_CPU_WEIGHT_V2));
  } catch (error) {
    if (made) await io.rmdir(parentDir).catch(() => undefined);
    return explainRefusal(error, at);
  }
  const swapFile = 'memory.swap.max';
  return {
    kind: 'cgroup-v2',
    description:
      `cgroup v2: each app instance and build gets a memory limit (no swap), a CPU quota and a task limit, ` +
      `in ${parentDir} (weighted to yield the CPU to the service when both are busy)`,
    paths: [parentDir],
    async create(name, limits) {
      checkName(name, 'group name');
      checkLimits(limits);
      const dir = path.join(parentDir, name);
      await freshDir(io, dir, async () => {
        await makeDir(io, parentDir);
        await enableControllers(io, parentDir);
        await writeSetting(io, path.join(parentDir, 'cpu.weight'), String(APPS_CPU_WEIGHT_V2));
      });
      try {
        await writeSetting(io, path.join(dir, 'memory.max'), String(limits.memoryBytes));
        // Without swap accounting in the kernel the file is absent and swap is not limited: nothing to do.
        if (await io.exists(path.join(dir, swapFile))) await writeSetting(io, path.join(dir, swapFile), '0');
        await writeSetting(io, path.join(dir, 'cpu.max'), `${cpuQuotaUs(limits.cpu)} ${CPU_PERIOD_US}`);
        await writeSetting(io, path.join(dir, 'pids.max'), String(limits.pids));
      } catch (error) {
        await io.rmdir(dir).catch(() => undefined);
        throw error;
      }
      return cgroupGroup(io, [dir], path.join(dir, 'memory.events'), path.join(dir, 'cgroup.kill'), {
        cpu: { file: path.join(dir, 'cpu.stat'), kind: 'cpu.stat' },
        memory: path.join(dir, 'memory.current'),
      });
    },
    dispose: () => disposeDirs(io, made ? [parentDir] : [], ctx.logger),
  };
}

/** The file that shows a v1 hierarchy's group can take the limit we set (a kernel may lack CFS quotas). */
const V1_LIMIT_FILE: Record<Controller, string> = {
  memory: 'memory.limit_in_bytes',
  cpu: 'cpu.cfs_quota_us',
  pids: 'pids.max',
};

async function setUpV1(ctx: Context, own: Map<string, string>): Promise<ResourceControl | string> {
  const { io, root, parent } = ctx;
  const parents = new Map<Controller, string>();
  const made: string[] = [];
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
    } catch (error) {
      return refuse(explainRefusal(error, dir));
    }
    if (!(await io.exists(path.join(dir, V1_LIMIT_FILE[controller])))) {
      return refuse(`cgroup v1 group ${dir} has no ${V1_LIMIT_FILE[controller]} (not supported by this kernel)`);
    }
    if (controller === 'cpu') {
      try {
        await writeSetting(io, path.join(dir, 'cpu.shares'), String(APPS_CPU_SHARES_V1));
      } catch (error) {
        return refuse(explainRefusal(error, dir));
      }
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
      `(weighted to yield the CPU to the service when both are busy)`,
    paths: [...CONTROLLERS.map(dirOf), ...(separateAccounting ? [accounting!] : [])],
    async create(name, limits) {
      checkName(name, 'group name');
      checkLimits(limits);
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
            if (parentOf === dirOf('cpu'))
              await writeSetting(io, path.join(parentOf, 'cpu.shares'), String(APPS_CPU_SHARES_V1));
          });
          created.push(dir);
        }
        // memsw may never be below the memory limit, so the memory limit goes first; equal, swap adds nothing.
        await writeSetting(io, path.join(memory, 'memory.limit_in_bytes'), String(limits.memoryBytes));
        if (swapLimited) await writeSetting(io, path.join(memory, swapFile), String(limits.memoryBytes));
        await writeSetting(io, path.join(cpu, 'cpu.cfs_period_us'), String(CPU_PERIOD_US));
        await writeSetting(io, path.join(cpu, 'cpu.cfs_quota_us'), String(cpuQuotaUs(limits.cpu)));
        await writeSetting(io, path.join(pids, 'pids.max'), String(limits.pids));
      } catch (error) {
        for (const dir of created.reverse()) await io.rmdir(dir).catch(() => undefined);
        throw error;
      }
      return cgroupGroup(io, dirs, path.join(memory, 'memory.oom_control'), null, {
        cpu: accounting === null ? null : { file: path.join(accounting, name, 'cpuacct.usage'), kind: 'cpuacct.usage' },
        memory: path.join(memory, 'memory.usage_in_bytes'),
      });
    },
    dispose: () => disposeDirs(io, [...made].reverse(), ctx.logger),
  };
}

/**
 * Finds out how limits can be enforced here: cgroup v2 when the unified hierarchy at `root` offers the
 * memory, cpu and pids controllers, else cgroup v1 when their three hierarchies are mounted and the
 * parent groups can be made, else none (with the reason in `description`). Makes the parent groups.
 */
export async function createResourceControl(options: ResourceControlOptions = {}): Promise<ResourceControl> {
  const parent = options.parent ?? 'slipway';
  checkName(parent, 'parent group name');
  const ctx: Context = {
    root: options.root ?? '/sys/fs/cgroup',
    parent,
    io: options.fs ?? nodeFs,
    uid: options.uid ?? process.getuid?.() ?? null,
    logger: options.logger,
  };
  let selfText = options.selfCgroup;
  if (selfText === undefined) {
    try {
      selfText = await fs.readFile('/proc/self/cgroup', 'utf8');
    } catch (error) {
      return noControl(`cgroups are not available here (/proc/self/cgroup: ${message(error)})`);
    }
  }
  const own = parseSelfCgroup(selfText);
  const reasons: string[] = [];
  const unified = await words(ctx.io, path.join(ctx.root, 'cgroup.controllers'));
  if (CONTROLLERS.every((c) => unified.includes(c))) {
    const v2 = await setUpV2(ctx, own.v2);
    return typeof v2 === 'string' ? noControl(v2) : v2;
  }
  if (await ctx.io.exists(path.join(ctx.root, 'cgroup.controllers'))) {
    const missing = CONTROLLERS.filter((c) => !unified.includes(c));
    reasons.push(`cgroup v2 at ${ctx.root} offers no ${missing.join(', ')} controller`);
  }
  const v1 = await setUpV1(ctx, own.v1);
  if (typeof v1 !== 'string') return v1;
  reasons.push(v1);
  return noControl(reasons.join('; '));
}
