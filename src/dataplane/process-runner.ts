/**
 * Runs one sandboxed command as its own process group, with exactly the environment given, its output
 * going to a log. The command is held before it starts (src/dataplane/sandbox.ts) until its cgroup
 * holds it and its network namespace has a way out, so that nothing it forks escapes its limits.
 * `stop` ends the whole group: SIGTERM, a grace period, then SIGKILL; whatever is left in its cgroup
 * is killed when it exits, so that a build's or an app's children never outlive it.
 *
 * Its exit counts only once every process of it is gone, not merely signalled: its sandbox's PID
 * namespace ended (src/dataplane/process-identity.ts), its cgroup emptied, or without either its
 * process group empty. Callers remove the trees it could write after that (docs/data-plane.md);
 * when it cannot be confirmed, the exit says so (`leftover`) and those trees are left alone.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs/promises';
import type { Readable, Writable } from 'node:stream';
import {
  groupMembers,
  identify,
  signalIdentified,
  waitGone,
  waitGroupGone,
  type ProcessIdentity,
} from './process-identity.ts';
import type { ResourceGroup, Usage } from './resource-limits.ts';
import { processUid } from './port-listeners.ts';
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
  /**
   * Null when every process of it is known to be gone; else what may still run (a sandbox whose
   * namespace did not end, a cgroup that could not be emptied): what it could write must not be touched.
   */
  leftover: string | null;
}

