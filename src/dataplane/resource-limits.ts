/**
 * Resource limits of what the local data plane runs (app instances, builds), through Linux cgroups: a
 * memory limit that swap does not extend, a CPU quota, and a limit on the number of tasks. Each process
 * tree gets a group of its own, made fresh before it starts and removed (with whatever is left in it)
 * when it ends. This module holds the limits and what a group and a control over groups offer, checks
 * names and limits, and finds out which cgroup version serves here: where the groups go on each is in
 * cgroup-v1-control.ts and cgroup-v2-control.ts, a group's own operations in cgroup-group.ts.
 *
 * CPU is shared by weight. The parent group of all apps and builds weighs as many ordinary processes as
 * the service has CPUs (cgroup-files.ts, cpuWeight), so on a host whose every CPU other work keeps busy
 * the apps still get their share of each CPU they use, where the kernel's idle class (which this once
 * used) left them only what every other process left, and builds and health checks ran out of time.
 * Within it each instance and build weighs its `cpu` request; its `cpu_limit` is a quota on top. The
 * service weighs four times as much as all apps together where the host allows it (its CPU reserve,
 * service-cpu-reserve.ts); the app edge and the apps' user-mode network run at ordinary weight outside
 * it: they carry the apps' traffic.
 *
 * The parent group's name is the service's own (parentGroupName: its user and its data directory): a
 * service never takes another's group, which it may not be allowed to write (a root service's, for one
 * that runs as its own user after it). It is checked before use by making and removing a group in it,
 * groups an earlier run left empty in it are removed, and it is removed at stop.
 *
 * When neither version works (not root and nothing delegated, controllers missing), `kind` is 'none', the
 * description says why, and every operation does nothing.
 *
 * A process must be added before it forks: children inherit the group of their parent when they are
 * forked, and moving a process later leaves the children it already has where they were. Callers hold
 * the command (bubblewrap's --block-fd, or a shell waiting on a pipe) until add() has returned.
 */
import { createHash } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import {
  CONTROLLERS,
  message,
  nodeFs,
  words,
  type CgroupFs,
  type CgroupLogger,
  type CgroupSetup,
} from './cgroup-files.ts';
import type { ResourceSpec } from '../domain/resource-spec.ts';
import { setUpCgroupV1 } from './cgroup-v1-control.ts';
import { setUpCgroupV2 } from './cgroup-v2-control.ts';

/** The file operations a test may replace (test/fakes/cgroup-v2.ts), part of ResourceControlOptions. */
export type { CgroupFs } from './cgroup-files.ts';

export interface Limits {
  /** Memory (with swap) in bytes; the kernel's OOM killer kills a process of the group beyond it. */
  memoryBytes: number;
  /** CPU time as a number of cores (0.5: half of one core's time in every period): the quota. */
  cpu: number;
  /**
   * The cores the group asks for (the resource spec's `cpu`): its CPU weight against the other groups
   * of apps and builds is in proportion to it, 1 core weighing as an ordinary process. Default: `cpu`.
   */
  cpuRequest?: number;
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

/** The most memory (bytes) and CPU (cores) one group gets, whatever its spec asks. */
export interface LimitCeiling {
  readonly memoryBytes: number;
  readonly cpu: number;
}

/**
 * The limits of a spec that says nothing, and the operator's maxima (src/config-limits.ts) that any
 * spec is clamped to here: a spec stored before the maxima existed, or under larger ones, is never
 * applied beyond them (the API refuses new specs over them).
 */
export interface DefaultLimits extends Limits {
  readonly maximum?: {
    /** One app instance. */
    readonly instance: LimitCeiling;
    /** One build. */
    readonly build: LimitCeiling;
    /** Instances of one kind (web, worker) per deployment. */
    readonly instances: number;
  };
}

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
  /** Time its CPU quota (`cpu_limit`) held the group back since it was made, in seconds (a counter). */
  cpuThrottledSeconds?: number | null;
  /**
   * Time its processes were ready to run and waited for a CPU, in seconds: on cgroup v2 the time at
   * least one of them waited (cpu.pressure), on v1 the waits of its live threads added up (a thread
   * that has exited no longer counts). What cgroup-cpu-starvation.ts reads "got no CPU" from.
   */
  cpuWaitSeconds?: number | null;
}

export interface ResourceControl {
  readonly kind: 'cgroup-v1' | 'cgroup-v2' | 'none';
  /** For the start log: which limits are enforced and where, or why none are. */
  readonly description: string;
  /** The parent groups (parentGroupName) the groups are made in; empty when nothing is enforced. */
  readonly paths: readonly string[];
  /**
   * Makes a fresh group with these limits. `name` is one path component of letters, digits, `.`, `_`
   * and `-`, unique among the groups that exist (`<deployment>-<instance>-<n>`, say). A leftover empty
   * group of that name (from before a crash) is replaced; one that still holds processes is an error.
   */
  create(name: string, limits: Limits): Promise<ResourceGroup>;
  /** Removes the parent groups once the groups in them are gone (at shutdown; never throws). */
  dispose(): Promise<void>;
}

export interface ResourceControlOptions {
  /** Where the cgroup file systems are mounted; default /sys/fs/cgroup. */
  root?: string;
  /** Name of the parent group the groups are made in; default parentGroupName(uid, service). */
  parent?: string;
  /** What tells this service from others of its user on the host: its data directory. */
  service?: string;
  /** For tests: the CPUs the service may use (default: os.availableParallelism()). */
  cpus?: number;
  /**
   * Memory (bytes) and tasks of all apps and builds together, on the parent group (config.limits:
   * SLIPWAY_APPS_MEMORY_MB, SLIPWAY_APPS_PIDS); default none.
   */
  parentLimits?: { memoryBytes: number; pids: number };
  logger?: CgroupLogger;
  /** For tests: the file system under `root` (default: the real one). */
  fs?: CgroupFs;
  /** For tests: the text of /proc/self/cgroup (default: read it). */
  selfCgroup?: string;
  /** For tests: the service's user id (default: process.getuid()). */
  uid?: number;
}

