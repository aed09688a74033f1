/**
 * The heartbeat: tells the service the agent is alive, which namespaces it actually watches, and what
 * is wrong if anything: first of all the namespaces it does not watch, and why; then the desired
 * state's last read, the list-watch's and the controller's problems, and the conditions of the
 * deployments whose serving revision is not healthy. The first heartbeat waits for every namespace's
 * first answer (or one heartbeat period), so that a namespace about to be listed is not reported
 * missing; after that, a namespace that comes or goes is reported at once.
 */
import type { Logger } from 'pino';
import type { ClusterCache, NamespaceWatch } from './cluster-cache.ts';
import type { ListenerConfig } from './config.ts';
import type { Controller } from './listener-controller.ts';
import type { Heartbeat, ProtocolClient } from './protocol-client.ts';

/** The least time between two heartbeats, when a namespace's state changes sooner than the period. */
const MIN_HEARTBEAT_GAP_MS = 1_000;

/** The time the heartbeat keeps (a fake one in tests, which count heartbeats over a period). */
export interface ListenerClock {
  now(): number;
  setTimeout(fire: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

export const SYSTEM_CLOCK: ListenerClock = {
  now: () => Date.now(),
  setTimeout: (fire, ms) => setTimeout(fire, ms),
  clearTimeout: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};

export interface HeartbeatDeps {
  readonly config: Pick<ListenerConfig, 'namespaces' | 'heartbeatSeconds'>;
  readonly protocol: Pick<ProtocolClient, 'heartbeat'>;
  readonly controller: Pick<Controller, 'problem' | 'conditions' | 'summary'>;
  readonly logger: Logger;
  readonly clock: ListenerClock;
  /** Ends the loop, its wait and its request. */
  readonly signal: AbortSignal;
  /** The agent's version, told in every heartbeat. */
  readonly version: string;
  /** The list-watch, once started. */
  cache(): ClusterCache | null;
  /** Why the desired state could not be read last time; null when it was. */
  pollProblem(): string | null;
}

export interface Heartbeats {
  /** Settles when the loop has ended (after `signal` aborts). */
  readonly done: Promise<void>;
  /** A namespace's state changed: the heartbeat says so now rather than at the end of its period. */
  namespacesChanged(): void;
}

/** The loop's own state: what ends its wait, and the namespaces last logged as not watched. */
interface HeartbeatState {
  /** Ends the wait: what the heartbeat says changed (a namespace is watched now, or no longer). */
  beatNow: (() => void) | null;
  lastNotWatched: string;
}

export function startHeartbeats(deps: HeartbeatDeps): Heartbeats {
  const state: HeartbeatState = { beatNow: null, lastNotWatched: '' };
  return { done: heartbeatLoop(deps, state), namespacesChanged: () => state.beatNow?.() };
}

async function heartbeatLoop(deps: HeartbeatDeps, state: HeartbeatState): Promise<void> {
  const { clock, signal } = deps;
  const period = deps.config.heartbeatSeconds * 1000;
  const settled = () => {
    const cache = deps.cache();
    return cache !== null && [...cache.namespaces().values()].every((watch) => watch.state !== 'starting');
  };
  if (!settled()) await pause(deps, state, period, settled);
  while (!signal.aborted) {
    const heartbeat = heartbeatOf(deps, state);
    try {
      await deps.protocol.heartbeat(heartbeat, signal);
    } catch (error) {
      if (signal.aborted) break;
      deps.logger.warn({ err: error instanceof Error ? error.message : String(error) }, 'heartbeat failed');
    }
    const sent = clock.now();
    await pause(deps, state, period, () => true);
    // A namespace that flaps between states must not turn the heartbeat into a flood.
    const early = MIN_HEARTBEAT_GAP_MS - (clock.now() - sent);
    if (early > 0) await pause(deps, state, early);
  }
}

/** What the heartbeat says now; the namespaces not watched are logged when they change. */
function heartbeatOf(deps: HeartbeatDeps, state: HeartbeatState): Heartbeat {
  const { config, controller } = deps;
  const watches = deps.cache()?.namespaces() ?? new Map<string, NamespaceWatch>();
  const watched = config.namespaces.filter((ns) => watches.get(ns)?.state === 'watched');
  const notWatched = config.namespaces
    .filter((ns) => !watched.includes(ns))
    .map((ns) => `namespace ${ns} is not watched: ${describeWatch(watches.get(ns))}`);
  if (notWatched.join() !== state.lastNotWatched) {
    state.lastNotWatched = notWatched.join();
    if (notWatched.length > 0)
      deps.logger.error({ namespaces_not_watched: notWatched }, 'some namespaces are not watched');
  }
  const problems = [...notWatched, deps.pollProblem(), deps.cache()?.problem() ?? null, controller.problem()].filter(
    (p): p is string => p !== null,
  );
  const conditions = controller.conditions();
  return {
    version: deps.version,
    namespaces: watched,
    message: (problems.length > 0 ? problems.join('; ') : controller.summary()).slice(0, 1000),
    ...(conditions === null
      ? {}
      : { deployments: [...conditions.deployments], observed_at: conditions.observedAt.toISOString() }),
  };
}

function describeWatch(watch: NamespaceWatch | undefined): string {
  switch (watch?.state) {
    case 'refused':
      return `the Kubernetes API server forbids it, deployments there fail (${watch.reason})`;
    case 'failing':
      return `it cannot be listed yet, deployments there wait (${watch.reason})`;
    default:
      return 'not listed yet';
  }
}

/**
 * Waits `ms` on the clock, or until the cache says a namespace changed and `until()` then holds.
 * Only a change ends it early: a pause called while `until()` already holds still waits (with
 * `() => true` it returned at once, and the loop heartbeated every MIN_HEARTBEAT_GAP_MS).
 */
function pause(
  { clock, signal }: HeartbeatDeps,
  state: HeartbeatState,
  ms: number,
  until: () => boolean = () => false,
): Promise<void> {
  return new Promise<void>((resolve) => {
    const done = () => {
      clock.clearTimeout(timer);
      signal.removeEventListener('abort', done);
      state.beatNow = null;
      resolve();
    };
    const timer = clock.setTimeout(done, ms);
    state.beatNow = () => {
      if (until()) done();
    };
    signal.addEventListener('abort', done, { once: true });
    if (signal.aborted) done();
  });
}