export interface RunningProcess {
  readonly pid: number | undefined;
  /** Resolves when the process has exited (never rejects; a spawn failure is exit code 127). */
  readonly exited: Promise<Exit>;
  /** SIGTERM to the group, SIGKILL after `graceMs`; resolves when it has exited. */
  stop(graceMs: number): Promise<Exit>;
  /** CPU time and memory of its cgroup (nulls without one, or before it is placed). */
  usage(): Promise<Usage>;
  /**
   * TCP ports listened on in its own network namespace (for a health check that found nothing on its
   * port: which one the app opened instead); null without a namespace of its own.
   */
  listeningPorts(): Promise<number[] | null>;
  /**
   * The users its processes run as on the host, but the service's own (its wrappers run as that): empty
   * when the command runs as the service's user, or has no process left.
   */
  users(): Promise<number[]>;
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
 * How long the end of a killed sandbox or group is waited for. The kernel ends killed processes in
 * milliseconds; one stuck in an uninterruptible wait (a hung network file system) can take longer, and
 * then its exit reports a leftover rather than holding its caller.
 */
const GONE_TIMEOUT_MS = 30_000;

/**
 * Signals the command's process group and, when known, the sandbox's own init: that one outlives the
 * outer bubblewrap when it is killed, ignores SIGTERM from outside its namespace, and holds the output
 * pipes open, so it is signalled even after the outer process has exited.
 */
function signalGroup(child: ChildProcess, signal: NodeJS.Signals, sandbox: ProcessIdentity | null = null): void {
  if (child.pid !== undefined) {
    try {
      // Negative pid: the whole process group (the child was started detached, as its group leader).
      process.kill(-child.pid, signal);
    } catch {
      // Already gone.
    }
  }
  // By identity: once the outer bubblewrap is gone the init is no child of ours, and its pid may be reused.
  // The init leads the sandbox's own session and process group (bubblewrap's --new-session): the whole
  // group is signalled, as the group outside is.
  if (sandbox) void signalIdentified(sandbox, signal, { group: true });
}

/**
 * SIGTERM to what runs inside a sandbox, never to the outer bubblewrap: that one dies of it, and its
 * --die-with-parent then SIGKILLs the whole sandbox at once, before the app's own SIGTERM handler has
 * run (it would see the signal and be killed mid-way). Without the outer one the app ends in its own
 * time, its sandbox after it; the SIGKILL after the grace period still goes to everything.
 */
async function terminateInside(child: ChildProcess, sandbox: ProcessIdentity | null): Promise<void> {
  if (child.pid === undefined) return;
  // The outer group, and the sandbox init's own when it leads one: all but the outer bubblewrap.
  const groups = [child.pid, ...(sandbox ? [sandbox.pid] : [])];
  const members = (await Promise.all(groups.map((pgid) => groupMembers(pgid)))).flat();
  for (const pid of new Set(members)) {
    if (pid === child.pid) continue;
    try {
      process.kill(pid, 'SIGTERM');
    } catch {
      // Gone in between.
    }
  }
}

/**
 * The command's own shell inside a sandbox outlives a stop's SIGTERM until the command has ended: dash
 * runs a command as its child, and a shell killed by the SIGTERM would end the sandbox (its init exits
 * with it, and the kernel kills what is left of the namespace) before the app's own SIGTERM handler has
 * run. A trap is a handler, not an ignored signal, so the command still gets SIGTERM's default action;
 * the shell then exits with the command's status, running nothing more of it.
 */
const untilCommandEnds = (command: string): string => `trap 'exit $?' TERM INT HUP; ${command}`;

/** The ports in state LISTEN (0A) of the network namespace `pid` is in, from /proc/<pid>/net/tcp and tcp6. */
async function listeningPortsOf(pid: number): Promise<number[] | null> {
  const ports = new Set<number>();
  for (const table of ['tcp', 'tcp6']) {
    const text = await fs.readFile(`/proc/${pid}/net/${table}`, 'utf8').catch(() => null);
    if (text === null) return null;
    for (const line of text.split('\n').slice(1)) {
      const [, local, , state] = line.trim().split(/\s+/);
      if (state === '0A' && local) ports.add(parseInt(local.split(':').pop()!, 16));
    }
  }
  return [...ports].sort((a, b) => a - b);
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

function startAttempt(options: RunOptions): RunningProcess {
  const { sandbox, run } = options;
  const plan = sandbox.plan(sandbox.kind === 'bwrap' ? { ...run, command: untilCommandEnds(run.command) } : run);
  const child = spawn(plan.file, plan.args, {
    cwd: plan.cwd,
    env: options.env,
    detached: true,
    // fd 3 holds the command until its sandbox is set up; fd 4 is bubblewrap's report of its sandbox;
    // fd 5 its seccomp filter.
    stdio: [
      'ignore',
      'pipe',
      'pipe',
      'pipe',
      ...(plan.hold === 'bwrap' ? (['pipe'] as const) : []),
      ...(plan.seccomp ? (['pipe'] as const) : []),
    ],
    ...(plan.uid !== undefined ? { uid: plan.uid, gid: plan.gid } : {}),
  });
  child.stdout?.on('data', (chunk: Buffer) => options.output.write('stdout', chunk));
  child.stderr?.on('data', (chunk: Buffer) => options.output.write('stderr', chunk));
  const hold = child.stdio[3] as Writable | null;
  const info = (child.stdio[4] ?? null) as Readable | null;
  const seccomp = (plan.seccomp ? (child.stdio as unknown[])[5] : null) as Writable | null;
  seccomp?.on('error', () => {
    // bubblewrap went away first; `exited` says how.
  });
  // bubblewrap reads the whole filter before it makes the sandbox (a little over a kilobyte: one write).
  seccomp?.end(plan.seccomp);
  hold?.on('error', () => {
    // The command went away before it was released; `exited` says how.
  });
  info?.on('error', () => {
    // As above.
  });

  let group: ResourceGroup | null = null;
  let network: NetworkAttachment | null = null;
  /** The sandbox's PID namespace init, once bubblewrap has reported it. */
  let sandboxInit: ProcessIdentity | null = null;
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
        signalGroup(child, 'SIGKILL', sandboxInit);
        resolve({ code, signal });
      }, 2_000).unref();
    });
  });

  const setUp = (async () => {
    if (child.pid === undefined) return;
    const pids = [child.pid];
    if (info) {
      const sandboxPid = await readSandboxPid(info);
      // Held by --block-fd, it cannot have exited yet: its identity is read while the pid is surely its own.
      sandboxInit = await identify(sandboxPid);
      pids.push(sandboxPid);
    }
    if (run.limits) {
      group = await sandbox.limits.create(run.name, run.limits);
      for (const pid of pids) await group.add(pid);
    }
    if (sandbox.slirp && info) {
      network = await attachNetwork(sandbox.slirp, pids[pids.length - 1]!, run.publishPort ?? null, (reason) =>
        options.output.system(`The sandbox's network took a second try: ${reason}`),
      );
    }
    hold?.end('go\n');
    info?.destroy();
  })().catch((error: unknown) => {
    options.output.system(`Could not set up the sandbox: ${error instanceof Error ? error.message : String(error)}`);
    signalGroup(child, 'SIGKILL', sandboxInit);
    return 'failed' as const;
  });

  const exited = (async (): Promise<Exit> => {
    const [{ code, signal }, setup] = await Promise.all([closed, setUp]);
    const attached = network as NetworkAttachment | null;
    // Without cgroups every command still gets a group, one that holds nothing (no directories): its
    // removal ends nothing, so what the command left in its process group is killed and waited for here.
    const placed = (group as ResourceGroup | null)?.paths.length ? (group as ResourceGroup | null) : null;
    const init = sandboxInit as ProcessIdentity | null;
    await attached?.close();
    const leftovers: string[] = [];
    // Gone, not just signalled: whatever it left behind is killed, and its end waited for.
    if (init) {
      await signalIdentified(init, 'SIGKILL');
      if (!(await waitGone(init, GONE_TIMEOUT_MS)))
        leftovers.push(`its sandbox (PID namespace init ${init.pid}) did not end`);
    } else if (child.pid !== undefined && !placed) {
      signalGroup(child, 'SIGKILL');
      if (!(await waitGroupGone(child.pid, GONE_TIMEOUT_MS)))
        leftovers.push(`processes of its group ${child.pid} did not end`);
    }
    let outOfMemory = false;
    if (placed) {
      outOfMemory = (await placed.oomKills().catch(() => 0)) > 0;
      // Whatever it left behind (a daemon that escaped the process group) goes with it.
      await placed.remove().catch((error: unknown) => {
        leftovers.push(`its cgroup could not be emptied: ${String(error)}`);
      });
    }
    const leftover = leftovers.length > 0 ? leftovers.join('; ') : null;
    if (leftover) options.output.system(`Processes of ${run.name} may still run: ${leftover}`);
    const memoryLimitBytes = run.limits?.memoryBytes ?? null;
    if (setup === 'failed') return { code: SETUP_FAILED, signal: null, outOfMemory: false, memoryLimitBytes, leftover };
    return { code, signal, outOfMemory, memoryLimitBytes, leftover };
  })();

  return {
    pid: child.pid,
    exited,
    usage: async () => group?.usage().catch(() => noUsage) ?? noUsage,
    listeningPorts: async () => {
      const init = sandboxInit;
      if (!init || !sandbox.networkIsolated) return null;
      return listeningPortsOf(init.pid);
    },
    async users() {
      if (child.pid === undefined) return [];
      const groups = [child.pid, ...(sandboxInit ? [sandboxInit.pid] : [])];
      const members = (await Promise.all(groups.map((pgid) => groupMembers(pgid)))).flat();
      const uids = await Promise.all([...new Set(members)].map((pid) => processUid(pid)));
      const own = process.getuid?.() ?? null;
      return [...new Set(uids.filter((uid): uid is number => uid !== null && uid !== own))];
    },
    async stop(graceMs) {
      if (plan.hold === 'bwrap') await terminateInside(child, sandboxInit);
      else signalGroup(child, 'SIGTERM', sandboxInit);
      const timer = setTimeout(() => signalGroup(child, 'SIGKILL', sandboxInit), graceMs);
      try {
        return await exited;
      } finally {
        clearTimeout(timer);
      }
    },
  };
}