/**
 * The name of a service's parent group: `slipway-<uid>`, and a digest of `service` (its data directory)
 * when given, so that two services of one user each have their own. Never the `slipway` of earlier
 * versions, which every service of a host shared, whoever ran it.
 */
export function parentGroupName(uid: number | null, service?: string): string {
  const user = uid === null ? 'slipway' : `slipway-${uid}`;
  if (service === undefined) return user;
  return `${user}-${createHash('sha256').update(path.resolve(service)).digest('hex').slice(0, 12)}`;
}

/** One path component, never `.` or `..`: a group name cannot reach outside its parent. */
const NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;

/**
 * Reads the limits of an app instance from a deployment's resource spec (src/domain/resource-spec.ts:
 * `memory_limit_mb`/`memory_mb` are integer megabytes, taken as MiB; `cpu_limit`/`cpu` are numbers of
 * cores). The limit field wins; the request field alone is the best bound there is (Kubernetes would
 * let it burst, a local process has no node to burst on). The weight follows the request field, else the
 * limit (as Kubernetes takes a limit alone for the request too). The schema takes numbers only, so strings
 * ("500m") are not read; a zero (allowed by the schema) says nothing. The spec has no process count: the
 * default's. Every figure is clamped to `ceiling` (default: the instance maximum in `defaults`).
 */
export function limitsFromResourceSpec(
  spec: ResourceSpec | null | undefined,
  defaults: DefaultLimits,
  ceiling: LimitCeiling | undefined = defaults.maximum?.instance,
): Limits {
  const positive = (value: unknown): number | null =>
    typeof value === 'number' && Number.isFinite(value) && value > 0 ? value : null;
  const atMost = (value: number, max: number | undefined) => (max === undefined ? value : Math.min(value, max));
  const mib = positive(spec?.memory_limit_mb) ?? positive(spec?.memory_mb);
  const cpu = atMost(positive(spec?.cpu_limit) ?? positive(spec?.cpu) ?? defaults.cpu, ceiling?.cpu);
  return {
    memoryBytes: atMost(mib === null ? defaults.memoryBytes : Math.round(mib * MIB), ceiling?.memoryBytes),
    cpu,
    cpuRequest: Math.min(positive(spec?.cpu) ?? cpu, cpu),
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
  const request = limits.cpuRequest;
  if (request !== undefined && (!Number.isFinite(request) || request <= 0)) {
    throw new RangeError(`CPU request ${request} is not a positive number of cores`);
  }
  if (!Number.isSafeInteger(pids) || pids < 1) throw new RangeError(`task limit ${pids} is not a positive integer`);
}

/** The service's groups from /proc/self/cgroup: v2's `0::<path>` and v1's `<n>:<controllers>:<path>`. */
export function parseSelfCgroup(text: string): { v2: string; v1: Map<string, string> } {
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
    create: async () => noGroup,
    dispose: async () => undefined,
  };
}

/** The control with names and limits checked before a group is made, the same way whichever serves. */
function checked(control: ResourceControl): ResourceControl {
  return {
    kind: control.kind,
    description: control.description,
    paths: control.paths,
    async create(name, limits) {
      checkName(name, 'group name');
      checkLimits(limits);
      return control.create(name, limits);
    },
    dispose: () => control.dispose(),
  };
}

/**
 * Finds out how limits can be enforced here: cgroup v2 when the unified hierarchy at `root` offers the
 * memory, cpu and pids controllers, else cgroup v1 when their three hierarchies are mounted and the
 * parent groups can be made, else none (with the reason in `description`). Makes the parent groups.
 */
export async function createResourceControl(options: ResourceControlOptions = {}): Promise<ResourceControl> {
  const uid = options.uid ?? process.getuid?.() ?? null;
  const parent = options.parent ?? parentGroupName(uid, options.service);
  checkName(parent, 'parent group name');
  const ctx: CgroupSetup = {
    root: options.root ?? '/sys/fs/cgroup',
    parent,
    cpus: options.cpus ?? os.availableParallelism(),
    io: options.fs ?? nodeFs,
    uid,
    logger: options.logger,
    parentLimits: options.parentLimits ?? null,
  };
  let selfText = options.selfCgroup;
  if (selfText === undefined) {
    try {
      selfText = await fs.readFile('/proc/self/cgroup', 'utf8');
    } catch (error) {
      return checked(noControl(`cgroups are not available here (/proc/self/cgroup: ${message(error)})`));
    }
  }
  const own = parseSelfCgroup(selfText);
  const reasons: string[] = [];
  const unified = await words(ctx.io, path.join(ctx.root, 'cgroup.controllers'));
  if (CONTROLLERS.every((c) => unified.includes(c))) {
    const v2 = await setUpCgroupV2(ctx, own.v2);
    return checked(typeof v2 === 'string' ? noControl(v2) : v2);
  }
  if (await ctx.io.exists(path.join(ctx.root, 'cgroup.controllers'))) {
    const missing = CONTROLLERS.filter((c) => !unified.includes(c));
    reasons.push(`cgroup v2 at ${ctx.root} offers no ${missing.join(', ')} controller`);
  }
  const v1 = await setUpCgroupV1(ctx, own.v1);
  if (typeof v1 !== 'string') return checked(v1);
  reasons.push(v1);
  return checked(noControl(reasons.join('; ')));
}
