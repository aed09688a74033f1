/**
 * The health check of an app's web instances (src/dataplane/app-supervisor.ts waits on it): one probe of
 * the health path, and when the time runs out, the message that says what the app got wrong (nothing on
 * its port, another status, no answer) and whether it was short of CPU.
 */
import { cpuStarvation } from './cgroup-cpu-starvation.ts';
import { listenerUids } from './port-listeners.ts';
import type { RunningProcess } from './process-runner.ts';
import type { Usage } from './resource-limits.ts';

export class HealthCheckError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'HealthCheckError';
  }
}

/**
 * What one probe of the health path found: a 2xx, another status, nothing listening, no answer, or an
 * answer from another user's process holding the instance's port (`heldBy`: its uids).
 */
export type Probe =
  | { ok: true }
  | { ok: false; status: number }
  | { ok: false; refused: true }
  | { ok: false; silent: true }
  | { ok: false; heldBy: number[] };

/** How long one probe waits for an answer. */
const PROBE_TIMEOUT_MS = 2_000;

export async function probe(port: number, path: string): Promise<Probe> {
  try {
    const response = await fetch(`http://127.0.0.1:${port}${path}`, {
      signal: AbortSignal.timeout(PROBE_TIMEOUT_MS),
      redirect: 'manual',
    });
    await response.body?.cancel();
    return response.status >= 200 && response.status < 300 ? { ok: true } : { ok: false, status: response.status };
  } catch (error) {
    const code = (error as { cause?: { code?: string } }).cause?.code;
    // Refused or reset before an answer: nothing listens on the port (or it closed the connection at once).
    if (code === 'ECONNREFUSED' || code === 'ECONNRESET') return { ok: false, refused: true };
    return { ok: false, silent: true };
  }
}

/**
 * A probe's 2xx from an instance on a network shared with the host (docs/data-plane.md), where any
 * process may bind the port it was given before it does: it counts only when no user but the instance's
 * own (`users`: its processes' uids but the service's) listens on the port (src/dataplane/port-listeners.ts).
 * With no user known (the instance runs as the service's user), nothing tells them apart.
 */
export async function answeredByItself(found: Probe, port: number, users: readonly number[]): Promise<Probe> {
  if (!found.ok || users.length === 0) return found;
  const heldBy = (await listenerUids(port)).filter((uid) => !users.includes(uid));
  return heldBy.length > 0 ? { ok: false, heldBy } : found;
}

/** What a user reads of a port another user's process holds. */
export function portHeldMessage(port: number, heldBy: readonly number[]): string {
  return (
    ` Port ${port} is held by another user's process (uid ${heldBy.join(', ')}), not this instance's: ` +
    `something else bound it before the app did, and its answers do not count. Deploy again for another port; ` +
    `on a data plane without slirp4netns and socat apps share the host's network (the start log says so).`
  );
}

/**
 * The mistake a health check that ran out of time points at: from the last probe of the instance, and
 * the ports its network namespace listened on (null when it has none of its own: the host's loopback
 * is every process's, so it tells nothing).
 */
function describeMiss(last: Probe | null, port: number, path: string, listening: number[] | null): string {
  const nothingOnPort =
    (listening !== null && !listening.includes(port)) || (last !== null && !last.ok && 'refused' in last);
  if (nothingOnPort) {
    const opened = (listening ?? []).filter((p) => p !== port);
    return (
      ` Nothing was listening on port ${port}: the app must listen on the port in its PORT variable ` +
      `(${port} for this instance), on all addresses (its HOST variable)` +
      (opened.length > 0 ? `; it listens on ${opened.join(', ')} instead.` : '.')
    );
  }
  if (last === null || last.ok) return '';
  if ('heldBy' in last) return portHeldMessage(port, last.heldBy);
  if ('status' in last) return ` It answered ${last.status} on ${path}: the health path must answer 2xx.`;
  return ` It accepted connections on port ${port} but did not answer ${path} within ${PROBE_TIMEOUT_MS / 1000} s.`;
}

/** An instance as the health check sees it. */
interface CheckedInstance {
  id: string;
  port: number | null;
  process: RunningProcess | null;
}

/** The error of a health check whose time ran out with `late` still not answering 2xx. */
export async function healthCheckMissed(
  late: CheckedInstance[],
  context: {
    path: string;
    timeoutMs: number;
    /** Seconds since the wait began. */
    elapsed: number;
    /** What each instance's group had used when the wait began. */
    usageAtStart: ReadonlyMap<CheckedInstance, Usage | null>;
    lastProbe: ReadonlyMap<CheckedInstance, Probe>;
    /** The forwards to its database and the API: their ports are not the app's. */
    forwards: readonly { port: number }[];
  },
): Promise<HealthCheckError> {
  const { path, timeoutMs, elapsed, usageAtStart, lastProbe, forwards } = context;
  const instance = late[0]!;
  // Short of CPU is said when any instance that missed the deadline was.
  const starvedEach = await Promise.all(
    late.map(async (i) => cpuStarvation(usageAtStart.get(i), (await i.process?.usage()) ?? null, elapsed)),
  );
  const starvedAt = starvedEach.findIndex((why) => why !== null);
  const starved =
    starvedAt < 0
      ? null
      : late.length > 1
        ? `Instance ${late[starvedAt]!.id}: ${starvedEach[starvedAt]}`
        : starvedEach[0];
  const miss = describeMiss(
    lastProbe.get(instance) ?? null,
    instance.port!,
    path,
    // The forwards to its database and the API listen there too: not the app's.
    ((await instance.process?.listeningPorts()) ?? null)?.filter((p) => !forwards.some((f) => f.port === p)) ?? null,
  );
  const which =
    late.length > 1
      ? ` on ${late.length} of its instances (${late.map((i) => i.id).join(', ')}).` +
        (miss ? ` Instance ${instance.id}:${miss}` : '')
      : ` (instance ${instance.id}).${miss}`;
  return new HealthCheckError(
    `The app did not answer 2xx on ${path} within ${Math.round(timeoutMs / 1000)} s` +
      which +
      (starved ? ` ${starved}` : ''),
  );
}