/**
 * How many times a command is started when bubblewrap's setup keeps meeting the host's mounts changing.
 * bubblewrap binds the host's whole tree, then remounts each mount under it read-only, one by one, from
 * the list it read first: a mount made or removed meanwhile (a deployment's disk image, another tool's
 * mounts) fails its setup with "Can't bind mount /oldroot/ on /newroot/: Unable to apply mount flags:
 * remount ...: Invalid argument" (bubblewrap issue 650), before the command runs. Started again, it reads
 * the mounts again.
 */
const SETUP_ATTEMPTS = 3;
const MOUNTS_CHANGED = /^bwrap: Can't bind mount \/oldroot\/[^\n]*: Unable to apply mount flags: remount /;

/**
 * Starts the command (see the module's comment). A start whose sandbox setup met the host's mounts
 * changing (SETUP_ATTEMPTS) is started again, at once, and the output says so; the command had not
 * run. The process returned stands for the command across those starts.
 */
export function startProcess(options: RunOptions): RunningProcess {
  let stopping = false;
  let current: RunningProcess;
  /** What the current start wrote: whether anything on stdout, and the start of its stderr. */
  let seen = { stdout: false, stderr: '' };
  const attempt = (): RunningProcess => {
    const mine = { stdout: false, stderr: '' };
    seen = mine;
    return startAttempt({
      ...options,
      output: {
        write(stream, chunk) {
          if (stream === 'stdout') mine.stdout = true;
          else if (mine.stderr.length < 4096) mine.stderr += String(chunk);
          options.output.write(stream, chunk);
        },
        system: (line) => options.output.system(line),
      },
    });
  };
  current = attempt();
  const mountsChanged = (exit: Exit): boolean =>
    options.sandbox.kind === 'bwrap' &&
    // bubblewrap's own failure; or its sandbox gone before it could be identified (it reports the
    // sandbox before it makes the mounts).
    (exit.code === 1 || exit.code === SETUP_FAILED) &&
    exit.leftover === null &&
    !seen.stdout &&
    MOUNTS_CHANGED.test(seen.stderr);
  const exited = (async () => {
    for (let tries = 1; ; tries++) {
      const exit = await current.exited;
      if (stopping || tries >= SETUP_ATTEMPTS || !mountsChanged(exit)) return exit;
      options.output.system(
        `The sandbox could not be set up while the host's mounts changed; starting it again (${tries + 1} of ${SETUP_ATTEMPTS})`,
      );
      current = attempt();
    }
  })();
  return {
    get pid() {
      return current.pid;
    },
    exited,
    usage: () => current.usage(),
    listeningPorts: () => current.listeningPorts(),
    users: () => current.users(),
    async stop(graceMs) {
      stopping = true;
      await current.stop(graceMs);
      return exited;
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
