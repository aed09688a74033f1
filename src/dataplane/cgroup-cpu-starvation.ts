/**
 * Whether an app or build that missed a deadline (its health check, a build step) was short of CPU,
 * from its cgroup's counters (ResourceGroup.usage(), src/dataplane/resource-limits.ts) read when the
 * wait began and when it ended: time its processes were ready to run and waited for a CPU that other
 * work held, and time its own CPU quota (`cpu_limit`) held it back. Without it, "did not answer within
 * 60 s" reads as the app's fault when the host gave it no CPU.
 */
import type { Usage } from './resource-limits.ts';

/** A share of the wait under which CPU is not named as the cause: a healthy start waits a little too. */
const SHORT_SHARE = 0.25;
/** And an absolute floor, so that a short wait does not blame the CPU for a few busy moments. */
const SHORT_SECONDS = 2;

function delta(before: number | null | undefined, after: number | null | undefined): number | null {
  if (after === null || after === undefined) return null;
  const change = after - (before ?? 0);
  // A thread that exited takes its v1 wait with it, so the sum may go down: then `after` (the waits of
  // the threads there now) is the best figure there is.
  return change >= 0 ? change : after;
}

function seconds(value: number): string {
  return value < 10 ? `${value.toFixed(1)} s` : `${Math.round(value)} s`;
}

/**
 * A sentence saying that the group was short of CPU during the `elapsedSeconds` between two readings
 * of its usage (`before` at the start of the wait, `after` at its end), or null when it was not (or the
 * kernel keeps no figures here: no cgroup, or not readable). It names what held it back: the host's
 * other work (wait) or its own CPU limit (throttling), with the CPU time it did get.
 *
 * @example
 *   const before = await process.usage();
 *   // ... the health check runs out of time ...
 *   const why = cpuStarvation(before, await process.usage(), (Date.now() - started) / 1000);
 *   if (why) message += ` ${why}`;
 *   // "It was short of CPU: in those 60 s it ran for 0.4 s and waited 51 s for a CPU that other work held."
 */
export function cpuStarvation(
  before: Usage | null | undefined,
  after: Usage | null | undefined,
  elapsedSeconds: number,
): string | null {
  if (!after || !(elapsedSeconds > 0)) return null;
  const waited = delta(before?.cpuWaitSeconds, after.cpuWaitSeconds);
  const throttled = delta(before?.cpuThrottledSeconds, after.cpuThrottledSeconds);
  const ran = delta(before?.cpuSeconds, after.cpuSeconds);
  const short = (value: number | null) =>
    value !== null && value >= Math.max(SHORT_SECONDS, SHORT_SHARE * elapsedSeconds);
  const causes: string[] = [];
  if (short(waited)) causes.push(`waited ${seconds(Math.min(waited!, elapsedSeconds))} for a CPU that other work held`);
  if (short(throttled)) {
    causes.push(`was held back ${seconds(Math.min(throttled!, elapsedSeconds))} by its own CPU limit (cpu_limit)`);
  }
  if (causes.length === 0) return null;
  const got = ran === null ? '' : ` ran for ${seconds(ran)} and`;
  return `It was short of CPU: in those ${seconds(elapsedSeconds)} it${got} ${causes.join(' and ')}.`;
}
