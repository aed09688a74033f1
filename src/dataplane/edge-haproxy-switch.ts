/**
 * The app edge's routing table and how it changes: which backend of HAProxy's pool each app has, which
 * server slot each instance holds, and the switch-and-drain that changes them without losing a request.
 * HAProxy's process (started, supervised, restarted) is src/dataplane/edge-haproxy.ts; this module only
 * talks to it through its runtime API (`EdgeRuntime`).
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
import type { Logger } from 'pino';
import { splitRouteKey, type AppTarget, type RouteSplit, type SetTargetsOptions } from './app-backends.ts';
import type { AppRoutes } from './app-edge.ts';
import {
  extraServerName,
  mapLine,
  poolBackend,
  slotName,
  type EdgeRoute,
  type EdgeServer,
} from './edge-haproxy-config.ts';
import { parseBackendCounts, zeroCounts, type EdgeAccounts, type RawCounts } from './edge-haproxy-stats.ts';

/** Backends declared at first; the pool doubles when apps outgrow it. */
const INITIAL_POOL = 128;
/**
 * Server slots per backend: room for an app's instances and, during a switch, the ones replacing them.
 * More instances than that still work, as servers added at run time (without connection reuse).
 */
export const SLOTS = 16;

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

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

interface Route {
  backend: string;
  targets: AppTarget[];
  /** The server of each target, by port. */
  servers: Map<number, EdgeServer>;
  /** No target because the deployment is paused (min_scale 0): its host is in the paused map. */
  paused?: boolean;
}

/** A split's entry in the split map: its backend, weight and both revisions, `:`-separated. */
export function splitValue(backend: string, split: RouteSplit): string {
  return `${backend}:${split.weight}:${split.baseRevisionId}:${split.revisionId}`;
}

const SPLIT_SUFFIX = '/split';
const isSplitKey = (key: string) => key.endsWith(SPLIT_SUFFIX);
const labelOfKey = (key: string) => (isSplitKey(key) ? key.slice(0, -SPLIT_SUFFIX.length) : key);

