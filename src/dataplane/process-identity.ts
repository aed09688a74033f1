/**
 * Knowing that a process is gone, not merely signalled. The data plane removes trees an app could write
 * only once every process of the app is gone (docs/data-plane.md), and a SIGKILL is only a request:
 * the kernel ends the process a moment later. A pid alone is no proof either, since the kernel hands it
 * to a new process once the old one is reaped, so a process is known by its pid and its start time
 * (field 22 of `/proc/<pid>/stat`, in clock ticks since boot), which a reused pid cannot share.
 *
 * For a sandbox, the process watched is its PID namespace's init: the kernel kills every other process
 * of the namespace when the init exits, and lets the init become a zombie only after all of them are
 * gone, so "the init is a zombie or reaped" means "nothing of the sandbox runs".
 */
import fs from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';

export interface ProcessIdentity {
  pid: number;
  /** Clock ticks after boot at which it started. */
  startTime: string;
}

/** The `/proc/<pid>/stat` fields after the command name (which may hold spaces and parentheses). */
async function statFields(pid: number): Promise<string[] | null> {
  const text = await fs.readFile(`/proc/${pid}/stat`, 'utf8').catch(() => null);
  if (text === null) return null;
  const end = text.lastIndexOf(')');
  return end < 0 ? null : text.slice(end + 2).split(' ');
}

/** The identity of a running process; null when it is gone already (or this is no Linux). */
export async function identify(pid: number): Promise<ProcessIdentity | null> {
  const fields = await statFields(pid);
  // After the name: state (index 0), ..., starttime (field 22 of the whole line, index 19 here).
  const startTime = fields?.[19];
  return startTime === undefined ? null : { pid, startTime };
}

/** Whether the process has exited: reaped, a zombie, or its pid now someone else's. */
export async function isGone(process: ProcessIdentity): Promise<boolean> {
  const fields = await statFields(process.pid);
  if (fields === null) return true;
  return fields[0] === 'Z' || fields[0] === 'X' || fields[19] !== process.startTime;
}

/**
 * Signals the process only if it is still the one identified (its pid not reused); with `group`, the
 * process group it leads (itself alone when it leads none).
 */
export async function signalIdentified(
  target: ProcessIdentity,
  signal: NodeJS.Signals,
  options: { group?: boolean } = {},
): Promise<void> {
  if (await isGone(target)) return;
  if (options.group) {
    try {
      globalThis.process.kill(-target.pid, signal);
      return;
    } catch {
      // It leads no group (or is gone): itself below.
    }
  }
  try {
    globalThis.process.kill(target.pid, signal);
  } catch {
    // Gone in between.
  }
}

/** Resolves true once the process is gone, false if it is still there after `timeoutMs`. */
export async function waitGone(target: ProcessIdentity, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  for (let round = 0; ; round += 1) {
    if (await isGone(target)) return true;
    if (Date.now() >= deadline) return false;
    await sleep(round < 20 ? 5 : 50);
  }
}

/** The pids of the processes in process group `pgid` (field 5 of `/proc/<pid>/stat`). */
export async function groupMembers(pgid: number): Promise<number[]> {
  const found: number[] = [];
  for (const entry of await fs.readdir('/proc').catch(() => [] as string[])) {
    if (!/^\d+$/.test(entry)) continue;
    const fields = await statFields(Number(entry));
    if (fields?.[2] === String(pgid)) found.push(Number(entry));
  }
  return found;
}

/** Resolves true once no process is left in the process group, false if some still are after `timeoutMs`. */
export async function waitGroupGone(pgid: number, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  for (let round = 0; ; round += 1) {
    try {
      globalThis.process.kill(-pgid, 0);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ESRCH') return true;
      // EPERM: a member we may not signal (it changed its user): it is still there.
    }
    if (Date.now() >= deadline) return false;
    await sleep(round < 20 ? 5 : 50);
  }
}
