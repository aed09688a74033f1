/**
 * The app edge's routing table as the switch keeps it (src/dataplane/edge-haproxy-switch.ts): which
 * backend of HAProxy's pool each route has, which server slot each instance holds, the traffic splits,
 * and what the switch's steps share to change it (`EdgeSwitchState`). The views of it here are what
 * HAProxy's files and the request log are written from; the commands that change HAProxy to match it are
 * src/dataplane/edge-haproxy-servers.ts.
 */
import type { Logger } from 'pino';
import { splitRouteKey, type AppTarget, type RouteSplit } from './app-backends.ts';
import { poolBackend, type EdgeRoute, type EdgeServer } from './edge-haproxy-config.ts';
import type { EdgeAccounts } from './edge-haproxy-stats.ts';

/** Backends declared at first; the pool doubles when apps outgrow it. */
export const INITIAL_POOL = 128;
/**
 * Server slots per backend: room for an app's instances and, during a switch, the ones replacing them.
 * More instances than that still work, as servers added at run time (without connection reuse).
 */
export const SLOTS = 16;

/** What the switch needs of the running HAProxy (edge-haproxy.ts provides it). */
export interface EdgeRuntime {
  /** A command on HAProxy's runtime API; throws when HAProxy answers that it did nothing. */
  cli: (command: string) => Promise<string>;
  /** Runs a runtime change after the ones before it, one at a time. */
  enqueue: <T>(step: () => Promise<T>) => Promise<T>;
  /** Writes the configuration and maps from the table, for the next start of HAProxy to read. */
  writeFiles: () => Promise<void>;
  /** Starts HAProxy again from the files (a bigger pool). */
  restart: (reason: string) => Promise<void>;
  /** Whether HAProxy runs and the edge is not closing. */
  running: () => boolean;
}

export interface EdgeSwitchOptions {
  runtime: EdgeRuntime;
  /** HAProxy's map of host to backend, and of paused hosts (their backend's 503 says why). */
  mapFile: string;
  pausedMapFile: string;
  /** HAProxy's map of host to its traffic split (src/dataplane/edge-haproxy-config.ts, splitRules). */
  splitMapFile: string;
  appsDomain: string;
  drainTimeoutMs: number;
  /** Per app: the counts of its backend when it got it, and what earlier HAProxy processes counted. */
  accounts: EdgeAccounts;
  logger: Logger;
}

export interface Route {
  backend: string;
  targets: AppTarget[];
  /** The server of each target, by port. */
  servers: Map<number, EdgeServer>;
  /** No target because the deployment is paused (min_scale 0): its host is in the paused map. */
  paused?: boolean;
}

export interface EdgeTable {
  /** Routes by key: an app's slug, or splitRouteKey(label) for a split's second revision. */
  readonly routes: Map<string, Route>;
  /** Traffic splits by label; their second revision's route is in `routes` at splitRouteKey(label). */
  readonly splits: Map<string, RouteSplit>;
  /** Labels whose split is in HAProxy's split map now. */
  readonly splitMapped: Set<string>;
  /** Backends of removed apps whose servers are still draining: not given to another app yet. */
  readonly draining: Set<string>;
  /** Slots of each backend that hold an instance, serving or draining. */
  readonly slotsInUse: Map<string, Set<string>>;
  /** Backends declared in the configuration. */
  poolSize: number;
}

/** What the switch's steps share: its options and the table they change. */
export interface EdgeSwitchState extends EdgeSwitchOptions {
  readonly table: EdgeTable;
}

export function emptyTable(): EdgeTable {
  return {
    routes: new Map(),
    splits: new Map(),
    splitMapped: new Set(),
    draining: new Set(),
    slotsInUse: new Map(),
    poolSize: INITIAL_POOL,
  };
}

/** A split's entry in the split map: its backend, weight and both revisions, `:`-separated. */
export function splitValue(backend: string, split: RouteSplit): string {
  return `${backend}:${split.weight}:${split.baseRevisionId}:${split.revisionId}`;
}

const SPLIT_SUFFIX = '/split';
export const isSplitKey = (key: string) => key.endsWith(SPLIT_SUFFIX);
export const labelOfKey = (key: string) => (isSplitKey(key) ? key.slice(0, -SPLIT_SUFFIX.length) : key);

/** A backend of the pool that no route has and none drains, or null when the pool is used up. */
export function freeBackend(table: EdgeTable): string | null {
  const used = new Set([...[...table.routes.values()].map((r) => r.backend), ...table.draining]);
  for (let i = 0; i < table.poolSize; i++) if (!used.has(poolBackend(i))) return poolBackend(i);
  return null;
}

/** The table as the configuration declares it, with each route's instances (the request log's index). */
export function declaredRoutes(table: EdgeTable): (EdgeRoute & { targets: AppTarget[] })[] {
  return [...table.routes].map(([slug, r]) => ({
    // A split's second route is counted as its label's (the revision tells them apart).
    slug: labelOfKey(slug),
    backend: r.backend,
    servers: [...r.servers.values()],
    targets: r.targets,
  }));
}

/** Slugs whose deployment is paused (min_scale 0). */
export function pausedSlugs(table: EdgeTable): string[] {
  return [...table.routes].filter(([, r]) => r.paused).map(([slug]) => slug);
}

/** Each routed app's backend, by slug (a split's second route not included). */
export function appBackends(table: EdgeTable): Map<string, string> {
  return new Map([...table.routes].filter(([slug]) => !isSplitKey(slug)).map(([slug, route]) => [slug, route.backend]));
}

/** The split map's lines: host and split value. */
export function splitLines(table: EdgeTable, appsDomain: string): string[] {
  return [...table.splits].flatMap(([label, split]) => {
    const route = table.routes.get(splitRouteKey(label));
    return route === undefined ? [] : [`${label}.${appsDomain} ${splitValue(route.backend, split)}`];
  });
}
