/**
 * The app router's table (src/dataplane/app-router.ts): the instances a slug is routed to, what is in
 * flight to each of them, and the drain that waits for an instance taken out of the table to go idle
 * before its caller stops it.
 */
import type { ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';

/** An app process listening on 127.0.0.1:port. */
export interface AppTarget {
  instanceId: string;
  port: number;
  /** The revision the instance runs, for the series per revision (src/dataplane/traffic-series.ts). */
  revisionId?: string;
}

/** The instance each response of the built-in edge was sent to, for its record (src/dataplane/app-router.ts). */
export const servedBy = new WeakMap<ServerResponse, AppTarget>();

/** One target with what is in flight to it: the drain waits for both sets to empty. */
export interface Backend {
  readonly target: AppTarget;
  readonly url: string;
  readonly responses: Set<ServerResponse>;
  /** Upgraded (WebSocket) connections; they can live for hours, so drains wait for them only up to the timeout. */
  readonly sockets: Set<Duplex>;
  readonly idleWaiters: (() => void)[];
}

export interface Route {
  backends: Backend[];
  next: number;
  /** No backend because the deployment is paused (`resource_spec.min_scale: 0`), not because none started yet. */
  scaledToZero?: boolean;
}

/** How a route is set (both edges): the drain's time, why it may have no target, and what follows the switch. */
export interface SetTargetsOptions {
  drainTimeoutMs?: number;
  /**
   * True when the targets are empty because the deployment is paused (`resource_spec.min_scale: 0`): the
   * edge answers 503 saying so instead of "no running instance yet". Any later setTargets without it clears it.
   */
  scaledToZero?: boolean;
  /**
   * Called once the route has changed, before the drain of the targets it took out: what the caller
   * does when the new targets serve and the old ones have stopped getting requests.
   */
  onSwitched?: () => void;
}

/** What an edge says (after "Deployment <slug> ") when a route has no target: both edges use these words. */
export const NO_INSTANCE_YET = 'has no running instance yet; retry shortly';
/** Without parentheses or commas: HAProxy's configuration carries it inside str(). */
export const SCALED_TO_ZERO = 'is scaled to zero: resource_spec.min_scale is 0; set it to 1 or more to serve it';

export function newBackend(target: AppTarget): Backend {
  return {
    target: { ...target },
    url: `http://127.0.0.1:${target.port}`,
    responses: new Set(),
    sockets: new Set(),
    idleWaiters: [],
  };
}

export function targetKey(target: AppTarget): string {
  return `${target.instanceId}@${target.port}`;
}

/** Round-robin over the route, skipping targets that already refused this request. */
export function pick(route: Route, refused: ReadonlySet<Backend>): Backend | null {
  const count = route.backends.length;
  for (let i = 0; i < count; i++) {
    const index = (route.next + i) % count;
    const backend = route.backends[index]!;
    if (refused.has(backend)) continue;
    route.next = (index + 1) % count;
    return backend;
  }
  return null;
}

function isIdle(backend: Backend): boolean {
  return backend.responses.size === 0 && backend.sockets.size === 0;
}

/** Wakes the drains waiting for the backend once nothing is in flight to it any more. */
export function settle(backend: Backend): void {
  if (isIdle(backend)) for (const wake of backend.idleWaiters.splice(0)) wake();
}

export function whenIdle(backend: Backend): Promise<void> {
  return isIdle(backend) ? Promise.resolve() : new Promise((resolve) => backend.idleWaiters.push(resolve));
}

/**
 * Resolves when the backends are idle or the time is up; a busy one at the end is logged, not failed.
 * `live` is every backend routed to or still draining: each leaves it once idle.
 */
export async function drain(
  logger: Logger,
  live: Set<Backend>,
  slug: string,
  draining: Backend[],
  timeoutMs: number,
): Promise<void> {
  const busy = draining.filter((b) => !isIdle(b));
  const forget = () => {
    for (const b of draining) if (isIdle(b)) live.delete(b);
  };
  if (busy.length === 0) return forget();
  let timer: NodeJS.Timeout | undefined;
  const expired = await Promise.race([
    Promise.all(busy.map(whenIdle)).then(() => false),
    new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(true), timeoutMs))),
  ]);
  clearTimeout(timer);
  if (expired) {
    const left = busy.filter((b) => !isIdle(b));
    logger.warn(
      {
        slug,
        instances: left.map((b) => ({
          instanceId: b.target.instanceId,
          requests: b.responses.size,
          websockets: b.sockets.size,
        })),
        drainTimeoutMs: timeoutMs,
      },
      'app instances still busy when the drain time ran out',
    );
    // Once their last connection ends nothing refers to them; until then close() may still cut them.
    for (const b of left) void whenIdle(b).then(() => live.delete(b));
  }
  forget();
}

/**
 * A traffic split at a route (docs/app-urls.md, "Traffic split"): `weight` percent of its clients go to
 * `targets`, the instances of `revisionId`; the rest to the route's own targets, of `baseRevisionId`.
 */
export interface RouteSplit {
  baseRevisionId: string;
  revisionId: string;
  targets: AppTarget[];
  weight: number;
}

/** The cookie both edges set on a split route's first answer, naming the revision that served it. */
export const SPLIT_COOKIE = 'slipway_split';
/** The header a client may send to be kept on one revision: the same value, the same revision. */
export const STICKY_HEADER = 'x-slipway-sticky';

/** The key of a split's second route in an edge's table: never a host label (those have no `/`). */
export function splitRouteKey(label: string): string {
  return `${label}/split`;
}

/** The Set-Cookie the built-in edge adds to a response of a split route (src/dataplane/app-proxy.ts). */
export const splitCookieOf = new WeakMap<ServerResponse, string>();
