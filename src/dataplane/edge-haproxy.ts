/**
 * The app edge served by HAProxy: the service starts HAProxy as its child and changes its routes through
 * HAProxy's runtime API (a Unix socket), so app traffic is handled in HAProxy's own process and a switch
 * needs no reload. (nginx can only change its upstreams by a reload, and a reload closes every idle
 * keep-alive connection of every app's clients: a client that sends just then gets a reset. Measured in
 * the deploy test: 2 to 3 of about 1,200 keep-alive requests failed per switch through nginx, none through
 * HAProxy. docs/app-urls.md says why HAProxy.)
 *
 * A switch (`setTargets`) loses no request: new instances are added as servers first (already
 * health-checked by the caller), then the replaced ones are set to `drain` (no new request goes to
 * them, the ones in flight finish); the promise resolves once HAProxy counts no session on them (or the
 * drain time ran out), and only then are they put in maintenance and deleted, so the caller stops an
 * instance only when nothing is in flight to it.
 *
 * Apps get a backend each from a pool declared in the configuration (backends cannot be added at run
 * time); a host name leads to its backend through a map changed at run time. A table that outgrows the
 * pool restarts HAProxy with a bigger one (logged; a brief interruption of app traffic).
 *
 * HAProxy runs under `setpriv --pdeathsig` where util-linux has it, so it dies with the service; one
 * left by a service that was killed anyway is found through its pid file and stopped at the next start.
 * If HAProxy exits on its own, it is started again with the whole table.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { Logger } from 'pino';
import { processAlive } from '../db/embedded-postgres.ts';
import type { AppTarget } from './app-backends.ts';
import type { AppRoutes } from './app-edge.ts';
import {
  extraServerName,
  mapLine,
  poolBackend,
  renderHaproxyConfig,
  slotName,
  type EdgeRoute,
  type EdgeServer,
} from './edge-haproxy-config.ts';
import { findExecutable } from './executables.ts';
import { runtimeCommand, stopLeftover, workerUser } from './edge-haproxy-process.ts';
import { createEdgeAccounts, parseBackendCounts, zeroCounts, type RawCounts } from './edge-haproxy-stats.ts';
import type { EdgeAppStats } from './edge-stats.ts';

export interface HaproxyEdgeOptions {
  /** The edge's own directory (configuration, map, pid file, runtime socket). */
  dir: string;
  haproxyPath: string;
  listenHost: string;
  listenPort: number;
  appsDomain: string;
  forwardedProto: 'http' | 'https';
  tls: { certFile: string; keyFile: string } | null;
  drainTimeoutMs: number;
  /** Connections one client address may hold at once; null when a proxy in front is every client. */
  perClientConnections: number | null;
  /**
   * How to start what carries the apps' traffic so that it runs outside the service's CPU reserve
   * (src/dataplane/service-cpu-reserve.ts); as it is when there is none.
   */
  ordinary?: (argv: readonly string[]) => string[];

  logger: Logger;
  /** Throws, naming the setting, when the port cannot be had; run once a leftover HAProxy is stopped. */
  checkPort?: () => Promise<void>;
}

export interface HaproxyEdge extends AppRoutes {
  /** HAProxy's process id while it runs. */
  readonly pid: number | null;
  /** Each routed app's counts, from HAProxy's statistics of its backend since the app got it. */
  stats(): Promise<Map<string, EdgeAppStats>>;
  close(): Promise<void>;
}

/** Backends declared at first; the pool doubles when apps outgrow it. */
const INITIAL_POOL = 128;
/**
 * Server slots per backend: room for an app's instances and, during a switch, the ones replacing them.
 * More instances than that still work, as servers added at run time (without connection reuse).
 */
const SLOTS = 16;

/**
 * HAProxy's threads: one per CPU, HAProxy's own default. With half the CPUs a small app's traffic was bound
 * by one core on 2 CPUs (0.7x of a plain nginx's requests per second in front of the same instance). A
 * switch to new instances is one change of the host's map entry (setTargets), atomic across threads, so no
 * client goes back to an old instance after a new one answered it; an app's counts may be read before a
 * request's last counter is added (one thread may still be finishing it while another answers `show stat`).
 */
export function edgeThreads(cpus: number = os.availableParallelism()): number {
  return Math.max(1, cpus);
}

/** How long HAProxy has to start and answer on its runtime socket. */
const START_TIMEOUT_MS = 15_000;

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

interface Route {
  backend: string;
  targets: AppTarget[];
  /** The server of each target, by port. */
  servers: Map<number, EdgeServer>;
  /** No target because the deployment is paused (min_scale 0): its host is in the paused map. */
  paused?: boolean;
}

