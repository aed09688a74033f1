/**
 * The idle CPU class (`SCHED_IDLE`) for the processes that carry app traffic outside the apps' own
 * cgroups: the app edge (HAProxy) and each app's user-mode network (slirp4netns). Such a process runs
 * on the cycles no other task wants, and a task that wakes (the API answering a request) takes the CPU
 * from it at once, where a higher nice value only shrinks its share and lets the API wait its turn: on a
 * busy machine, a few milliseconds on every API call. When nothing else runs, it gets every cycle.
 *
 * The apps themselves are in the idle class through their parent cgroup (`cpu.idle`,
 * src/dataplane/resource-limits.ts). A process is put in the class by util-linux's `chrt --idle 0`
 * before its command starts, so that its children and threads have it too; an unprivileged process may
 * enter the class but not leave it. Without chrt, the command runs at nice 10 instead.
 */
import { findExecutable } from './executables.ts';

/** The niceness of the fallback, where chrt is missing: a tenth of the CPU weight of a process at 0. */
export const FALLBACK_NICENESS = 10;

export interface IdlePriority {
  /** Put before a command's argv: runs it in the idle class (or at the fallback niceness). */
  prefix: readonly string[];
  /** util-linux's chrt, when there is one (it also moves a running process: `chrt --idle --pid 0 <pid>`). */
  chrt: string | null;
  /** `idle` when the command runs in the idle class, `nice` at the fallback niceness, `none` as it is. */
  kind: 'idle' | 'nice' | 'none';
}

let found: Promise<IdlePriority> | null = null;

/** How to start a command in the idle class here (found once per process). */
export function idlePriority(): Promise<IdlePriority> {
  found ??= (async () => {
    const chrt = await findExecutable('chrt');
    if (chrt) return { prefix: [chrt, '--idle', '0'], chrt, kind: 'idle' };
    const nice = await findExecutable('nice');
    if (nice) return { prefix: [nice, '-n', String(FALLBACK_NICENESS)], chrt: null, kind: 'nice' };
    return { prefix: [], chrt: null, kind: 'none' };
  })();
  return found;
}
