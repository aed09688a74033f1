/**
 * How the app edge's routing table changes: the switch-and-drain that gives an app new instances, a
 * traffic split or no route, without losing a request. The table (which backend of HAProxy's pool each app
 * has, which server slot each instance holds) is src/dataplane/edge-haproxy-table.ts, the runtime API
 * commands each step runs src/dataplane/edge-haproxy-servers.ts. HAProxy's process (started, supervised,
 * restarted) is src/dataplane/edge-haproxy.ts; the switch only talks to it through its runtime API
 * (`EdgeRuntime`).
 *
 * A switch (`setTargets`) loses no request: new instances are added as servers first (already
 * health-checked by the caller), then the replaced ones are set to `drain` (no new request goes to
 * them, the ones in flight finish); the promise resolves once HAProxy counts no session on them (or the
 * drain time ran out), and only then are they put in maintenance and deleted, so the caller stops an
 * instance only when nothing is in flight to it.
 *
 * Apps get a backend each from a pool declared in the configuration (backends cannot be added at run
 * time); a host name leads to its backend through a map changed at run time. A table that outgrows the
 * pool asks for a restart of HAProxy with a bigger one.
 */
import { splitRouteKey, type AppTarget, type SetTargetsOptions } from './app-backends.ts';
import type { AppRoutes } from './app-edge.ts';
import { slotName, type EdgeRoute, type EdgeServer } from './edge-haproxy-config.ts';
import { addServer, backendCounts, drainAndFree, freeServers, markPaused, pointHost } from './edge-haproxy-servers.ts';
import { zeroCounts, type RawCounts } from './edge-haproxy-stats.ts';
import {
  appBackends,
  declaredRoutes,
  emptyTable,
  freeBackend,
  isSplitKey,
  pausedSlugs,
  SLOTS,
  splitLines,
  type EdgeSwitchOptions,
  type EdgeSwitchState,
} from './edge-haproxy-table.ts';

export interface EdgeSwitch extends AppRoutes {
  /** Backends declared in the configuration. */
  readonly poolSize: number;
  /** The table as the configuration declares it, with each route's instances (the request log's index). */
  routes(): (EdgeRoute & { targets: AppTarget[] })[];
  /** Slugs whose deployment is paused (min_scale 0). */
  pausedSlugs(): string[];
  /** Each routed app's backend, by slug (a split's second route not included). */
  backends(): Map<string, string>;
  /** The split map's lines: host and split value. */
  splitLines(): string[];
  /** Each backend's counts as HAProxy has them now (`show stat` of the backends). */
  backendCounts(): Promise<Map<string, RawCounts>>;
}

/** The table's change for a new set of targets; the drain that follows is outside the queue. */
async function changeRoute(
  s: EdgeSwitchState,
  slug: string,
  wanted: AppTarget[],
  paused: boolean,
): Promise<{ backend: string; removed: string[]; left: boolean }> {
  const { runtime, table, accounts } = s;
  let route = table.routes.get(slug);
  if (route === undefined) {
    let backend = freeBackend(table);
    if (backend === null) {
      // Backends cannot be added at run time: a bigger pool needs a new HAProxy.
      table.poolSize *= 2;
      backend = freeBackend(table)!;
      const servers = new Map(wanted.slice(0, SLOTS).map((t, k) => [t.port, { name: slotName(k), port: t.port }]));
      table.slotsInUse.set(backend, new Set([...servers.values()].map((server) => server.name)));
      table.routes.set(slug, { backend, targets: wanted.slice(0, SLOTS), servers, paused });
      await runtime.restart(`more apps than the pool of ${table.poolSize / 2} backends`);
      return { backend, removed: [] as string[], left: false };
    }
    route = { backend, targets: [], servers: new Map() };
  }
  const keep = new Set(wanted.map((t) => t.port));
  const replaced = wanted.length > 0 && route.servers.size > 0 && ![...route.servers.keys()].some((p) => keep.has(p));
  const next = replaced ? freeBackend(table) : null;
  if (next !== null) {
    // New instances replace all the old ones (a new revision): they go into a backend of their own, and
    // one change of the map sends the host there. Every request from then on, whichever HAProxy thread
    // takes it, goes to the new instances; those already sent to the old ones finish there. (Servers
    // of one backend changed in place pass through a moment where both serve, and a client could be
    // sent back to an old instance after a new one answered it.)
    const servers = new Map<number, EdgeServer>();
    try {
      for (const target of wanted) servers.set(target.port, await addServer(s, next, target));
    } catch (error) {
      await freeServers(
        s,
        next,
        [...servers.values()].map((server) => server.name),
      );
      throw error;
    }
    accounts.moved(slug, next, (await backendCounts(s)).get(next) ?? zeroCounts());
    table.draining.add(route.backend);
    table.routes.set(slug, { backend: next, targets: wanted, servers });
    await pointHost(s, slug, next, false);
    await markPaused(s, slug, route.paused === true, false);
    for (const server of route.servers.values())
      await runtime.cli(`set server ${route.backend}/${server.name} state drain`);
    await runtime.writeFiles();
    return { backend: route.backend, removed: [...route.servers.values()].map((server) => server.name), left: true };
  }
  const servers = new Map([...route.servers].filter(([port]) => keep.has(port)));
  for (const target of wanted)
    if (!servers.has(target.port)) servers.set(target.port, await addServer(s, route.backend, target));
  const gone = [...route.servers].filter(([port]) => !keep.has(port)).map(([, server]) => server.name);
  // Drained: no new request goes there, the ones in flight finish.
  for (const server of gone) await runtime.cli(`set server ${route.backend}/${server} state drain`);
  const isNew = !table.routes.has(slug);
  if (isNew) {
    // The backend may have served a removed app: this one is counted from what it has now.
    const base = (await backendCounts(s)).get(route.backend) ?? zeroCounts();
    accounts.open(slug, route.backend, base);
  }
  table.routes.set(slug, { backend: route.backend, targets: wanted, servers, paused });
  if (isNew || isSplitKey(slug)) await pointHost(s, slug, route.backend, isNew);
  await markPaused(s, slug, route.paused === true, paused);
  // Kept current for a restart of HAProxy, which reads them.
  await runtime.writeFiles();
  return { backend: route.backend, removed: gone, left: false };
}

