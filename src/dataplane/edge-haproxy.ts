/**
 * The app edge served by HAProxy: the service starts HAProxy as its child and changes its routes through
 * HAProxy's runtime API (a Unix socket), so app traffic is handled in HAProxy's own process and a switch
 * needs no reload. (nginx can only change its upstreams by a reload, and a reload closes every idle
 * keep-alive connection of every app's clients: a client that sends just then gets a reset. Measured in
 * the deploy test: 2 to 3 of about 1,200 keep-alive requests failed per switch through nginx, none through
 * HAProxy. docs/app-urls.md says why HAProxy.)
 *
 * This module puts the edge together and keeps its counts: its directory and files are
 * src/dataplane/edge-haproxy-files.ts, HAProxy's process (its start, its supervision, its stop)
 * src/dataplane/edge-haproxy-supervisor.ts, the runtime API's commands and their queue
 * src/dataplane/edge-haproxy-process.ts. The routing table and the switch-and-drain that changes it
 * without losing a request are src/dataplane/edge-haproxy-switch.ts. A table that outgrows HAProxy's pool
 * of backends restarts HAProxy with a bigger one (logged; a brief interruption of app traffic).
 *
 * HAProxy runs under `setpriv --pdeathsig` where util-linux has it, so it dies with the service; one
 * left by a service that was killed anyway is found through its pid file and stopped at the next start.
 * If HAProxy exits on its own, it is started again with the whole table.
 */
import os from 'node:os';
import type { Logger } from 'pino';
import type { AppRoutes } from './app-edge.ts';
import { renderHaproxyConfig, SPLIT_THREADS_TABLE } from './edge-haproxy-config.ts';
import { edgeFiles, takeOverDirectory, writeEdgeFiles, writeTlsPem } from './edge-haproxy-files.ts';
import { findExecutable } from './executables.ts';
import { checkedRuntimeCommand, createChangeQueue, stopLeftover, workerUser } from './edge-haproxy-process.ts';
import { createEdgeAccounts, type EdgeAccounts } from './edge-haproxy-stats.ts';
import { restartHaproxy, startHaproxy, stopHaproxy, type HaproxyProcess } from './edge-haproxy-supervisor.ts';
import { createEdgeSwitch, type EdgeSwitch } from './edge-haproxy-switch.ts';
import { SLOTS } from './edge-haproxy-table.ts';
import type { EdgeAppStats } from './edge-stats.ts';
import { startRequestLog, type RequestLog } from './edge-request-log.ts';
import type { TrafficSeries } from './traffic-series.ts';

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
  /** The size of the stick table of thread pins (src/dataplane/edge-haproxy-config.ts, splitRules). */
  threadPins: number;
  /**
   * How to start what carries the apps' traffic so that it runs outside the service's CPU reserve
   * (src/dataplane/service-cpu-reserve.ts); as it is when there is none.
   */
  ordinary?: (argv: readonly string[]) => string[];

  logger: Logger;
  /** Throws, naming the setting, when the port cannot be had; run once a leftover HAProxy is stopped. */
  checkPort?: () => Promise<void>;
  /** Where each request is recorded, through HAProxy's request log (src/dataplane/edge-request-log.ts). */
  traffic?: TrafficSeries;
}

export interface HaproxyEdge extends AppRoutes {
  /** The reader of HAProxy's request log, when the edge records its requests. */
  readonly requestLog: RequestLog | null;
  /** HAProxy's process id while it runs. */
  readonly pid: number | null;
  /** Each routed app's counts, from HAProxy's statistics of its backend since the app got it. */
  stats(): Promise<Map<string, EdgeAppStats>>;
  /** The thread pins in HAProxy's stick table now. */
  threadPins(): Promise<number>;
  close(): Promise<void>;
}

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

/**
 * The apps' counts: a backend's since the app got it (a backend of the pool may have served a removed
 * app before), plus what earlier HAProxy processes counted for it.
 */
