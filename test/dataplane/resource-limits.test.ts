/**
 * Resource limits through cgroups (src/dataplane/resource-limits.ts).
 *
 * The kernel's behaviour (an OOM kill at the memory limit, fork failing at the task limit, children
 * inheriting the group) is tested for real only on cgroup v1, the hierarchy of the machine these tests
 * were written on, and only as root: elsewhere those tests are skipped and say why. The cgroup v2 logic
 * (where the groups go, which controllers are enabled on which group, which file gets which value) is
 * tested against a fake hierarchy in a temporary directory (test/fakes/cgroup-v2.ts) that follows the
 * kernel's rules for the files the module uses, but enforces nothing.
 *
 * Every group made here is removed, also when a test fails: each test removes its own, and the suite's
 * `after` sweeps whatever is left under its parent groups and removes those too.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { Writable } from 'node:stream';
import { after, describe } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { cpuStarvation } from '../../src/dataplane/cgroup-cpu-starvation.ts';
import type { ResourceSpec } from '../../src/domain/resource-spec.ts';
import { scaleOf } from '../../src/dataplane/app-scaling.ts';
import { findExecutable } from '../../src/dataplane/executables.ts';
import {
  DEFAULT_LIMITS,
  createResourceControl,
  limitsFromResourceSpec,
  parentGroupName,
  type CgroupFs,
  type Limits,
  type ResourceGroup,
} from '../../src/dataplane/resource-limits.ts';
import { createFakeCgroupV2 } from '../fakes/cgroup-v2.ts';
import { eventually, pause } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';

const MIB = 1024 * 1024;
/** A pid no process can have (above Linux's largest pid_max, 2^22): the fake's "service". */
const SERVICE_PID = 99_999_999;

interface Exited {
  code: number | null;
  signal: NodeJS.Signals | null;
}

interface Started {
  child: ChildProcess;
  pid: number;
  exit: Promise<Exited>;
  stdout(): string;
  stderr(): string;
}

