/**
 * Runs one sandboxed command (`sh -c <command>`) as its own process group, with exactly the
 * environment given, its output going to a log. `stop` ends the whole group: SIGTERM, a grace period,
 * then SIGKILL, so that a build's or an app's children never outlive it.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import type { Sandbox } from './sandbox.ts';

/** Where output goes (a LogWriter of src/dataplane/log-writer.ts, in practice). */
export interface OutputSink {
  write(stream: 'stdout' | 'stderr', chunk: Buffer | string): void;
  system(line: string): void;
}

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface RunningProcess {
  readonly pid: number | undefined;
  /** Resolves when the process has exited (never rejects; a spawn failure is exit code 127). */
  readonly exited: Promise<Exit>;
  /** SIGTERM to the group, SIGKILL after `graceMs`; resolves when it has exited. */
  stop(graceMs: number): Promise<Exit>;
}

export interface RunOptions {
  sandbox: Sandbox;
  command: string;
  /** The app directory: the command runs in its `src` and may write only inside it. */
  appDir: string;
  env: Record<string, string>;
  output: OutputSink;
}

function signalGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null) return;
  try {
    // Negative pid: the whole process group (the child was started detached, as its group leader).
    process.kill(-child.pid, signal);
  } catch {
    // The group is already gone.
  }
}

export function startProcess(options: RunOptions): RunningProcess {
  const plan = options.sandbox.plan(options.command, options.appDir);
  const child = spawn(plan.file, plan.args, {
    cwd: plan.cwd,
    env: options.env,
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
    ...(plan.uid !== undefined ? { uid: plan.uid, gid: plan.gid } : {}),
  });
  child.stdout?.on('data', (chunk: Buffer) => options.output.write('stdout', chunk));
  child.stderr?.on('data', (chunk: Buffer) => options.output.write('stderr', chunk));
  const exited = new Promise<Exit>((resolve) => {
    child.once('error', (error) => {
      options.output.system(`Could not start the command: ${error.message}`);
      resolve({ code: 127, signal: null });
    });
    child.once('close', (code, signal) => resolve({ code, signal }));
  });
  return {
    pid: child.pid,
    exited,
    async stop(graceMs) {
      signalGroup(child, 'SIGTERM');
      const timer = setTimeout(() => signalGroup(child, 'SIGKILL'), graceMs);
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
  return exit.signal ? `was killed by ${exit.signal}` : `exited with code ${exit.code}`;
}