export function createEdgeSwitch(options: EdgeSwitchOptions): EdgeSwitch {
  const { runtime, mapFile, pausedMapFile, splitMapFile, appsDomain, accounts, logger } = options;
  const { cli, enqueue } = runtime;
  const table = new Map<string, Route>();
  /** Traffic splits by label; their second revision's route is in the table at splitRouteKey(label). */
  const splits = new Map<string, RouteSplit>();
  /** Labels whose split is in HAProxy's split map now. */
  const splitMapped = new Set<string>();

  /** Points the host at its backend: the routes map for a route, the split map for a split's second route. */
  async function pointHost(key: string, backend: string, isNew: boolean): Promise<void> {
    if (!isSplitKey(key)) {
      await cli(`${isNew ? 'add' : 'set'} map ${mapFile} ${mapLine(key, appsDomain, backend)}`);
      return;
    }
    const label = labelOfKey(key);
    const split = splits.get(label);
    if (split === undefined) return;
    await cli(
      `${splitMapped.has(label) ? 'set' : 'add'} map ${splitMapFile} ${label}.${appsDomain} ${splitValue(backend, split)}`,
    );
    splitMapped.add(label);
  }
  /** Backends of removed apps whose servers are still draining: not given to another app yet. */
  const draining = new Set<string>();
  /** Slots of each backend that hold an instance, serving or draining. */
  const slotsInUse = new Map<string, Set<string>>();
  let poolSize = INITIAL_POOL;

  async function backendCounts(): Promise<Map<string, RawCounts>> {
    return parseBackendCounts(await cli('show stat -1 2 -1'));
  }

  /** Puts the host in the paused map, or takes it out, when that changes (the backend's 503 says why). */
  async function markPaused(slug: string, was: boolean, now: boolean): Promise<void> {
    if (was === now) return;
    await cli(`${now ? 'add' : 'del'} map ${pausedMapFile} ${slug}.${appsDomain}${now ? ' 1' : ''}`);
  }

  /** Sessions (requests in flight, tunnels) each server of the backend has now. */
  async function sessions(backend: string): Promise<Map<string, number>> {
    const csv = await cli('show stat');
    const counts = new Map<string, number>();
    const header = csv.split('\n')[0]!.replace(/^# /, '').split(',');
    const [px, sv, scur] = ['pxname', 'svname', 'scur'].map((name) => header.indexOf(name));
    for (const row of csv.split('\n').slice(1)) {
      const fields = row.split(',');
      if (fields[px!] === backend) counts.set(fields[sv!]!, Number(fields[scur!]));
    }
    return counts;
  }

  /** Waits until no session is on the servers (or the time is up), then takes them out for good. */
  async function drainAndFree(slug: string, backend: string, servers: string[], timeoutMs: number): Promise<void> {
    if (servers.length === 0) return;
    const deadline = Date.now() + timeoutMs;
    let busy: string[];
    for (;;) {
      const counts = await sessions(backend).catch(() => new Map<string, number>());
      busy = servers.filter((s) => (counts.get(s) ?? 0) > 0);
      if (busy.length === 0 || Date.now() >= deadline) break;
      await sleep(25);
    }
    if (busy.length > 0)
      logger.warn(
        { slug, servers: busy, drainTimeoutMs: timeoutMs },
        'app instances still busy when the drain time ran out',
      );
    await enqueue(() => freeServers(backend, servers));
  }

  /** Takes servers out for good: their slots free for the next instances, servers added at run time deleted. */
  async function freeServers(backend: string, servers: readonly string[]): Promise<void> {
    for (const server of servers) {
      // In maintenance HAProxy closes the slot's idle connections, so the next instance put in it gets
      // none of the old one's. Whatever is left (a WebSocket) ends with the instance, which the caller
      // stops now.
      await cli(`set server ${backend}/${server} state maint`).catch(() => undefined);
      if (server.startsWith('slot')) slotsInUse.get(backend)?.delete(server);
      else await deleteServer(backend, server);
    }
  }

  /** Deletes a server added at run time; one that still has connections is deleted once they are gone. */
  async function deleteServer(backend: string, server: string, attempt = 0): Promise<void> {
    try {
      await cli(`del server ${backend}/${server}`);
    } catch (error) {
      if (!runtime.running()) return;
      if (attempt >= 20) {
        logger.warn({ err: error, backend, server }, 'app edge: a drained server could not be deleted');
        return;
      }
      setTimeout(() => {
        void enqueue(() => deleteServer(backend, server, attempt + 1)).catch(() => undefined);
      }, 1_000).unref();
    }
  }

  function freeBackend(): string | null {
    const used = new Set([...[...table.values()].map((r) => r.backend), ...draining]);
    for (let i = 0; i < poolSize; i++) if (!used.has(poolBackend(i))) return poolBackend(i);
    return null;
  }

  /** Puts an instance into a free slot of the backend (or, with none left, a server added at run time). */
  async function addServer(backend: string, target: AppTarget): Promise<EdgeServer> {
    const used = slotsInUse.get(backend) ?? new Set<string>();
    slotsInUse.set(backend, used);
    const free = Array.from({ length: SLOTS }, (_, k) => slotName(k)).find((name) => !used.has(name));
    if (free !== undefined) {
      used.add(free);
      try {
        await cli(`set server ${backend}/${free} addr 127.0.0.1 port ${target.port}`);
        await cli(`set server ${backend}/${free} state ready`);
      } catch (error) {
        used.delete(free);
        throw error;
      }
      return { name: free, port: target.port };
    }
    const name = extraServerName(target);
    await cli(`add server ${backend}/${name} 127.0.0.1:${target.port}`);
    await cli(`enable server ${backend}/${name}`);
    return { name, port: target.port };
  }

  /** The table's change for a new set of targets; the drain that follows is outside the queue. */
  async function changeRoute(
    slug: string,
    wanted: AppTarget[],
    paused: boolean,
  ): Promise<{ backend: string; removed: string[]; left: boolean }> {
    let route = table.get(slug);
    if (route === undefined) {
      let backend = freeBackend();
      if (backend === null) {
        // Backends cannot be added at run time: a bigger pool needs a new HAProxy.
        poolSize *= 2;
        backend = freeBackend()!;
        const servers = new Map(wanted.slice(0, SLOTS).map((t, k) => [t.port, { name: slotName(k), port: t.port }]));
        slotsInUse.set(backend, new Set([...servers.values()].map((server) => server.name)));
        table.set(slug, { backend, targets: wanted.slice(0, SLOTS), servers, paused });
        await runtime.restart(`more apps than the pool of ${poolSize / 2} backends`);
        return { backend, removed: [] as string[], left: false };
      }
      route = { backend, targets: [], servers: new Map() };
    }
    const keep = new Set(wanted.map((t) => t.port));
    const replaced = wanted.length > 0 && route.servers.size > 0 && ![...route.servers.keys()].some((p) => keep.has(p));
    const next = replaced ? freeBackend() : null;
    if (next !== null) {
      // New instances replace all the old ones (a new revision): they go into a backend of their own, and
      // one change of the map sends the host there. Every request from then on, whichever HAProxy thread
      // takes it, goes to the new instances; those already sent to the old ones finish there. (Servers
      // of one backend changed in place pass through a moment where both serve, and a client could be
      // sent back to an old instance after a new one answered it.)
      const servers = new Map<number, EdgeServer>();
      try {
        for (const target of wanted) servers.set(target.port, await addServer(next, target));
      } catch (error) {
        await freeServers(
          next,
          [...servers.values()].map((server) => server.name),
        );
        throw error;
      }
      accounts.moved(slug, next, (await backendCounts()).get(next) ?? zeroCounts());
      draining.add(route.backend);
      table.set(slug, { backend: next, targets: wanted, servers });
      await pointHost(slug, next, false);
      await markPaused(slug, route.paused === true, false);
      for (const server of route.servers.values()) await cli(`set server ${route.backend}/${server.name} state drain`);
      await runtime.writeFiles();
      return { backend: route.backend, removed: [...route.servers.values()].map((s) => s.name), left: true };
    }
    const servers = new Map([...route.servers].filter(([port]) => keep.has(port)));
    for (const target of wanted)
      if (!servers.has(target.port)) servers.set(target.port, await addServer(route.backend, target));
    const gone = [...route.servers].filter(([port]) => !keep.has(port)).map(([, server]) => server.name);
    // Drained: no new request goes there, the ones in flight finish.
    for (const server of gone) await cli(`set server ${route.backend}/${server} state drain`);
    const isNew = !table.has(slug);
    if (isNew) {
      // The backend may have served a removed app: this one is counted from what it has now.
      const base = (await backendCounts()).get(route.backend) ?? zeroCounts();
      accounts.open(slug, route.backend, base);
    }
    table.set(slug, { backend: route.backend, targets: wanted, servers, paused });
    if (isNew || isSplitKey(slug)) await pointHost(slug, route.backend, isNew);
    await markPaused(slug, route.paused === true, paused);
    // Kept current for a restart of HAProxy, which reads them.
    await runtime.writeFiles();
    return { backend: route.backend, removed: gone, left: false };
  }

  async function setRoute(slug: string, targets: AppTarget[], opts: SetTargetsOptions | undefined): Promise<void> {
    const invalid = targets.find((t) => !Number.isInteger(t.port) || t.port < 1 || t.port > 65535);
    if (invalid !== undefined)
      throw new Error(`app target ${invalid.instanceId} has no valid port (${invalid.port}); the route is unchanged`);
    const wanted = [...new Map(targets.map((t) => [t.port, { ...t }])).values()];
    const paused = wanted.length === 0 && opts?.scaledToZero === true;
    const { backend, removed, left } = await enqueue(() => changeRoute(slug, wanted, paused));
    const drainTimeoutMs = opts?.drainTimeoutMs ?? options.drainTimeoutMs;
    if (!left) {
      await drainAndFree(slug, backend, removed, drainTimeoutMs);
      return;
    }
    try {
      await drainAndFree(slug, backend, removed, drainTimeoutMs);
      // What it counted to the end (its requests in flight included) stays the app's.
      const counts = await enqueue(backendCounts).catch(() => null);
      accounts.retired(slug, backend, counts?.get(backend) ?? null);
    } finally {
      // The backend goes back to the pool only now, empty.
      draining.delete(backend);
    }
  }

  const switchApi: EdgeSwitch = {
    get poolSize() {
      return poolSize;
    },

    routes() {
      return [...table].map(([slug, r]) => ({
        // A split's second route is counted as its label's (the revision tells them apart).
        slug: labelOfKey(slug),
        backend: r.backend,
        servers: [...r.servers.values()],
        targets: r.targets,
      }));
    },

    pausedSlugs() {
      return [...table].filter(([, r]) => r.paused).map(([slug]) => slug);
    },

    backends() {
      return new Map([...table].filter(([slug]) => !isSplitKey(slug)).map(([slug, route]) => [slug, route.backend]));
    },

    splitLines() {
      return [...splits].flatMap(([label, split]) => {
        const route = table.get(splitRouteKey(label));
        return route === undefined ? [] : [`${label}.${appsDomain} ${splitValue(route.backend, split)}`];
      });
    },

    backendCounts,

    setTargets(slug, targets, opts) {
      if (!/^[a-z0-9-]{1,63}$/.test(slug)) return Promise.reject(new Error(`not an app slug: ${slug}`));
      return setRoute(slug, targets, opts);
    },

    async setSplit(label, split, opts) {
      if (!/^[a-z0-9-]{1,63}$/.test(label)) throw new Error(`not an app slug: ${label}`);
      const key = splitRouteKey(label);
      if (split === null) {
        await enqueue(async () => {
          splits.delete(label);
          if (splitMapped.delete(label)) await cli(`del map ${splitMapFile} ${label}.${appsDomain}`);
          await runtime.writeFiles();
        });
        return switchApi.remove(key, opts);
      }
      splits.set(label, { ...split, targets: split.targets.map((t) => ({ ...t })) });
      // The second revision's servers first, then its split map entry (pointHost): no request is sent there before.
      await setRoute(key, split.targets, opts);
    },

    async remove(slug, opts) {
      const route = await enqueue(async () => {
        const found = table.get(slug);
        if (found === undefined) return null;
        table.delete(slug);
        draining.add(found.backend);
        if (!isSplitKey(slug)) await cli(`del map ${mapFile} ${slug}.${appsDomain}`);
        await markPaused(slug, found.paused === true, false);
        for (const server of found.servers.values())
          await cli(`set server ${found.backend}/${server.name} state drain`);
        await runtime.writeFiles();
        return found;
      });
      if (route === null) return;
      try {
        await drainAndFree(
          slug,
          route.backend,
          [...route.servers.values()].map((server) => server.name),
          opts?.drainTimeoutMs ?? options.drainTimeoutMs,
        );
      } finally {
        // The backend goes back to the pool only now, empty.
        draining.delete(route.backend);
      }
    },

    targets(slug) {
      return (table.get(slug)?.targets ?? []).map((t) => ({ ...t }));
    },
  };
  return switchApi;
}