export async function startHaproxyEdge(options: HaproxyEdgeOptions): Promise<HaproxyEdge> {
  const { dir, logger, appsDomain } = options;
  const configFile = path.join(dir, 'haproxy.cfg');
  const mapFile = path.join(dir, 'routes.map');
  const pausedMapFile = path.join(dir, 'paused.map');
  const adminSocket = path.join(dir, 'admin.sock');
  await fs.mkdir(dir, { recursive: true, mode: 0o700 });
  await fs.chmod(dir, 0o700);
  // This edge owns the directory from here on: written before an earlier HAProxy is stopped, so that
  // the edge that started that one (still running, say) sees it was taken over and does not start its
  // HAProxy again (which would stop this one's in turn, and both would serve the port by turns).
  const ownerFile = path.join(dir, 'owner');
  const ownerToken = randomUUID();
  await fs.writeFile(ownerFile, ownerToken, { mode: 0o600 });
  const ownsDirectory = async () => (await fs.readFile(ownerFile, 'utf8').catch(() => '')).trim() === ownerToken;
  await stopLeftover(dir, configFile, logger);
  await options.checkPort?.();
  let tlsPemFile: string | null = null;
  if (options.tls) {
    // HAProxy reads the chain and the key from one file.
    tlsPemFile = path.join(dir, 'apps.pem');
    const pem = [await fs.readFile(options.tls.certFile, 'utf8'), await fs.readFile(options.tls.keyFile, 'utf8')];
    await fs.writeFile(tlsPemFile, pem.map((p) => p.trimEnd()).join('\n') + '\n', { mode: 0o600 });
  }
  const setpriv = await findExecutable('setpriv');
  // As root, HAProxy's worker drops to the `haproxy` user Debian's package makes: not `nobody`, which the
  // apps' sandboxes run as.
  const runAs = process.getuid?.() === 0 ? await workerUser() : null;

  const table = new Map<string, Route>();
  /** Backends of removed apps whose servers are still draining: not given to another app yet. */
  const draining = new Set<string>();
  /** Slots of each backend that hold an instance, serving or draining. */
  const slotsInUse = new Map<string, Set<string>>();
  let poolSize = INITIAL_POOL;
  /** Per app: the counts of its backend when it got it, and what earlier HAProxy processes counted. */
  const accounts = createEdgeAccounts();
  let child: ChildProcess | null = null;
  let closing = false;
  /** Runtime changes, one at a time (the waits of drains are outside it). */
  let chain: Promise<unknown> = Promise.resolve();
  const stderr: string[] = [];

  function routes(): EdgeRoute[] {
    return [...table].map(([slug, r]) => ({ slug, backend: r.backend, servers: [...r.servers.values()] }));
  }

  async function writeFiles(): Promise<void> {
    const text = renderHaproxyConfig({
      dir,
      listenHost: options.listenHost,
      listenPort: options.listenPort,
      forwardedProto: options.forwardedProto,
      tlsPemFile,
      poolSize,
      slots: SLOTS,
      threads: edgeThreads(),
      perClientConnections: options.perClientConnections,
      runAs,
      routes: routes(),
    });
    await fs.writeFile(`${configFile}.next`, text, { mode: 0o600 });
    await fs.rename(`${configFile}.next`, configFile);
    const map = [...table].map(([slug, r]) => mapLine(slug, appsDomain, r.backend)).join('\n');
    await fs.writeFile(`${mapFile}.next`, map === '' ? '' : `${map}\n`, { mode: 0o600 });
    await fs.rename(`${mapFile}.next`, mapFile);
    const paused = [...table].filter(([, r]) => r.paused).map(([slug]) => `${slug}.${appsDomain} 1\n`);
    await fs.writeFile(`${pausedMapFile}.next`, paused.join(''), { mode: 0o600 });
    await fs.rename(`${pausedMapFile}.next`, pausedMapFile);
  }

  /** Puts the host in the paused map, or takes it out, when that changes (the backend's 503 says why). */
  async function markPaused(slug: string, was: boolean, now: boolean): Promise<void> {
    if (was === now) return;
    await cli(`${now ? 'add' : 'del'} map ${pausedMapFile} ${slug}.${appsDomain}${now ? ' 1' : ''}`);
  }

  async function cli(command: string): Promise<string> {
    const answer = await runtimeCommand(adminSocket, command);
    // HAProxy says what went wrong in words; these are the answers of a command that did nothing.
    if (/^(No such|Unknown|Require|Can't|Cannot|Invalid|Missing|Server is|Server still|'.*' expects)/m.test(answer))
      throw new Error(`HAProxy refused '${command}': ${answer}`);
    return answer;
  }

  function spawnHaproxy(): ChildProcess {
    // Master-worker mode: the master keeps root and so its parent-death signal (a change of user clears
    // it), the worker runs as nobody and exits with its master.
    // At ordinary priority: it carries the apps' traffic, which must not wait for what every other
    // process on the host leaves (it once ran in the idle class; docs/performance.md).
    const command = [options.haproxyPath, '-W', '-db', '-f', configFile];
    const direct = setpriv ? [setpriv, '--pdeathsig', 'SIGTERM', '--', ...command] : command;
    // Outside the service's CPU reserve, where there is one: the apps' traffic is not the API's.
    const argv = options.ordinary ? options.ordinary(direct) : direct;
    const proc = spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'ignore', 'pipe'] });
    proc.stderr.setEncoding('utf8');
    proc.stderr.on('data', (chunk: string) => {
      for (const line of chunk.split('\n').filter((l) => l.trim() !== '')) {
        stderr.push(line);
        if (stderr.length > 50) stderr.shift();
        // Its notices of servers coming and going are the data plane's own doing: debug only.
        if (/\[(ALERT|EMERG)\]/.test(line) && !/has no server available/.test(line))
          logger.warn({ haproxy: line }, 'app edge: HAProxy says');
        else logger.debug({ haproxy: line }, 'app edge: HAProxy says');
      }
    });
    proc.on('error', (error) => stderr.push(String(error)));
    proc.once('exit', (code, signal) => {
      if (child !== proc || closing) return;
      child = null;
      // Supervised: started again with the whole table, so apps stay reachable; unless another HAProxy
      // now holds this directory (another edge took it over), which must not be fought over.
      enqueue(async () => {
        await sleep(500);
        if (closing) return;
        if (!(await ownsDirectory())) {
          logger.error(
            { code, signal },
            'app edge: HAProxy exited and another edge took its directory over; not restarting it',
          );
          return;
        }
        const holder = Number((await fs.readFile(path.join(dir, 'haproxy.pid'), 'utf8').catch(() => '')).trim());
        if (Number.isInteger(holder) && holder > 1 && holder !== proc.pid && processAlive(holder)) {
          logger.error(
            { code, signal, holder },
            'app edge: HAProxy exited and another one holds its directory; not restarting it',
          );
          return;
        }
        logger.error({ code, signal }, 'app edge: HAProxy exited; starting it again');
        await start();
      }).catch((error: unknown) => logger.error({ err: error }, 'app edge: HAProxy could not be started again'));
    });
    return proc;
  }

  async function start(): Promise<void> {
    await writeFiles();
    // A new HAProxy counts from zero: the counts so far are carried (statsOf).
    accounts.processStarted();
    const proc = spawnHaproxy();
    const deadline = Date.now() + START_TIMEOUT_MS;
    while (Date.now() < deadline) {
      if (proc.exitCode !== null || proc.signalCode !== null) break;
      const up = await runtimeCommand(adminSocket, 'show info').catch(() => '');
      if (/^Pid: /m.test(up)) {
        // Supervised from here on (an exit while starting is this function's to report).
        child = proc;
        return;
      }
      await sleep(25);
    }
    proc.kill('SIGKILL');
    throw new Error(`HAProxy did not start: ${stderr.slice(-5).join(' | ') || 'no output'}`);
  }

  async function restart(reason: string): Promise<void> {
    logger.warn({ reason }, 'app edge: restarting HAProxy (app traffic pauses briefly)');
    // The counts up to now, while this HAProxy still answers (after a crash, those since the last read are lost).
    await statsOf().catch(() => undefined);
    const proc = child;
    child = null;
    if (proc && proc.exitCode === null && proc.signalCode === null) {
      const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
      proc.kill('SIGTERM');
      await exited;
    }
    await start();
  }

  /** Each backend's counts as HAProxy has them now (`show stat` of the backends). */
  async function backendCounts(): Promise<Map<string, RawCounts>> {
    return parseBackendCounts(await cli('show stat -1 2 -1'));
  }

  /**
   * The apps' counts: a backend's since the app got it (a backend of the pool may have served a removed
   * app before), plus what earlier HAProxy processes counted for it.
   */
  async function statsOf(): Promise<Map<string, EdgeAppStats>> {
    // Counters: while HAProxy does not answer (it is being started again), the last ones read stand.
    const raw = await backendCounts().catch((error: unknown) => {
      logger.debug({ err: error }, 'app edge: HAProxy did not give its counts; the last ones read stand');
      return null;
    });
    return accounts.read(new Map([...table].map(([slug, route]) => [slug, route.backend])), raw);
  }

  function enqueue<T>(step: () => Promise<T>): Promise<T> {
    const run = chain.then(step);
    chain = run.catch(() => undefined);
    return run;
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
      if (closing || child === null) return;
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

  await start();
  logger.debug({ pid: (child as ChildProcess | null)?.pid }, 'app edge: HAProxy started');

  return {
    get pid() {
      return child?.pid ?? null;
    },

    async setTargets(slug, targets, opts) {
      const invalid = targets.find((t) => !Number.isInteger(t.port) || t.port < 1 || t.port > 65535);
      if (invalid !== undefined)
        throw new Error(`app target ${invalid.instanceId} has no valid port (${invalid.port}); the route is unchanged`);
      if (!/^[a-z0-9-]{1,63}$/.test(slug)) throw new Error(`not an app slug: ${slug}`);
      const wanted = [...new Map(targets.map((t) => [t.port, { ...t }])).values()];
      const paused = wanted.length === 0 && opts?.scaledToZero === true;
      const { backend, removed, left } = await enqueue(async () => {
        let route = table.get(slug);
        if (route === undefined) {
          let backend = freeBackend();
          if (backend === null) {
            // Backends cannot be added at run time: a bigger pool needs a new HAProxy.
            poolSize *= 2;
            backend = freeBackend()!;
            const servers = new Map(
              wanted.slice(0, SLOTS).map((t, k) => [t.port, { name: slotName(k), port: t.port }]),
            );
            slotsInUse.set(backend, new Set([...servers.values()].map((server) => server.name)));
            table.set(slug, { backend, targets: wanted.slice(0, SLOTS), servers, paused });
            await restart(`more apps than the pool of ${poolSize / 2} backends`);
            return { backend, removed: [] as string[], left: false };
          }
          route = { backend, targets: [], servers: new Map() };
        }
        const keep = new Set(wanted.map((t) => t.port));
        const replaced =
          wanted.length > 0 && route.servers.size > 0 && ![...route.servers.keys()].some((p) => keep.has(p));
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
          await cli(`set map ${mapFile} ${slug}.${appsDomain} ${next}`);
          await markPaused(slug, route.paused === true, false);
          for (const server of route.servers.values())
            await cli(`set server ${route.backend}/${server.name} state drain`);
          await writeFiles();
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
        if (isNew) await cli(`add map ${mapFile} ${mapLine(slug, appsDomain, route.backend)}`);
        await markPaused(slug, route.paused === true, paused);
        // Kept current for a restart of HAProxy, which reads them.
        await writeFiles();
        return { backend: route.backend, removed: gone, left: false };
      });
      if (!left) {
        await drainAndFree(slug, backend, removed, opts?.drainTimeoutMs ?? options.drainTimeoutMs);
        return;
      }
      try {
        await drainAndFree(slug, backend, removed, opts?.drainTimeoutMs ?? options.drainTimeoutMs);
        // What it counted to the end (its requests in flight included) stays the app's.
        const counts = await enqueue(backendCounts).catch(() => null);
        accounts.retired(slug, backend, counts?.get(backend) ?? null);
      } finally {
        // The backend goes back to the pool only now, empty.
        draining.delete(backend);
      }
    },

    async remove(slug, opts) {
      const route = await enqueue(async () => {
        const found = table.get(slug);
        if (found === undefined) return null;
        table.delete(slug);
        draining.add(found.backend);
        await cli(`del map ${mapFile} ${slug}.${appsDomain}`);
        await markPaused(slug, found.paused === true, false);
        for (const server of found.servers.values())
          await cli(`set server ${found.backend}/${server.name} state drain`);
        await writeFiles();
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

    stats: () => enqueue(statsOf),

    async close() {
      if (closing) return;
      closing = true;
      await chain;
      const proc = child;
      child = null;
      if (proc === null || proc.exitCode !== null || proc.signalCode !== null) return;
      const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
      // Soft stop: HAProxy stops listening and ends once its requests are done; the drain time, then
      // whatever is left is cut.
      proc.kill('SIGUSR1');
      const timer = setTimeout(() => proc.kill('SIGTERM'), options.drainTimeoutMs);
      const hard = setTimeout(() => proc.kill('SIGKILL'), options.drainTimeoutMs + 5_000);
      await exited;
      clearTimeout(timer);
      clearTimeout(hard);
    },
  };
}
