/**
 * The app edge served by HAProxy: the service starts HAProxy as its child and changes its routes through
 * HAProxy's runtime API (a Unix socket), so app traffic is handled in HAProxy's own process and a switch
 * needs no reload. (nginx can only change its upstreams by a reload, and a reload closes every idle
 * keep-alive connection of every app's clients: a client that sends just then gets a reset. Measured in
 * the deploy test: 2 to 3 of about 1,200 keep-alive requests failed per switch through nginx, none through
 * HAProxy. docs/app-urls.md says why HAProxy.)
 *
 * This module is HAProxy's process: its files, its start, its supervision and its counts. The routing
 * table and the switch-and-drain that changes it without losing a request are
 * src/dataplane/edge-haproxy-switch.ts. A table that outgrows HAProxy's pool of backends restarts HAProxy
 * with a bigger one (logged; a brief interruption of app traffic).
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
import type { AppRoutes } from './app-edge.ts';
import { mapLine, renderHaproxyConfig, SPLIT_THREADS_TABLE } from './edge-haproxy-config.ts';
import { findExecutable } from './executables.ts';
import { runtimeCommand, stopLeftover, workerUser } from './edge-haproxy-process.ts';
import { createEdgeAccounts } from './edge-haproxy-stats.ts';
import { createEdgeSwitch, SLOTS } from './edge-haproxy-switch.ts';
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

/** How long HAProxy has to start and answer on its runtime socket. */
const START_TIMEOUT_MS = 15_000;

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

export async function startHaproxyEdge(options: HaproxyEdgeOptions): Promise<HaproxyEdge> {
  const { dir, logger, appsDomain } = options;
  const configFile = path.join(dir, 'haproxy.cfg');
  const mapFile = path.join(dir, 'routes.map');
  const pausedMapFile = path.join(dir, 'paused.map');
  const splitMapFile = path.join(dir, 'split.map');
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

  /** Per app: the counts of its backend when it got it, and what earlier HAProxy processes counted. */
  const accounts = createEdgeAccounts();
  let child: ChildProcess | null = null;
  let closing = false;
  /** Runtime changes, one at a time (the waits of drains are outside it). */
  let chain: Promise<unknown> = Promise.resolve();
  const stderr: string[] = [];
  const routing = createEdgeSwitch({
    runtime: { cli, enqueue, writeFiles, restart, running: () => !closing && child !== null },
    mapFile,
    pausedMapFile,
    splitMapFile,
    appsDomain,
    drainTimeoutMs: options.drainTimeoutMs,
    accounts,
    logger,
  });
  const requestLog = options.traffic
    ? await startRequestLog({ logger, traffic: options.traffic, routes: () => routing.routes() })
    : null;

  async function writeFiles(): Promise<void> {
    const text = renderHaproxyConfig({
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
    await fs.writeFile(`${configFile}.next`, text, { mode: 0o600 });
    await fs.rename(`${configFile}.next`, configFile);
    const map = [...routing.backends()].map(([slug, backend]) => mapLine(slug, appsDomain, backend)).join('\n');
    await fs.writeFile(`${mapFile}.next`, map === '' ? '' : `${map}\n`, { mode: 0o600 });
    await fs.rename(`${mapFile}.next`, mapFile);
    const paused = routing.pausedSlugs().map((slug) => `${slug}.${appsDomain} 1\n`);
    await fs.writeFile(`${pausedMapFile}.next`, paused.join(''), { mode: 0o600 });
    await fs.rename(`${pausedMapFile}.next`, pausedMapFile);
    const splits = routing.splitLines().map((line) => `${line}\n`);
    await fs.writeFile(`${splitMapFile}.next`, splits.join(''), { mode: 0o600 });
    await fs.rename(`${splitMapFile}.next`, splitMapFile);
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

  /**
   * The apps' counts: a backend's since the app got it (a backend of the pool may have served a removed
   * app before), plus what earlier HAProxy processes counted for it.
   */
  async function statsOf(): Promise<Map<string, EdgeAppStats>> {
    // Counters: while HAProxy does not answer (it is being started again), the last ones read stand.
    const raw = await routing.backendCounts().catch((error: unknown) => {
      logger.debug({ err: error }, 'app edge: HAProxy did not give its counts; the last ones read stand');
      return null;
    });
    return accounts.read(routing.backends(), raw);
  }

  function enqueue<T>(step: () => Promise<T>): Promise<T> {
    const run = chain.then(step);
    chain = run.catch(() => undefined);
    return run;
  }

  await start();
  logger.debug({ pid: (child as ChildProcess | null)?.pid }, 'app edge: HAProxy started');

  return {
    requestLog,
    get pid() {
      return child?.pid ?? null;
    },

    setTargets: (slug, targets, opts) => routing.setTargets(slug, targets, opts),
    remove: (slug, opts) => routing.remove(slug, opts),
    setSplit: (slug, split, opts) => routing.setSplit(slug, split, opts),
    targets: (slug) => routing.targets(slug),

    stats: () => enqueue(statsOf),

    async threadPins() {
      const header = await cli(`show table ${SPLIT_THREADS_TABLE}`);
      const used = /\bused:(\d+)/.exec(header);
      if (used === null)
        throw new Error(`HAProxy's table ${SPLIT_THREADS_TABLE} gave no count: ${header.slice(0, 200)}`);
      return Number(used[1]);
    },

    async close() {
      if (closing) return;
      closing = true;
      await chain;
      const proc = child;
      child = null;
      if (proc === null || proc.exitCode !== null || proc.signalCode !== null) return await requestLog?.close();
      const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
      // Soft stop: HAProxy stops listening and ends once its requests are done; the drain time, then
      // whatever is left is cut.
      proc.kill('SIGUSR1');
      const timer = setTimeout(() => proc.kill('SIGTERM'), options.drainTimeoutMs);
      const hard = setTimeout(() => proc.kill('SIGKILL'), options.drainTimeoutMs + 5_000);
      await exited;
      clearTimeout(timer);
      clearTimeout(hard);
      await requestLog?.close();
    },
  };
}