/** Routes the key to its targets: the change in the queue, then the drain of what it took out. */
async function setRoute(
  s: EdgeSwitchState,
  slug: string,
  targets: AppTarget[],
  opts: SetTargetsOptions | undefined,
): Promise<void> {
  const invalid = targets.find((t) => !Number.isInteger(t.port) || t.port < 1 || t.port > 65535);
  if (invalid !== undefined)
    throw new Error(`app target ${invalid.instanceId} has no valid port (${invalid.port}); the route is unchanged`);
  const wanted = [...new Map(targets.map((t) => [t.port, { ...t }])).values()];
  const paused = wanted.length === 0 && opts?.scaledToZero === true;
  const { backend, removed, left } = await s.runtime.enqueue(() => changeRoute(s, slug, wanted, paused));
  opts?.onSwitched?.();
  const drainTimeoutMs = opts?.drainTimeoutMs ?? s.drainTimeoutMs;
  if (!left) {
    await drainAndFree(s, slug, backend, removed, drainTimeoutMs);
    return;
  }
  try {
    await drainAndFree(s, slug, backend, removed, drainTimeoutMs);
    // What it counted to the end (its requests in flight included) stays the app's.
    const counts = await s.runtime.enqueue(() => backendCounts(s)).catch(() => null);
    s.accounts.retired(slug, backend, counts?.get(backend) ?? null);
  } finally {
    // The backend goes back to the pool only now, empty.
    s.table.draining.delete(backend);
  }
}

/** Takes the key's route out: its host first, then its servers drained and its backend back to the pool. */
async function removeRoute(
  s: EdgeSwitchState,
  slug: string,
  opts: { drainTimeoutMs?: number } | undefined,
): Promise<void> {
  const { runtime, table, appsDomain } = s;
  const route = await runtime.enqueue(async () => {
    const found = table.routes.get(slug);
    if (found === undefined) return null;
    table.routes.delete(slug);
    table.draining.add(found.backend);
    if (!isSplitKey(slug)) await runtime.cli(`del map ${s.mapFile} ${slug}.${appsDomain}`);
    await markPaused(s, slug, found.paused === true, false);
    for (const server of found.servers.values())
      await runtime.cli(`set server ${found.backend}/${server.name} state drain`);
    await runtime.writeFiles();
    return found;
  });
  if (route === null) return;
  try {
    await drainAndFree(
      s,
      slug,
      route.backend,
      [...route.servers.values()].map((server) => server.name),
      opts?.drainTimeoutMs ?? s.drainTimeoutMs,
    );
  } finally {
    // The backend goes back to the pool only now, empty.
    table.draining.delete(route.backend);
  }
}

export function createEdgeSwitch(options: EdgeSwitchOptions): EdgeSwitch {
  const s: EdgeSwitchState = { ...options, table: emptyTable() };
  const { runtime, table, appsDomain } = s;
  return {
    get poolSize() {
      return table.poolSize;
    },

    routes: () => declaredRoutes(table),
    pausedSlugs: () => pausedSlugs(table),
    backends: () => appBackends(table),
    splitLines: () => splitLines(table, appsDomain),
    backendCounts: () => backendCounts(s),

    setTargets(slug, targets, opts) {
      if (!/^[a-z0-9-]{1,63}$/.test(slug)) return Promise.reject(new Error(`not an app slug: ${slug}`));
      return setRoute(s, slug, targets, opts);
    },

    async setSplit(label, split, opts) {
      if (!/^[a-z0-9-]{1,63}$/.test(label)) throw new Error(`not an app slug: ${label}`);
      const key = splitRouteKey(label);
      if (split === null) {
        await runtime.enqueue(async () => {
          table.splits.delete(label);
          if (table.splitMapped.delete(label)) await runtime.cli(`del map ${s.splitMapFile} ${label}.${appsDomain}`);
          await runtime.writeFiles();
        });
        return removeRoute(s, key, opts);
      }
      table.splits.set(label, { ...split, targets: split.targets.map((t) => ({ ...t })) });
      // The second revision's servers first, then its split map entry (pointHost): no request is sent there before.
      await setRoute(s, key, split.targets, opts);
    },

    remove: (slug, opts) => removeRoute(s, slug, opts),

    targets(slug) {
      return (table.routes.get(slug)?.targets ?? []).map((t) => ({ ...t }));
    },
  };
}
