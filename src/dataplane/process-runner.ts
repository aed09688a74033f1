/**
 * Runs one sandboxed command as its own process group, with exactly the environment given, its output
 * going to a log. The command is held before it starts (src/dataplane/sandbox.ts) until its cgroup
 * holds it and its network namespace has a way out, so that nothing it forks escapes its limits.
 * `stop` ends the whole group: SIGTERM, a grace period, then SIGKILL; whatever is left in its cgroup
 * is killed when it exits, so that a build's or an app's children never outlive it.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import type { Readable, Writable } from 'node:stream';
import type { ResourceGroup, Usage } from './resource-limits.ts';
import { attachNetwork, type NetworkAttachment } from './sandbox-network.ts';
import type { Sandbox, SandboxRun } from './sandbox.ts';

/** Where output goes (a LogWriter of src/dataplane/log-writer.ts, in practice). */
export interface OutputSink {
  write(stream: 'stdout' | 'stderr', chunk: Buffer | string): void;
  system(line: string): void;
}

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** The kernel's OOM killer killed a process of it (it went over its memory limit). */
  outOfMemory: boolean;
  /** Its memory limit in bytes, when it had one. */
  memoryLimitBytes: number | null;
}

export interface RunningProcess {
  readonly pid: number | undefined;
  /** Resolves when the process has exited (never rejects; a spawn failure is exit code 127). */
  readonly exited: Promise<Exit>;
  /** SIGTERM to the group, SIGKILL after `graceMs`; resolves when it has exited. */
  stop(graceMs: number): Promise<Exit>;
  /** CPU time and memory of its cgroup (nulls without one, or before it is placed). */
  usage(): Promise<Usage>;
}

const noUsage: Usage = Object.freeze({ cpuSeconds: null, memoryBytes: null });

export interface RunOptions {
  sandbox: Sandbox;
  run: SandboxRun;
  env: Record<string, string>;
  output: OutputSink;
}

/** Exit code of a command whose sandbox could not be set up. */
const SETUP_FAILED = 125;

/**
 * Signals the command's process group and, when known, the sandbox's own init: that one outlives the
 * outer bubblewrap when it is killed, ignores SIGTERM from outside its namespace, and holds the output
 * pipes open, so it is signalled even after the outer process has exited.
 */
function signalGroup(child: ChildProcess, signal: NodeJS.Signals, sandboxPid: number | null = null): void {
  for (const pid of [child.pid === undefined ? null : -child.pid, sandboxPid]) {
    if (pid === null) continue;
    try {
      // Negative pid: the whole process group (the child was started detached, as its group leader).
      process.kill(pid, signal);
    } catch {
      // Already gone.
    }
  }
}

/** bubblewrap's info fd: a JSON object with `child-pid`, then end of file. */
async function readSandboxPid(info: Readable): Promise<number> {
  let text = '';
  for await (const chunk of info) {
    text += String(chunk);
    try {
      const parsed = JSON.parse(text) as { 'child-pid'?: unknown };
      if (typeof parsed['child-pid'] === 'number') return parsed['child-pid'];
    } catch {
      // Not complete yet.
    }
    if (text.length > 64 * 1024) break;
  }
  throw new Error('bubblewrap exited before it reported its sandbox');
}