function start(file: string, args: string[], hold: boolean): Started & { release(): void } {
  // Held: a shell that waits for a line on fd 3 before it becomes the command (as the service holds
  // what it starts until the process is in its group, so that nothing it forks is left outside).
  const child = hold
    ? spawn('/bin/sh', ['-c', 'read -r _ <&3; exec 3<&-; exec "$@"', 'held', file, ...args], {
        stdio: ['ignore', 'pipe', 'pipe', 'pipe'],
      })
    : spawn(file, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout?.on('data', (chunk: Buffer) => (out += String(chunk)));
  child.stderr?.on('data', (chunk: Buffer) => (err += String(chunk)));
  const exit = new Promise<Exited>((resolve) => child.once('close', (code, signal) => resolve({ code, signal })));
  assert.ok(child.pid !== undefined, `could not start ${file}`);
  return {
    child,
    pid: child.pid,
    exit,
    stdout: () => out,
    stderr: () => err,
    release: () => (child.stdio[3] as Writable).end('go\n'),
  };
}

async function exists(file: string): Promise<boolean> {
  return fs.access(file).then(
    () => true,
    () => false,
  );
}

/** Gone, or a zombie (an orphan waits for its new parent to reap it): either way it runs no more. */
async function isDead(pid: number): Promise<boolean> {
  try {
    const stat = await fs.readFile(`/proc/${pid}/stat`, 'utf8');
    const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
    return state === 'Z' || state === 'X';
  } catch {
    return true;
  }
}

async function procs(dir: string): Promise<number[]> {
  return (await fs.readFile(path.join(dir, 'cgroup.procs'), 'utf8')).split('\n').filter(Boolean).map(Number);
}

/** User and system CPU time of a process so far, in clock ticks. */
async function cpuTicks(pid: number): Promise<number> {
  const stat = await fs.readFile(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return Number(fields[11]) + Number(fields[12]);
}

async function readValue(dir: string, file: string): Promise<string> {
  return (await fs.readFile(path.join(dir, file), 'utf8')).trim();
}

function dirOf(group: ResourceGroup, controller: string): string {
  const dir = group.paths.find((p) => p.split(path.sep).includes(controller));
  assert.ok(dir, `no ${controller} group in ${group.paths.join(', ')}`);
  return dir;
}

describe('limitsFromResourceSpec', () => {
  test('the defaults: 1 GiB, one core, 512 tasks', () => {
    assert.deepEqual({ ...DEFAULT_LIMITS }, { memoryBytes: 1024 * MIB, cpu: 1, pids: 512 });
    assert.ok(Object.isFrozen(DEFAULT_LIMITS));
  });

  test('a missing or empty spec gives the defaults (the weight of the default CPU limit)', () => {
    for (const spec of [null, undefined, {}])
      assert.deepEqual(limitsFromResourceSpec(spec, DEFAULT_LIMITS), { ...DEFAULT_LIMITS, cpuRequest: 1 });
  });

  test('the request alone is also the weight; the limit alone is also the request', () => {
    assert.equal(limitsFromResourceSpec({ cpu: 0.5 }, DEFAULT_LIMITS).cpuRequest, 0.5);
    assert.deepEqual(limitsFromResourceSpec({ cpu_limit: 2 }, DEFAULT_LIMITS), {
      ...DEFAULT_LIMITS,
      cpu: 2,
      cpuRequest: 2,
    });
  });

  test('the limit fields win over the request fields; memory is MiB', () => {
    const spec = { memory_mb: 256, memory_limit_mb: 512, cpu: 0.25, cpu_limit: 1.5 };
    assert.deepEqual(limitsFromResourceSpec(spec, DEFAULT_LIMITS), {
      memoryBytes: 512 * MIB,
      cpu: 1.5,
      cpuRequest: 0.25,
      pids: 512,
    });
  });

  test('a request field alone is the limit', () => {
    assert.deepEqual(limitsFromResourceSpec({ memory_mb: 300, cpu: 0.5 }, DEFAULT_LIMITS), {
      memoryBytes: 300 * MIB,
      cpu: 0.5,
      cpuRequest: 0.5,
      pids: 512,
    });
  });

  test('zero, negative, non-finite and string values (the schema takes numbers only) say nothing', () => {
    const defaults = { memoryBytes: 64 * MIB, cpu: 2, pids: 30 };
    for (const value of [0, -1, Number.NaN, Number.POSITIVE_INFINITY, '500m', '1', null, true]) {
      assert.deepEqual(
        limitsFromResourceSpec(
          // A spec stored before the schema, or written around it: read defensively.
          { memory_limit_mb: value, memory_mb: value, cpu_limit: value, cpu: value } as unknown as ResourceSpec,
          defaults,
        ),
        { ...defaults, cpuRequest: defaults.cpu },
        `value ${String(value)}`,
      );
    }
    // A zero limit falls back to the request, not to the default.
    assert.equal(limitsFromResourceSpec({ cpu_limit: 0, cpu: 0.75 }, defaults).cpu, 0.75);
  });

  test('the task limit is always the default (the spec has no such field)', () => {
    assert.equal(
      limitsFromResourceSpec({ pids: 5, max_pids: 5 } as ResourceSpec, { ...DEFAULT_LIMITS, pids: 77 }).pids,
      77,
    );
  });
});

describe("a stored spec over the operator's maxima is clamped by the data plane", () => {
  // As config.defaultLimits carries them (src/config.ts): 2 GiB and 2 cores an instance, 4 GiB and 3 cores a build, 4 instances.
  const defaults = {
    ...DEFAULT_LIMITS,
    maximum: {
      instance: { memoryBytes: 2048 * MIB, cpu: 2 },
      build: { memoryBytes: 4096 * MIB, cpu: 3 },
      instances: 4,
    },
  };
  // What a member could store before the maxima existed (issue 33: a 64 GiB build on a 23 GiB machine).
  const stored = { memory_limit_mb: 4 * 1024 * 1024, cpu_limit: 512, cpu: 256, min_scale: 1000, queue_min_scale: 64 };

  test('memory and CPU: at most the instance maximum, the weight never above the quota', () => {
    assert.deepEqual(limitsFromResourceSpec(stored, defaults), {
      memoryBytes: 2048 * MIB,
      cpu: 2,
      cpuRequest: 2,
      pids: DEFAULT_LIMITS.pids,
    });
  });

  test('a build: at most the build maximum', () => {
    const limits = limitsFromResourceSpec(stored, defaults, defaults.maximum.build);
    assert.equal(limits.memoryBytes, 4096 * MIB);
    assert.equal(limits.cpu, 3);
  });

  test('a spec within the maxima is applied as given', () => {
    assert.deepEqual(limitsFromResourceSpec({ memory_limit_mb: 512, cpu_limit: 1.5, cpu: 0.5 }, defaults), {
      memoryBytes: 512 * MIB,
      cpu: 1.5,
      cpuRequest: 0.5,
      pids: DEFAULT_LIMITS.pids,
    });
  });

  test('instances: at most the maximum of each kind; without one, as asked', () => {
    const withWorker = { start: 'node server.js', worker: 'node worker.js', healthCheckPath: '/ok' } as never;
    assert.deepEqual(scaleOf(stored, withWorker, 4), { web: 4, worker: 4 });
    assert.deepEqual(scaleOf({ min_scale: 2, queue_min_scale: 0 }, withWorker, 4), { web: 2, worker: 0 });
    assert.deepEqual(scaleOf(stored, withWorker), { web: 1000, worker: 64 });
  });
});

describe('cpuStarvation: whether a group that missed a deadline was short of CPU', () => {
  const usage = (cpu: number | null, throttled: number | null, waited: number | null) => ({
    cpuSeconds: cpu,
    memoryBytes: null,
    cpuThrottledSeconds: throttled,
    cpuWaitSeconds: waited,
  });

  test('no figures (no cgroup, or nothing read): nothing said', () => {
    assert.equal(cpuStarvation(null, null, 60), null);
    assert.equal(cpuStarvation(undefined, { cpuSeconds: null, memoryBytes: null }, 60), null);
    assert.equal(cpuStarvation(usage(0, 0, 0), usage(1, 0, 0), 0), null);
  });

  test('an app that had the CPU it wanted and still did not answer: not blamed on the CPU', () => {
    assert.equal(cpuStarvation(usage(0, 0, 0), usage(0.2, 0.5, 1.5), 60), null);
  });

  test('held back by its own limit, or kept waiting, over a quarter of the time: said, with what it got', () => {
    assert.equal(
      cpuStarvation(usage(1, 0, 0), usage(4, 30, 0.5), 60),
      'It was short of CPU: in those 60 s it ran for 3.0 s and was held back 30 s by its own CPU limit (cpu_limit).',
    );
    assert.equal(
      cpuStarvation(null, usage(null, null, 8), 20),
      'It was short of CPU: in those 20 s it waited 8.0 s for a CPU that other work held.',
    );
  });

  test("a v1 wait that went down (a thread exited with its count): the threads' own waits", () => {
    assert.match(cpuStarvation(usage(0, 0, 50), usage(1, 0, 40), 60) ?? '', /waited 40 s for a CPU/);
  });
});

// --- The real kernel: cgroup v1 -------------------------------------------------------------------------

const parent = `slipway-test-${process.pid}-${randomBytes(3).toString('hex')}`;
const isRoot = process.getuid?.() === 0;
const real = isRoot ? await createResourceControl({ parent }) : null;
const realSkip =
  real?.kind === 'cgroup-v1'
    ? false
    : isRoot
      ? `the kernel's behaviour is tested on cgroup v1 only; here: ${real?.description}`
      : 'needs root to make cgroups';
// The suite below will not run: leave nothing behind (on a v2 machine its parent group was made).
if (realSkip) await real?.dispose();

/** Last resort after a failed test: kills what is in the groups under the parents and removes them all. */
async function sweep(parents: readonly string[]): Promise<void> {
  for (const dir of parents) {
    if (!(await exists(dir))) continue;
    for (const entry of await fs.readdir(dir, { withFileTypes: true })) {
      if (!entry.isDirectory()) continue;
      const group = path.join(dir, entry.name);
      for (let round = 0; round < 50; round += 1) {
        const left = await procs(group).catch(() => []);
        if (left.length === 0) break;
        for (const pid of left) {
          try {
            process.kill(pid, 'SIGKILL');
          } catch {
            // Gone already.
          }
        }
        await sleep(20);
      }
      await fs.rmdir(group).catch(() => undefined);
    }
    await fs.rmdir(dir).catch(() => undefined);
  }
}

describe('cgroup v1 on this machine (the real kernel)', { skip: realSkip }, () => {
  const control = real!;
  const made: ResourceGroup[] = [];
  const create = async (suffix: string, limits: Limits) => {
    const group = await control.create(`dep-${suffix}-${randomBytes(3).toString('hex')}`, limits);
    made.push(group);
    return group;
  };

  after(async () => {
    for (const group of made) await group.remove().catch(() => undefined);
    const parents = control.paths;
    await control.dispose();
    await sweep(parents);
  });

  test("the parent groups are under the service's own group of each hierarchy", async () => {
    const self = await fs.readFile('/proc/self/cgroup', 'utf8');
    for (const controller of ['memory', 'cpu', 'pids']) {
      const line = self.split('\n').find((l) => (l.split(':')[1] ?? '').split(',').includes(controller));
      const own = line ? line.slice(line.indexOf(':', line.indexOf(':') + 1) + 1) : '/';
      const expected = path.join('/sys/fs/cgroup', controller, own, parent);
      assert.ok(control.paths.includes(expected), `${expected} in ${control.paths.join(', ')}`);
      assert.ok(await exists(path.join(expected, 'cgroup.procs')));
    }
    assert.match(control.description, /^cgroup v1: .*memory limit .*CPU quota .*task limit/);
  });

  test('the limits are written: memory (swap included), CPU quota per 100 ms, tasks', async () => {
    const group = await create('quota', { memoryBytes: 128 * MIB, cpu: 0.5, pids: 64 });
    const memory = dirOf(group, 'memory');
    assert.equal(await readValue(memory, 'memory.limit_in_bytes'), String(128 * MIB));
    if (await exists(path.join(memory, 'memory.memsw.limit_in_bytes'))) {
      assert.equal(await readValue(memory, 'memory.memsw.limit_in_bytes'), String(128 * MIB));
    }
    const cpu = dirOf(group, 'cpu');
    assert.equal(await readValue(cpu, 'cpu.cfs_period_us'), '100000');
    assert.equal(await readValue(cpu, 'cpu.cfs_quota_us'), '50000');
    // Its weight: no request given, so the limit's; 1024 a core.
    assert.equal(await readValue(cpu, 'cpu.shares'), '512');
    assert.equal(await readValue(dirOf(group, 'pids'), 'pids.max'), '64');

    const more = await create('cores', { memoryBytes: 128 * MIB, cpu: 2.5, cpuRequest: 0.25, pids: 64 });
    assert.equal(await readValue(dirOf(more, 'cpu'), 'cpu.cfs_quota_us'), '250000');
    assert.equal(await readValue(dirOf(more, 'cpu'), 'cpu.shares'), '256', 'the weight follows the request');
    // The kernel's floor is 1 ms per period.
    const tiny = await create('tiny', { memoryBytes: 128 * MIB, cpu: 0.001, pids: 64 });
    assert.equal(await readValue(dirOf(tiny, 'cpu'), 'cpu.cfs_quota_us'), '1000');

    for (const g of [group, more, tiny]) {
      await g.remove();
      for (const dir of g.paths) assert.equal(await exists(dir), false, `${dir} removed`);
    }
  });

  test("usage: the group's CPU time and memory, as the kernel counts them", async () => {
    const group = await create('usage', { memoryBytes: 256 * MIB, cpu: 1, pids: 64 });
    const before = await group.usage();
    assert.equal(before.cpuSeconds, 0, 'a new group has used no CPU');
    // Holds 32 MiB and spins until it has had half a second of CPU time, then idles until killed.
    const child = start(
      process.execPath,
      [
        '-e',
        'globalThis.k=Buffer.alloc(32*1024*1024,1);while(process.cpuUsage().user<500000){};setInterval(()=>{},1e3)',
      ],
      true,
    );
    await group.add(child.pid);
    child.release();
    await eventually('CPU time counted', async () => ((await group.usage()).cpuSeconds ?? 0) >= 0.5, { everyMs: 20 });
    const now = await group.usage();
    assert.ok((now.memoryBytes ?? 0) >= 32 * MIB, `memory ${now.memoryBytes}`);
    await group.remove();
  });

  /**
   * Two spinning processes in app groups (no quota in the way: 4 cores each), started with `appPrefix`
   * before the spinner, and two in a group beside the apps' parent at the default weight, as a service's
   * own unit is (a group of its own, not the root's tasks, whose scheduling autogroups make depend on the
   * session); all on one CPU (taskset): weights share a CPU among what runs on it, and on several CPUs
   * the kernel's balancing could give each side a CPU of its own whatever the weights. The clock ticks
   * each side got in 1.5 s.
   */
  async function busySides(appPrefix: string[]): Promise<{ appTicks: number; serviceTicks: number }> {
    const cpuParent = control.paths.find((p) => p.split(path.sep).includes('cpu'))!;
    const serviceGroup = `${cpuParent}-service`;
    await fs.mkdir(serviceGroup);
    const cpus = 2;
    const spin = ['taskset', '-c', '0', process.execPath, '-e', 'for(;;){}'];
    const started: Started[] = [];
    try {
      for (let i = 0; i < cpus; i++) {
        const group = await create(`spin${i}`, { memoryBytes: 128 * MIB, cpu: 4, pids: 64 });
        const [file, ...args] = [...appPrefix, ...spin];
        const child = start(file!, args, true);
        started.push(child);
        await group.add(child.pid);
        child.release();
      }
      for (let i = 0; i < cpus; i++) {
        const child = start(spin[0]!, spin.slice(1), true);
        started.push(child);
        await fs.writeFile(path.join(serviceGroup, 'cgroup.procs'), String(child.pid));
        child.release();
      }
      await pause(300, 'the spinners reach full speed');
      const before = await Promise.all(started.map((c) => cpuTicks(c.pid)));
      // The scenario's measuring window (CPU ticks used during it), not a wait for something to happen.
      await pause(1_500, 'the window CPU ticks are measured over');
      const after = await Promise.all(started.map((c) => cpuTicks(c.pid)));
      const used = after.map((t, i) => t - before[i]!);
      return {
        appTicks: used.slice(0, cpus).reduce((a, b) => a + b, 0),
        serviceTicks: used.slice(cpus).reduce((a, b) => a + b, 0),
      };
    } finally {
      for (const c of started) c.child.kill('SIGKILL');
      await Promise.all(started.map((c) => c.exit));
      await fs.rmdir(serviceGroup).catch(() => undefined);
    }
  }

  /** The parent's weight: an ordinary process's (1024) for each CPU the service may use. */
  const parentShares = 1024 * os.availableParallelism();

  /**
   * What each side should get of the one CPU: the apps' parent weighs `parentShares` (its whole weight
   * is on that CPU, where all its load is), the group beside it 1024, like any ordinary process. Half
   * of it is asked: the tick counts are coarse, and the kernel's shares are approximate.
   */
  function assertShared(appTicks: number, serviceTicks: number): void {
    const total = appTicks + serviceTicks;
    const serviceShare = 1024 / (1024 + parentShares);
    assert.ok(total > 0, 'the spinners ran');
    assert.ok(serviceTicks > 0.5 * serviceShare * total, `service ${serviceTicks} ticks, apps ${appTicks} ticks`);
    assert.ok(appTicks > 0.5 * (1 - serviceShare) * total, `apps ${appTicks} ticks, service ${serviceTicks} ticks`);
  }

  test('busy apps and a busy ordinary group share a CPU by weight: the apps their share (not the idle class), the other its own', async () => {
    const cpuParent = control.paths.find((p) => p.split(path.sep).includes('cpu'))!;
    assert.equal(await readValue(cpuParent, 'cpu.shares'), String(parentShares));
    if (await exists(path.join(cpuParent, 'cpu.idle'))) assert.equal(await readValue(cpuParent, 'cpu.idle'), '0');
    assert.match(
      control.description,
      new RegExp(`all apps and builds together weigh ${parentShares} \\(cpu\\.shares\\)`),
    );
    const { appTicks, serviceTicks } = await busySides([]);
    assertShared(appTicks, serviceTicks);
  });

  test("an app that raises its own priority as far as a process can (nice -20) gets no more: the weight is its group's", async () => {
    const { appTicks, serviceTicks } = await busySides(['nice', '-n', '-20']);
    assertShared(appTicks, serviceTicks);
  });

  test('a group held back by its CPU limit, or kept waiting by busy neighbours, says so (cpuStarvation)', async () => {
    const spin = ['taskset', '-c', '0', process.execPath, '-e', 'for(;;){}'];
    // Its weight as the other's, so that it gets more than its quota allows and is held back.
    const limited = await create('throttled', { memoryBytes: 128 * MIB, cpu: 0.1, cpuRequest: 4, pids: 64 });
    const waiting = await create('waiting', { memoryBytes: 128 * MIB, cpu: 4, pids: 64 });
    const started: Started[] = [];
    try {
      const before = { limited: await limited.usage(), waiting: await waiting.usage() };
      assert.equal(before.limited.cpuThrottledSeconds, 0);
      assert.equal(before.waiting.cpuWaitSeconds, 0, 'an empty group has waited for nothing');
      for (const group of [limited, waiting]) {
        const child = start(spin[0]!, spin.slice(1), true);
        started.push(child);
        await group.add(child.pid);
        child.release();
      }
      // Ordinary processes on the same CPU, more of them than the apps' parent weighs: the app waits.
      for (let i = 0; i <= os.availableParallelism(); i++) started.push(start(spin[0]!, spin.slice(1), false));
      const startedAt = Date.now();
      await eventually(
        'throttling and waiting to be counted',
        async () =>
          ((await limited.usage()).cpuThrottledSeconds ?? 0) >= 3 && ((await waiting.usage()).cpuWaitSeconds ?? 0) >= 3,
        { everyMs: 20 },
      );
      const elapsed = (Date.now() - startedAt) / 1000;
      const throttled = cpuStarvation(before.limited, await limited.usage(), elapsed);
      assert.match(
        throttled ?? '',
        /^It was short of CPU: in those .* it ran for .* was held back .* by its own CPU limit/,
      );
      const waited = cpuStarvation(before.waiting, await waiting.usage(), elapsed);
      assert.match(
        waited ?? '',
        /^It was short of CPU: in those .* it ran for .* waited .* for a CPU that other work held/,
      );
      // And an idle group was not short of anything.
      const idle = await create('idle', { memoryBytes: 128 * MIB, cpu: 1, pids: 64 });
      assert.equal(cpuStarvation(await idle.usage(), await idle.usage(), elapsed), null);
    } finally {
      for (const c of started) c.child.kill('SIGKILL');
      await Promise.all(started.map((c) => c.exit));
    }
  });

  test('a process over the memory limit is killed by the OOM killer, and counted; the service lives on', async () => {
    const group = await create('oom', { memoryBytes: 64 * MIB, cpu: 1, pids: 64 });
    const fill =
      'const kept = []; for (let i = 0; i < 200; i++) kept.push(Buffer.alloc(1024 * 1024, 1));' +
      "process.stdout.write('survived ' + kept.length + '\\n');";
    const run = start(process.execPath, ['-e', fill], true);
    try {
      await group.add(run.pid);
      run.release();
      const exit = await run.exit;
      assert.deepEqual(exit, { code: null, signal: 'SIGKILL' }, `stdout: ${run.stdout()} stderr: ${run.stderr()}`);
      assert.doesNotMatch(run.stdout(), /survived/);
      assert.ok((await group.oomKills()) >= 1, 'oom_kill counted');
      const peak = Number(await readValue(dirOf(group, 'memory'), 'memory.max_usage_in_bytes'));
      assert.ok(peak <= 64 * MIB, `peak ${peak} within the limit`);
    } finally {
      run.child.kill('SIGKILL');
      await group.remove();
    }
    assert.equal(await group.oomKills().catch(() => 'gone'), 'gone');
  });

  test('the task limit stops a fork loop; remove() kills all of it and removes the groups', async () => {
    const group = await create('pids', { memoryBytes: 256 * MIB, cpu: 1, pids: 20 });
    const loop = 'i=0; while [ $i -lt 100 ]; do sleep 30 & i=$((i+1)); done; wait';
    const run = start('/bin/sh', ['-c', loop], true);
    const inside: number[] = [];
    try {
      await group.add(run.pid);
      run.release();
      await eventually('the shell failing to fork', () => /fork/i.test(run.stderr()), { everyMs: 20 });
      const pidsDir = dirOf(group, 'pids');
      inside.push(...(await procs(pidsDir)));
      assert.ok(inside.length > 1 && inside.length <= 20, `${inside.length} processes started, at most 20`);
      assert.ok(Number(await readValue(pidsDir, 'pids.current')) <= 20);
      assert.ok(Number(/max (\d+)/.exec(await readValue(pidsDir, 'pids.events'))?.[1] ?? 1) >= 1);
    } finally {
      await group.remove();
    }
    for (const pid of inside) await eventually(`process ${pid} to die`, () => isDead(pid), { everyMs: 20 });
    for (const dir of group.paths) assert.equal(await exists(dir), false, `${dir} removed`);
    // Again: nothing to do.
    await group.remove();
  });

  test('all apps together: the parent groups get memory and task limits of their own, and fork loops in two groups stop at the shared one', async () => {
    const together = await createResourceControl({
      parent: `${parent}-all`,
      parentLimits: { memoryBytes: 512 * MIB, pids: 30 },
    });
    const groups: ResourceGroup[] = [];
    try {
      assert.equal(together.kind, 'cgroup-v1');
      assert.match(together.description, /all apps and builds together at most 512 MiB of memory and 30 tasks/);
      const parentOf = (controller: string) => together.paths.find((p) => p.split(path.sep).includes(controller))!;
      assert.equal(await readValue(parentOf('memory'), 'memory.limit_in_bytes'), String(512 * MIB));
      assert.equal(await readValue(parentOf('pids'), 'pids.max'), '30');
      // Each group may have 512 tasks; together they get 30.
      const loop = 'i=0; while [ $i -lt 40 ]; do sleep 30 & i=$((i+1)); done; wait';
      for (const name of ['a', 'b']) {
        const group = await together.create(`dep-${name}-${randomBytes(3).toString('hex')}`, {
          memoryBytes: 1024 * MIB,
          cpu: 1,
          pids: 512,
        });
        groups.push(group);
        const run = start('/bin/sh', ['-c', loop], true);
        await group.add(run.pid);
        run.release();
        await eventually(`group ${name}'s shell failing to fork`, () => /fork/i.test(run.stderr()), { everyMs: 20 });
      }
      assert.ok(Number(await readValue(parentOf('pids'), 'pids.current')) <= 30);
    } finally {
      for (const group of groups) await group.remove();
      const parents = together.paths;
      await together.dispose();
      await sweep(parents);
    }
  });

  test('a process added before it forks takes its children into the group', async () => {
    const group = await create('inherit', { memoryBytes: 128 * MIB, cpu: 1, pids: 64 });
    const run = start('/bin/sh', ['-c', 'sleep 30 & echo $!; wait'], true);
    let childPid = 0;
    try {
      await group.add(run.pid);
      run.release();
      await eventually('the child pid', () => run.stdout().includes('\n'), { everyMs: 20 });
      childPid = Number(run.stdout().trim());
      for (const dir of group.paths) {
        const held = await procs(dir);
        assert.ok(held.includes(run.pid) && held.includes(childPid), `${dir}: ${held.join(' ')}`);
      }
    } finally {
      await group.remove();
    }
    assert.equal((await run.exit).signal, 'SIGKILL');
    await eventually('the child to die', () => isDead(childPid), { everyMs: 20 });
  });

  test('a process added after it forked leaves its earlier children outside (why callers hold it)', async () => {
    const group = await create('late', { memoryBytes: 128 * MIB, cpu: 1, pids: 64 });
    const run = start('/bin/sh', ['-c', 'sleep 30 & echo $!; wait'], false);
    let childPid = 0;
    try {
      await eventually('the child pid', () => run.stdout().includes('\n'), { everyMs: 20 });
      childPid = Number(run.stdout().trim());
      await group.add(run.pid);
      for (const dir of group.paths) {
        const held = await procs(dir);
        assert.ok(held.includes(run.pid) && !held.includes(childPid), `${dir}: ${held.join(' ')}`);
      }
    } finally {
      if (childPid > 0) process.kill(childPid, 'SIGKILL');
      await group.remove();
    }
  });

  test('names: only safe ones; an empty leftover is replaced, a group in use is not', async () => {
    const limits = { memoryBytes: 64 * MIB, cpu: 1, pids: 16 };
    for (const name of ['', '.', '..', '../escape', 'a/b', '.hidden', 'x'.repeat(200)]) {
      await assert.rejects(control.create(name, limits), /not a safe cgroup name/, JSON.stringify(name));
    }
    await assert.rejects(control.create('ok', { ...limits, memoryBytes: 0 }), RangeError);
    await assert.rejects(control.create('ok', { ...limits, cpu: 0 }), RangeError);
    await assert.rejects(control.create('ok', { ...limits, pids: 1.5 }), RangeError);

    const name = `dep-again-${randomBytes(3).toString('hex')}`;
    // Left over from a crash, empty: replaced (the first object is not used again).
    await control.create(name, limits);
    const group = await control.create(name, { ...limits, pids: 17 });
    made.push(group);
    assert.equal(await readValue(dirOf(group, 'pids'), 'pids.max'), '17');
    const run = start('sleep', ['30'], false);
    try {
      await group.add(run.pid);
      await assert.rejects(control.create(name, limits), /already exists and is in use/);
      assert.ok((await procs(dirOf(group, 'memory'))).includes(run.pid), 'the group in use is intact');
    } finally {
      await group.remove();
    }
    assert.equal((await run.exit).signal, 'SIGKILL');
  });

  test('a parent group another service removed (the last to stop, when it was empty) is made again', async () => {
    // Two services of one machine share the parent; the one that made it removes it when it stops.
    const shared = `slipway-shared-${process.pid}-${randomBytes(3).toString('hex')}`;
    const first = await createResourceControl({ parent: shared });
    const second = await createResourceControl({ parent: shared });
    await first.dispose();
    for (const dir of second.paths) assert.equal(await exists(dir), false, `${dir} removed by the first`);
    const group = await second.create(`after-${randomBytes(3).toString('hex')}`, {
      memoryBytes: 64 * MIB,
      cpu: 1,
      pids: 16,
    });
    try {
      for (const dir of group.paths) assert.ok(await exists(path.join(dir, 'cgroup.procs')), dir);
      const cpuParent = second.paths.find((p) => p.split(path.sep).includes('cpu'))!;
      assert.equal(await readValue(cpuParent, 'cpu.shares'), String(parentShares), 'the weight is set again');
    } finally {
      await group.remove();
      await sweep(second.paths);
    }
  });

  test('a parent group another user made (a root service before this one ran as its own user) is found unwritable before use: no limits, and why', async () => {
    const foreign = `slipway-foreign-${process.pid}-${randomBytes(3).toString('hex')}`;
    const dirs = control.paths
      .filter((p) => !p.split(path.sep).includes('cpuacct'))
      .map((p) => path.join(path.dirname(p), foreign));
    for (const dir of dirs) await fs.mkdir(dir);
    try {
      // This process is root: the file operations refuse what the kernel would refuse a service that is
      // not, in the other user's groups (the hierarchies themselves taken as delegated to it).
      const denied = (file: string) => dirs.some((dir) => file === dir || file.startsWith(`${dir}/`));
      const eacces = (file: string) =>
        Object.assign(new Error(`EACCES: permission denied '${file}'`), { code: 'EACCES' });
      const io: CgroupFs = {
        readFile: (file) => fs.readFile(file, 'utf8'),
        exists: (file) => exists(file),
        subgroups: async (dir) =>
          (await fs.readdir(dir, { withFileTypes: true })).filter((e) => e.isDirectory()).map((e) => e.name),
        mkdir: async (dir) => (denied(path.dirname(dir)) ? Promise.reject(eacces(dir)) : fs.mkdir(dir)),
        rmdir: async (dir) => (denied(path.dirname(dir)) ? Promise.reject(eacces(dir)) : fs.rmdir(dir)),
        writeFile: async (file, data) => (denied(file) ? Promise.reject(eacces(file)) : fs.writeFile(file, data)),
      };
      const other = await createResourceControl({ parent: foreign, fs: io, uid: 990 });
      assert.equal(other.kind, 'none');
      assert.match(other.description, /^no resource limits: .* is not writable by the service/);
      // A build or an app still runs, without limits: no EACCES when its group is made.
      const group = await other.create('build-1-install', DEFAULT_LIMITS);
      assert.deepEqual(group.paths, []);
      await group.remove();
      await other.dispose();
      for (const dir of dirs) assert.ok(await exists(dir), `${dir}, the other user's, is left alone`);
    } finally {
      for (const dir of dirs) await fs.rmdir(dir).catch(() => undefined);
    }
  });

  test('a service as an ordinary user, after a root one with the same data directory on this host, makes its groups or says why not: never EACCES', async (t) => {
    const setpriv = await findExecutable('setpriv');
    if (setpriv === null) return t.skip("needs util-linux's setpriv to run as another user");
    const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-after-root-'));
    // The root service, running: its parent group with a group of an app in it; and the fixed `slipway`
    // of earlier versions, as root made it (nothing chowned).
    const rootControl = await createResourceControl({ service: dataDir });
    const rootGroup = await rootControl.create(`app-${randomBytes(3).toString('hex')}`, DEFAULT_LIMITS);
    const old = rootControl.paths.map((p) => path.join(path.dirname(p), 'slipway'));
    const madeOld: string[] = [];
    for (const dir of old)
      if (
        await fs.mkdir(dir).then(
          () => true,
          () => false,
        )
      )
        madeOld.push(dir);
    try {
      const module = fileURLToPath(new URL('../../src/dataplane/resource-limits.ts', import.meta.url));
      const script = `
        const m = await import(${JSON.stringify(module)});
        const control = await m.createResourceControl({ service: ${JSON.stringify(dataDir)} });
        const group = await control.create('build-1-install', m.DEFAULT_LIMITS);
        console.log(JSON.stringify({ kind: control.kind, description: control.description, paths: group.paths }));
        await group.remove();
        await control.dispose();`;
      const run = start(
        setpriv,
        [
          '--reuid=65534',
          '--regid=65534',
          '--clear-groups',
          '--',
          process.execPath,
          '--import',
          'tsx',
          '--input-type=module',
          '-e',
          script,
        ],
        false,
      );
      const exit = await run.exit;
      assert.deepEqual(exit, { code: 0, signal: null }, `stdout: ${run.stdout()} stderr: ${run.stderr()}`);
      const seen = JSON.parse(run.stdout().trim().split('\n').at(-1)!) as {
        kind: string;
        description: string;
        paths: string[];
      };
      // Here (cgroup v1, nothing delegated to nobody) that is no limits, and the reason; where its
      // user has a delegated subtree, its own groups. Never the root service's.
      if (seen.kind === 'none') assert.match(seen.description, /not writable by the service/);
      for (const dir of seen.paths) {
        assert.ok(!rootControl.paths.some((p) => dir.startsWith(`${p}/`)), `${dir} is not in the root service's group`);
      }
    } finally {
      await rootGroup.remove();
      await rootControl.dispose();
      for (const dir of madeOld) await fs.rmdir(dir).catch(() => undefined);
      await fs.rm(dataDir, { recursive: true, force: true });
    }
  });

  test('dispose() removes the parent groups once they are empty', async () => {
    for (const group of made) await group.remove();
    const parents = control.paths;
    await control.dispose();
    for (const dir of parents) assert.equal(await exists(dir), false, `${dir} removed`);
  });
});

// --- cgroup v2: the logic, against a fake hierarchy ----------------------------------------------------

describe('cgroup v2 (a fake hierarchy; the kernel here is v1)', () => {
  const limits = { memoryBytes: 64 * MIB, cpu: 0.5, pids: 20 };

  test('as root: its own parent group under the root group, controllers enabled along the path, weights, limits in the leaf', async (t) => {
    const fake = await createFakeCgroupV2();
    t.after(() => fake.cleanup());
    // As systemd leaves it: memory and pids passed on, cpu not (yet); the service in its unit's group.
    await fake.group('', { subtreeControl: ['memory', 'pids'] });
    await fake.group('system.slice', { subtreeControl: ['memory', 'pids'] });
    await fake.group('system.slice/slipway.service', { procs: [SERVICE_PID] });
    const control = await createResourceControl({
      root: fake.root,
      fs: fake.fs,
      uid: 0,
      service: '/var/lib/slipway',
      cpus: 4,
      selfCgroup: '0::/system.slice/slipway.service\n',
    });
    const parentName = parentGroupName(0, '/var/lib/slipway');
    assert.equal(control.kind, 'cgroup-v2');
    assert.deepEqual(control.paths, [path.join(fake.root, parentName)]);
    assert.match(control.description, /^cgroup v2: .*memory limit \(no swap\).*CPU quota.*task limit/);
    assert.equal(await fake.read('', 'cgroup.subtree_control'), 'cpu memory pids\n');
    assert.equal(await fake.read(parentName, 'cgroup.subtree_control'), 'cpu memory pids\n');
    // All apps together weigh as many ordinary groups as there are CPUs: their share on a busy host.
    assert.equal(await fake.read(parentName, 'cpu.idle'), '0\n');
    assert.equal(await fake.read(parentName, 'cpu.weight'), '400\n');
    assert.match(
      control.description,
      /all apps and builds together weigh 400 \(cpu\.weight\), 4 ordinary processes' worth/,
    );

    const group = await control.create('dep-web-0-1', { ...limits, cpuRequest: 0.25 });
    const leaf = `${parentName}/dep-web-0-1`;
    assert.deepEqual(group.paths, [path.join(fake.root, leaf)]);
    assert.equal(await fake.read(leaf, 'memory.max'), `${64 * MIB}\n`);
    assert.equal(await fake.read(leaf, 'memory.swap.max'), '0\n');
    assert.equal(await fake.read(leaf, 'cpu.max'), '50000 100000\n');
    assert.equal(await fake.read(leaf, 'cpu.weight'), '25\n', 'its weight: its request, 100 a core');
    assert.equal(await fake.read(leaf, 'pids.max'), '20\n');

    const sleeper = start('sleep', ['30'], false);
    await group.add(sleeper.pid);
    assert.equal(await fake.read(leaf, 'cgroup.procs'), `${sleeper.pid}\n`);
    assert.equal(await group.oomKills(), 0);
    await fake.set(leaf, 'memory.events', 'low 0\nhigh 0\nmax 9\noom 2\noom_kill 2\noom_group_kill 0\n');
    assert.equal(await group.oomKills(), 2);
    // Usage, as the kernel reports it: CPU time in microseconds, memory in bytes.
    const fresh = await group.usage();
    assert.deepEqual(fresh, { cpuSeconds: 0, memoryBytes: 0, cpuThrottledSeconds: 0, cpuWaitSeconds: 0 });
    await fake.set(
      leaf,
      'cpu.stat',
      'usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\nnr_periods 600\nnr_throttled 500\nthrottled_usec 40000000\n',
    );
    await fake.set(
      leaf,
      'cpu.pressure',
      'some avg10=80.00 avg60=70.00 avg300=20.00 total=15000000\nfull avg10=0 avg60=0 avg300=0 total=0\n',
    );
    await fake.set(leaf, 'memory.current', `${48 * MIB}\n`);
    const later = await group.usage();
    assert.deepEqual(later, { cpuSeconds: 2.5, memoryBytes: 48 * MIB, cpuThrottledSeconds: 40, cpuWaitSeconds: 15 });
    // What a health check that ran out of time after 60 s says of it.
    assert.equal(
      cpuStarvation(fresh, later, 60),
      'It was short of CPU: in those 60 s it ran for 2.5 s and waited 15 s for a CPU that other work held and was held back 40 s by its own CPU limit (cpu_limit).',
    );

    await group.remove();
    // cgroup.kill did it.
    assert.equal((await sleeper.exit).signal, 'SIGKILL');
    assert.equal(await exists(path.join(fake.root, leaf)), false);
    await control.dispose();
    assert.equal(await exists(path.join(fake.root, parentName)), false);
    // The service's own group is left as it was.
    assert.equal(await fake.read('system.slice/slipway.service', 'cgroup.procs'), `${SERVICE_PID}\n`);
    assert.equal(await fake.read('system.slice/slipway.service', 'cgroup.subtree_control'), '\n');
  });

  test('all apps together: the parent group gets memory (no swap) and task limits of its own, made again with it', async (t) => {
    const fake = await createFakeCgroupV2();
    t.after(() => fake.cleanup());
    const control = await createResourceControl({
      root: fake.root,
      fs: fake.fs,
      uid: 0,
      service: '/var/lib/slipway',
      selfCgroup: '0::/\n',
      parentLimits: { memoryBytes: 3072 * MIB, pids: 16_384 },
    });
    const parentName = parentGroupName(0, '/var/lib/slipway');
    assert.equal(control.kind, 'cgroup-v2');
    assert.match(control.description, /all apps and builds together at most 3072 MiB of memory and 16384 tasks/);
    assert.equal(await fake.read(parentName, 'memory.max'), `${3072 * MIB}\n`);
    assert.equal(await fake.read(parentName, 'memory.swap.max'), '0\n');
    assert.equal(await fake.read(parentName, 'pids.max'), '16384\n');
    // Another service removed the parent (the last to stop): the limits come back with it.
    await fs.rm(path.join(fake.root, parentName), { recursive: true });
    const group = await control.create('dep-web-0-1', limits);
    assert.equal(await fake.read(parentName, 'memory.max'), `${3072 * MIB}\n`);
    assert.equal(await fake.read(parentName, 'pids.max'), '16384\n');
    await group.remove();
    await control.dispose();
  });

  test('not root, systemd Delegate=yes with DelegateSubgroup=supervisor: next to its own group', async (t) => {
    const fake = await createFakeCgroupV2({ writable: ['system.slice/slipway.service'] });
    t.after(() => fake.cleanup());
    await fake.group('', { subtreeControl: ['cpu', 'memory', 'pids'] });
    await fake.group('system.slice', { subtreeControl: ['cpu', 'memory', 'pids'] });
    await fake.group('system.slice/slipway.service/supervisor', { procs: [SERVICE_PID] });
    const control = await createResourceControl({
      root: fake.root,
      fs: fake.fs,
      uid: 990,
      selfCgroup: '0::/system.slice/slipway.service/supervisor\n',
    });
    assert.equal(control.kind, 'cgroup-v2');
    const unit = 'system.slice/slipway.service';
    assert.deepEqual(control.paths, [path.join(fake.root, unit, 'slipway-990')]);
    assert.equal(await fake.read(unit, 'cgroup.subtree_control'), 'cpu memory pids\n');
    assert.equal(await fake.read(`${unit}/slipway-990`, 'cgroup.subtree_control'), 'cpu memory pids\n');

    const group = await control.create('build-1-install', { memoryBytes: 2048 * MIB, cpu: 2, pids: 512 });
    const leaf = `${unit}/slipway-990/build-1-install`;
    assert.equal(await fake.read(leaf, 'memory.max'), `${2048 * MIB}\n`);
    assert.equal(await fake.read(leaf, 'cpu.max'), '200000 100000\n');
    assert.equal(await fake.read(leaf, 'pids.max'), '512\n');
    await group.remove();
    await control.dispose();
    assert.equal(await exists(path.join(fake.root, unit, 'slipway-990')), false);
    assert.equal(await fake.read(`${unit}/supervisor`, 'cgroup.procs'), `${SERVICE_PID}\n`);
  });

  test('a service as its own user after a root one on the same host: a parent group of its own, never the one root left', async (t) => {
    const unit = 'system.slice/slipway.service';
    const dataDir = '/var/lib/slipway';
    // What the root service (and an older version, with its fixed `slipway`) left behind: root's groups.
    const left = [`${unit}/slipway`, `${unit}/${parentGroupName(0, dataDir)}`];
    const fake = await createFakeCgroupV2({ writable: [unit], foreign: left });
    t.after(() => fake.cleanup());
    await fake.group('', { subtreeControl: ['cpu', 'memory', 'pids'] });
    await fake.group('system.slice', { subtreeControl: ['cpu', 'memory', 'pids'] });
    await fake.group(unit, { subtreeControl: ['cpu', 'memory', 'pids'] });
    await fake.group(`${unit}/supervisor`, { procs: [SERVICE_PID] });
    for (const group of left) await fake.group(`${group}/app-leftover`);
    const control = await createResourceControl({
      root: fake.root,
      fs: fake.fs,
      uid: 990,
      service: dataDir,
      selfCgroup: `0::/${unit}/supervisor\n`,
    });
    assert.equal(control.kind, 'cgroup-v2', control.description);
    assert.notEqual(parentGroupName(990, dataDir), parentGroupName(0, dataDir));
    assert.deepEqual(control.paths, [path.join(fake.root, unit, parentGroupName(990, dataDir))]);
    const group = await control.create('build-1-install', limits);
    assert.equal(await fake.read(`${unit}/${parentGroupName(990, dataDir)}/build-1-install`, 'pids.max'), '20\n');
    await group.remove();
    await control.dispose();
    for (const group of left)
      assert.ok(await exists(path.join(fake.root, group, 'app-leftover')), `${group} left alone`);
  });

  test('an existing parent group of its name that the service may not write: no limits, said at start; builds still run', async (t) => {
    const unit = 'system.slice/slipway.service';
    const name = parentGroupName(990, '/var/lib/slipway');
    const fake = await createFakeCgroupV2({ writable: [unit], foreign: [`${unit}/${name}`] });
    t.after(() => fake.cleanup());
    await fake.group('', { subtreeControl: ['cpu', 'memory', 'pids'] });
    await fake.group('system.slice', { subtreeControl: ['cpu', 'memory', 'pids'] });
    await fake.group(unit, { subtreeControl: ['cpu', 'memory', 'pids'] });
    await fake.group(`${unit}/supervisor`, { procs: [SERVICE_PID] });
    // Made by someone else, with every controller passed on (so that only making a group in it fails).
    await fake.group(`${unit}/${name}`, { subtreeControl: ['cpu', 'memory', 'pids'] });
    const control = await createResourceControl({
      root: fake.root,
      fs: fake.fs,
      uid: 990,
      service: '/var/lib/slipway',
      selfCgroup: `0::/${unit}/supervisor\n`,
    });
    assert.equal(control.kind, 'none');
    assert.match(control.description, new RegExp(`^no resource limits: .*${name} is not writable by the service`));
    const group = await control.create('build-1-install', limits);
    assert.deepEqual(group.paths, []);
    await group.remove();
  });

  test('groups an earlier run left empty are removed at start; a parent the idle class had is given its weight', async (t) => {
    const fake = await createFakeCgroupV2();
    t.after(() => fake.cleanup());
    const name = parentGroupName(0, '/srv/slipway');
    await fake.group('', { subtreeControl: ['cpu', 'memory', 'pids'] });
    await fake.group(name, { subtreeControl: ['cpu', 'memory', 'pids'] });
    await fake.group(`${name}/dep-web-0-1`);
    await fake.set(name, 'cpu.idle', '1\n');
    const control = await createResourceControl({
      root: fake.root,
      fs: fake.fs,
      uid: 0,
      service: '/srv/slipway',
      cpus: 2,
      selfCgroup: '0::/system.slice/slipway.service\n',
    });
    assert.equal(control.kind, 'cgroup-v2', control.description);
    assert.equal(await exists(path.join(fake.root, name, 'dep-web-0-1')), false, 'the leftover is gone');
    assert.equal(await fake.read(name, 'cpu.idle'), '0\n');
    assert.equal(await fake.read(name, 'cpu.weight'), '200\n');
    await control.dispose();
    assert.equal(await exists(path.join(fake.root, name)), false, 'removed at stop, though an earlier run made it');
  });

  test('parent group names: per user and data directory, stable, and safe', () => {
    assert.equal(parentGroupName(0), 'slipway-0');
    assert.equal(parentGroupName(null), 'slipway');
    const names = [parentGroupName(0, '/a'), parentGroupName(1000, '/a'), parentGroupName(0, '/b')];
    assert.equal(new Set(names).size, 3);
    assert.equal(parentGroupName(0, '/a'), parentGroupName(0, '/a/'));
    for (const name of names) assert.match(name, /^slipway-\d+-[0-9a-f]{12}$/);
  });

  test("not root, in a user's systemd: in the user's app.slice, enabling what it lacks", async (t) => {
    const user = 'user.slice/user-1000.slice/user@1000.service';
    const fake = await createFakeCgroupV2({ writable: [user] });
    t.after(() => fake.cleanup());
    const parentName = 'slipway-1000';
    await fake.group('', { subtreeControl: ['cpu', 'memory', 'pids'] });
    await fake.group('user.slice', { subtreeControl: ['cpu', 'memory', 'pids'] });
    await fake.group('user.slice/user-1000.slice', { subtreeControl: ['cpu', 'memory', 'pids'] });
    await fake.group(user, { subtreeControl: ['cpu', 'memory', 'pids'] });
    await fake.group(`${user}/app.slice`, { subtreeControl: ['memory', 'pids'] });
    await fake.group(`${user}/app.slice/slipway.service`, { procs: [SERVICE_PID] });
    const control = await createResourceControl({
      root: fake.root,
      fs: fake.fs,
      uid: 1000,
      selfCgroup: `0::/${user}/app.slice/slipway.service\n`,
    });
    assert.equal(control.kind, 'cgroup-v2');
    assert.deepEqual(control.paths, [path.join(fake.root, user, 'app.slice', parentName)]);
    assert.equal(await fake.read(`${user}/app.slice`, 'cgroup.subtree_control'), 'cpu memory pids\n');
    const group = await control.create('x', limits);
    assert.equal(await fake.read(`${user}/app.slice/${parentName}/x`, 'cpu.max'), '50000 100000\n');
    await group.remove();
    await control.dispose();
  });

  test('not root and nothing delegated: none, the reason in the description, every operation a no-op', async (t) => {
    const fake = await createFakeCgroupV2({ writable: [] });
    t.after(() => fake.cleanup());
    await fake.group('', { subtreeControl: ['cpu', 'memory', 'pids'] });
    await fake.group('system.slice', { subtreeControl: ['cpu', 'memory', 'pids'] });
    await fake.group('system.slice/slipway.service', { procs: [SERVICE_PID] });
    const control = await createResourceControl({
      root: fake.root,
      fs: fake.fs,
      uid: 990,
      selfCgroup: '0::/system.slice/slipway.service\n',
    });
    assert.equal(control.kind, 'none');
    assert.match(control.description, /^no resource limits: .*system\.slice\/slipway-990 is not writable.*delegated/);
    assert.deepEqual(control.paths, []);
    const group = await control.create('dep-web-0-1', limits);
    assert.deepEqual(group.paths, []);
    await group.add(SERVICE_PID);
    assert.equal(await group.oomKills(), 0);
    await group.remove();
    await control.dispose();
    assert.equal(await exists(path.join(fake.root, 'system.slice', 'slipway-990')), false);
    // Bad input fails the same way as with cgroups.
    await assert.rejects(control.create('../x', limits), /not a safe cgroup name/);
    await assert.rejects(control.create('x', { ...limits, cpu: -1 }), RangeError);
  });

  test("root of a container's cgroup namespace, holding processes: none, and why", async (t) => {
    const fake = await createFakeCgroupV2({ rootExempt: false });
    t.after(() => fake.cleanup());
    const control = await createResourceControl({ root: fake.root, fs: fake.fs, uid: 0, selfCgroup: '0::/\n' });
    assert.equal(control.kind, 'none');
    assert.match(control.description, /holds processes/);
    assert.equal(await exists(path.join(fake.root, 'slipway-0')), false);
  });

  test('cgroup v2 without the cpu controller, and no v1 hierarchies: none, naming what is missing', async (t) => {
    const fake = await createFakeCgroupV2({ controllers: ['io', 'memory', 'pids'] });
    t.after(() => fake.cleanup());
    const control = await createResourceControl({ root: fake.root, fs: fake.fs, uid: 0, selfCgroup: '0::/\n' });
    assert.equal(control.kind, 'none');
    assert.match(control.description, /offers no cpu controller/);
    assert.match(control.description, /no cgroup v1 memory hierarchy/);
  });

  test('a kernel without cpu.idle (before 5.15): the same weights', async (t) => {
    const fake = await createFakeCgroupV2({ idle: false });
    t.after(() => fake.cleanup());
    const control = await createResourceControl({
      root: fake.root,
      fs: fake.fs,
      uid: 0,
      cpus: 2,
      selfCgroup: '0::/\n',
    });
    assert.equal(control.kind, 'cgroup-v2');
    assert.equal(await fake.read('slipway-0', 'cpu.weight'), '200\n');
    assert.equal(await exists(path.join(fake.root, 'slipway-0/cpu.idle')), false);
    const group = await control.create('g', limits);
    assert.equal(await fake.read('slipway-0/g', 'cpu.weight'), '50\n');
    await group.remove();
    await control.dispose();
  });

  test('without swap accounting memory.swap.max is absent and left alone', async (t) => {
    const fake = await createFakeCgroupV2({ swap: false });
    t.after(() => fake.cleanup());
    const control = await createResourceControl({ root: fake.root, fs: fake.fs, uid: 0, selfCgroup: '0::/\n' });
    assert.equal(control.kind, 'cgroup-v2');
    const group = await control.create('g', limits);
    assert.equal(await fake.read('slipway-0/g', 'memory.max'), `${64 * MIB}\n`);
    assert.equal(await exists(path.join(fake.root, 'slipway-0/g/memory.swap.max')), false);
    await group.remove();
    await control.dispose();
  });
});
