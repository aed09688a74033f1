/**
 * The runtime API commands that make HAProxy match the app edge's routing table
 * (src/dataplane/edge-haproxy-table.ts): a host pointed at its backend, put in or out of the paused map,
 * an instance put into a server slot, servers drained and freed, and the counts HAProxy keeps. The
 * switch (src/dataplane/edge-haproxy-switch.ts) runs them in its order.
 */
import type { AppTarget } from './app-backends.ts';
import { extraServerName, mapLine, slotName, type EdgeServer } from './edge-haproxy-config.ts';
import { parseBackendCounts, type RawCounts } from './edge-haproxy-stats.ts';
import { isSplitKey, labelOfKey, SLOTS, splitValue, type EdgeSwitchState } from './edge-haproxy-table.ts';

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Points the host at its backend: the routes map for a route, the split map for a split's second route. */
export async function pointHost(s: EdgeSwitchState, key: string, backend: string, isNew: boolean): Promise<void> {
  const { runtime, appsDomain, table } = s;
  if (!isSplitKey(key)) {
    await runtime.cli(`${isNew ? 'add' : 'set'} map ${s.mapFile} ${mapLine(key, appsDomain, backend)}`);
    return;
  }
  const label = labelOfKey(key);
  const split = table.splits.get(label);
  if (split === undefined) return;
  await runtime.cli(
    `${table.splitMapped.has(label) ? 'set' : 'add'} map ${s.splitMapFile} ${label}.${appsDomain} ${splitValue(backend, split)}`,
  );
  table.splitMapped.add(label);
}

/** Each backend's counts as HAProxy has them now (`show stat` of the backends). */
export async function backendCounts(s: EdgeSwitchState): Promise<Map<string, RawCounts>> {
  return parseBackendCounts(await s.runtime.cli('show stat -1 2 -1'));
}

/** Puts the host in the paused map, or takes it out, when that changes (the backend's 503 says why). */
export async function markPaused(s: EdgeSwitchState, slug: string, was: boolean, now: boolean): Promise<void> {
  if (was === now) return;
  await s.runtime.cli(`${now ? 'add' : 'del'} map ${s.pausedMapFile} ${slug}.${s.appsDomain}${now ? ' 1' : ''}`);
}

/** Sessions (requests in flight, tunnels) each server of the backend has now. */
async function sessions(s: EdgeSwitchState, backend: string): Promise<Map<string, number>> {
  const csv = await s.runtime.cli('show stat');
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
export async function drainAndFree(
  s: EdgeSwitchState,
  slug: string,
  backend: string,
  servers: string[],
  timeoutMs: number,
): Promise<void> {
  if (servers.length === 0) return;
  const deadline = Date.now() + timeoutMs;
  let busy: string[];
  for (;;) {
    const counts = await sessions(s, backend).catch(() => new Map<string, number>());
    busy = servers.filter((server) => (counts.get(server) ?? 0) > 0);
    if (busy.length === 0 || Date.now() >= deadline) break;
    await sleep(25);
  }
  if (busy.length > 0)
    s.logger.warn(
      { slug, servers: busy, drainTimeoutMs: timeoutMs },
      'app instances still busy when the drain time ran out',
    );
  await s.runtime.enqueue(() => freeServers(s, backend, servers));
}

/** Takes servers out for good: their slots free for the next instances, servers added at run time deleted. */
export async function freeServers(s: EdgeSwitchState, backend: string, servers: readonly string[]): Promise<void> {
  for (const server of servers) {
    // In maintenance HAProxy closes the slot's idle connections, so the next instance put in it gets
    // none of the old one's. Whatever is left (a WebSocket) ends with the instance, which the caller
    // stops now.
    await s.runtime.cli(`set server ${backend}/${server} state maint`).catch(() => undefined);
    if (server.startsWith('slot')) s.table.slotsInUse.get(backend)?.delete(server);
    else await deleteServer(s, backend, server);
  }
}

/** Deletes a server added at run time; one that still has connections is deleted once they are gone. */
async function deleteServer(s: EdgeSwitchState, backend: string, server: string, attempt = 0): Promise<void> {
  try {
    await s.runtime.cli(`del server ${backend}/${server}`);
  } catch (error) {
    if (!s.runtime.running()) return;
    if (attempt >= 20) {
      s.logger.warn({ err: error, backend, server }, 'app edge: a drained server could not be deleted');
      return;
    }
    setTimeout(() => {
      void s.runtime.enqueue(() => deleteServer(s, backend, server, attempt + 1)).catch(() => undefined);
    }, 1_000).unref();
  }
}

/** Puts an instance into a free slot of the backend (or, with none left, a server added at run time). */
export async function addServer(s: EdgeSwitchState, backend: string, target: AppTarget): Promise<EdgeServer> {
  const { runtime, table } = s;
  const used = table.slotsInUse.get(backend) ?? new Set<string>();
  table.slotsInUse.set(backend, used);
  const free = Array.from({ length: SLOTS }, (_, k) => slotName(k)).find((name) => !used.has(name));
  if (free !== undefined) {
    used.add(free);
    try {
      await runtime.cli(`set server ${backend}/${free} addr 127.0.0.1 port ${target.port}`);
      await runtime.cli(`set server ${backend}/${free} state ready`);
    } catch (error) {
      used.delete(free);
      throw error;
    }
    return { name: free, port: target.port };
  }
  const name = extraServerName(target);
  await runtime.cli(`add server ${backend}/${name} 127.0.0.1:${target.port}`);
  await runtime.cli(`enable server ${backend}/${name}`);
  return { name, port: target.port };
}