export function startProcess(options: RunOptions): RunningProcess {
  const { sandbox, run } = options;
  const plan = sandbox.plan(run);
  const child = spawn(plan.file, plan.args, {
    cwd: plan.cwd,
    env: options.env,
    detached: true,
    // fd 3 holds the command until its sandbox is set up; fd 4 is bubblewrap's report of its sandbox.
    stdio: ['ignore', 'pipe', 'pipe', 'pipe', ...(plan.hold === 'bwrap' ? (['pipe'] as const) : [])],
    ...(plan.uid !== undefined ? { uid: plan.uid, gid: plan.gid } : {}),
  });
  child.stdout?.on('data', (chunk: Buffer) => options.output.write('stdout', chunk));
  child.stderr?.on('data', (chunk: Buffer) => options.output.write('stderr', chunk));
  const hold = child.stdio[3] as Writable | null;
  const info = (child.stdio[4] ?? null) as Readable | null;
  hold?.on('error', () => {
    // The command went away before it was released; `exited` says how.
  });
  info?.on('error', () => {
    // As above.
  });

  let group: ResourceGroup | null = null;
  let network: NetworkAttachment | null = null;
  let sandboxPid: number | null = null;
  const closed = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.once('error', (error) => {
      options.output.system(`Could not start the command: ${error.message}`);
      resolve({ code: 127, signal: null });
    });
    child.once('close', (code, signal) => resolve({ code, signal }));
    // A process left in the sandbox keeps the output pipes open: once the command has exited, its
    // leftovers are killed and the exit counts after a short wait for the last output.
    child.once('exit', (code, signal) => {
      setTimeout(() => {
        signalGroup(child, 'SIGKILL', sandboxPid);
        resolve({ code, signal });
      }, 2_000).unref();
    });
  });

  const setUp = (async () => {
    if (child.pid === undefined) return;
    const pids = [child.pid];
    if (info) {
      sandboxPid = await readSandboxPid(info);
      pids.push(sandboxPid);
    }
    if (run.limits) {
      group = await sandbox.limits.create(run.name, run.limits);
      for (const pid of pids) await group.add(pid);
    }
    if (sandbox.slirp && info) {
      network = await attachNetwork(sandbox.slirp, pids[pids.length - 1]!, run.publishPort ?? null);
    }
    hold?.end('go\n');
    info?.destroy();
  })().catch((error: unknown) => {
    options.output.system(`Could not set up the sandbox: ${error instanceof Error ? error.message : String(error)}`);
    signalGroup(child, 'SIGKILL', sandboxPid);
    return 'failed' as const;
  });

  const exited = (async (): Promise<Exit> => {
    const [{ code, signal }, setup] = await Promise.all([closed, setUp]);
    const attached = network as NetworkAttachment | null;
    const placed = group as ResourceGroup | null;
    await attached?.close();
    let outOfMemory = false;
    if (placed) {
      outOfMemory = (await placed.oomKills().catch(() => 0)) > 0;
      // Whatever it left behind (a daemon that escaped the process group) goes with it.
      await placed.remove().catch((error: unknown) => {
        options.output.system(`Could not remove the cgroup of ${run.name}: ${String(error)}`);
      });
    }
    const memoryLimitBytes = run.limits?.memoryBytes ?? null;
    if (setup === 'failed') return { code: SETUP_FAILED, signal: null, outOfMemory: false, memoryLimitBytes };
    return { code, signal, outOfMemory, memoryLimitBytes };
  })();

  return {
    pid: child.pid,
    exited,
    usage: async () => group?.usage().catch(() => noUsage) ?? noUsage,
    async stop(graceMs) {
      signalGroup(child, 'SIGTERM', sandboxPid);
      const timer = setTimeout(() => signalGroup(child, 'SIGKILL', sandboxPid), graceMs);
      try {
        return await exited;
      } finally {
        clearTimeout(timer);
      }
    },
  };
}

/** Runs a command to its end; an abort stops it at once (its group is killed). */
export async function runToEnd(options: RunOptions & { signal: AbortSignal; graceMs?: number }): Promise<Exit> {
  const running = startProcess(options);
  const onAbort = () => void running.stop(options.graceMs ?? 2_000);
  options.signal.addEventListener('abort', onAbort, { once: true });
  try {
    return await running.exited;
  } finally {
    options.signal.removeEventListener('abort', onAbort);
  }
}

export function describeExit(exit: Exit): string {
  if (exit.outOfMemory) {
    const limit = exit.memoryLimitBytes === null ? '' : ` of ${Math.round(exit.memoryLimitBytes / 1024 ** 2)} MiB`;
    return `was killed for going over its memory limit${limit} (out of memory)`;
  }
  return exit.signal ? `was killed by ${exit.signal}` : `exited with code ${exit.code}`;
}