async function statsOf(
  routing: EdgeSwitch,
  accounts: EdgeAccounts,
  logger: Logger,
): Promise<Map<string, EdgeAppStats>> {
  // Counters: while HAProxy does not answer (it is being started again), the last ones read stand.
  const raw = await routing.backendCounts().catch((error: unknown) => {
    logger.debug({ err: error }, 'app edge: HAProxy did not give its counts; the last ones read stand');
    return null;
  });
  return accounts.read(routing.backends(), raw);
}

export async function startHaproxyEdge(options: HaproxyEdgeOptions): Promise<HaproxyEdge> {
  const { dir, logger, appsDomain } = options;
  const files = edgeFiles(dir);
  const ownsDirectory = await takeOverDirectory(dir, files);
  await stopLeftover(files.configFile, logger);
  await options.checkPort?.();
  const tlsPemFile = options.tls ? await writeTlsPem(dir, options.tls) : null;
  const setpriv = await findExecutable('setpriv');
  // As root, HAProxy's worker drops to the `haproxy` user Debian's package makes: not `nobody`, which the
  // apps' sandboxes run as.
  const runAs = process.getuid?.() === 0 ? await workerUser() : null;

  /** Per app: the counts of its backend when it got it, and what earlier HAProxy processes counted. */
  const accounts = createEdgeAccounts();
  /** Runtime changes, one at a time (the waits of drains are outside it). */
  const queue = createChangeQueue();
  const cli = (command: string) => checkedRuntimeCommand(files.adminSocket, command);
  const haproxy: HaproxyProcess = {
    haproxyPath: options.haproxyPath,
    files,
    setpriv,
    ordinary: options.ordinary,
    drainTimeoutMs: options.drainTimeoutMs,
    logger,
    ownsDirectory,
    writeFiles,
    processStarted: () => accounts.processStarted(),
    readCounts: () => statsOf(routing, accounts, logger),
    queue,
    child: null,
    closing: false,
    stderr: [],
  };
  const routing = createEdgeSwitch({
    runtime: {
      cli,
      enqueue: queue.enqueue,
      writeFiles,
      restart: (reason) => restartHaproxy(haproxy, reason),
      running: () => !haproxy.closing && haproxy.child !== null,
    },
    mapFile: files.mapFile,
    pausedMapFile: files.pausedMapFile,
    splitMapFile: files.splitMapFile,
    appsDomain,
    drainTimeoutMs: options.drainTimeoutMs,
    accounts,
    logger,
  });
  const requestLog = options.traffic
    ? await startRequestLog({ logger, traffic: options.traffic, routes: () => routing.routes() })
    : null;

  async function writeFiles(): Promise<void> {
    const config = renderHaproxyConfig({
      dir,
      listenHost: options.listenHost,
      listenPort: options.listenPort,
      forwardedProto: options.forwardedProto,
      tlsPemFile,
      poolSize: routing.poolSize,
      slots: SLOTS,
      threads: edgeThreads(),
      perClientConnections: options.perClientConnections,
      threadPins: options.threadPins,
      runAs,
      routes: routing.routes(),
      requestLog,
    });
    await writeEdgeFiles(files, config, routing, appsDomain);
  }

  await startHaproxy(haproxy);
  logger.debug({ pid: haproxy.child?.pid }, 'app edge: HAProxy started');

  return {
    requestLog,
    get pid() {
      return haproxy.child?.pid ?? null;
    },

    setTargets: (slug, targets, opts) => routing.setTargets(slug, targets, opts),
    remove: (slug, opts) => routing.remove(slug, opts),
    setSplit: (slug, split, opts) => routing.setSplit(slug, split, opts),
    targets: (slug) => routing.targets(slug),

    stats: () => queue.enqueue(() => statsOf(routing, accounts, logger)),

    async threadPins() {
      const header = await cli(`show table ${SPLIT_THREADS_TABLE}`);
      const used = /\bused:(\d+)/.exec(header);
      if (used === null)
        throw new Error(`HAProxy's table ${SPLIT_THREADS_TABLE} gave no count: ${header.slice(0, 200)}`);
      return Number(used[1]);
    },

    async close() {
      if (haproxy.closing) return;
      haproxy.closing = true;
      await queue.idle();
      await stopHaproxy(haproxy);
      await requestLog?.close();
    },
  };
}
