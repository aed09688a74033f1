/**
 * The app edge: where users reach deployed apps, on a port of its own (SLIPWAY_APPS_PORT), by host name
 * only (`<slug>.<apps domain>`), never on the API's or the dashboard's origin. Two implementations behind
 * one table interface, chosen at start (SLIPWAY_EDGE_PROXY):
 *
 * - `haproxy` (src/dataplane/edge-haproxy.ts): Debian's HAProxy, started and supervised by the service,
 *   its routes changed through its runtime API without a reload. App traffic never touches the API's
 *   process.
 * - `builtin` (src/dataplane/app-router.ts): the service's own Node proxy on its own server, for machines
 *   without HAProxy (the quick start). Same table, same answers, a fraction of HAProxy's throughput, and
 *   app traffic shares the API's CPU.
 *
 * `auto` takes HAProxy when it is installed. The start log says which one serves.
 */
import fs from 'node:fs/promises';
import http, { type IncomingMessage } from 'node:http';
import https from 'node:https';
import net, { type AddressInfo } from 'node:net';
import path from 'node:path';
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import { ConfigError, type Config } from '../config.ts';
import { freePort } from '../db/embedded-postgres.ts';
import type { AppTarget, RouteSplit, SetTargetsOptions } from './app-backends.ts';
import { sendError, sendSocketError } from './app-error-answers.ts';
import { createAppRouter } from './app-router.ts';
import { startHaproxyEdge } from './edge-haproxy.ts';
import { findExecutable } from './executables.ts';
import type { EdgeAppStats } from './edge-stats.ts';
import type { RequestLogCounts } from './edge-request-log.ts';
import { THREAD_PINS } from './split-choice.ts';
import { createTrafficSeries, type TrafficSeries } from './traffic-series.ts';

/** The route table of the edge: what the data plane changes when instances start, switch and stop. */
export interface AppRoutes {
  /**
   * Routes the slug to these targets (round-robin). New requests go to them once the promise resolves;
   * it resolves when every request that was in flight to targets no longer listed has finished, or after
   * drainTimeoutMs, so the caller may stop those then.
   */
  setTargets(slug: string, targets: AppTarget[], options?: SetTargetsOptions): Promise<void>;
  /** Stops routing the slug; resolves when its in-flight requests are drained (or the timeout). */
  remove(slug: string, options?: { drainTimeoutMs?: number }): Promise<void>;
  /**
   * Splits the slug's traffic (docs/app-urls.md, "Traffic split"): `split.weight` percent of its clients go
   * to `split.targets` (health-checked by the caller) from when the promise resolves, each client and
   * LangGraph thread kept on one revision. Null ends the split: every request goes to the slug's own
   * targets, and the promise resolves once the second revision's requests in flight are drained.
   */
  setSplit(slug: string, split: RouteSplit | null, options?: { drainTimeoutMs?: number }): Promise<void>;
  targets(slug: string): AppTarget[];
}

export interface AppEdge extends AppRoutes {
  readonly kind: 'haproxy' | 'builtin';
  /** `http(s)://<apps domain>[:port]`: an app's URL is this with `<slug>.` before the host. */
  readonly publicUrl: string;
  /** The port the edge listens on. */
  readonly port: number;
  /** Requests, responses and response times of each routed app, by slug. */
  stats(): Promise<Map<string, EdgeAppStats>>;
  /** Each route's requests, errors, latency and resources per revision over the last hour. */
  readonly traffic: TrafficSeries;
  /** What HAProxy's request log recorded, dropped and rejected (null for the built-in edge, which loses none). */
  requestLogCounts(): RequestLogCounts | null;
  /** The LangGraph thread pins of traffic splits the edge holds now: never more than THREAD_PINS. */
  threadPins(): Promise<number>;
  /** Stops serving apps: in-flight requests get the drain time, then are cut. Idempotent. */
  close(): Promise<void>;
}

export interface AppEdgeDeps {
  config: Pick<
    Config,
    'dataDir' | 'appsDomain' | 'appsHost' | 'appsPort' | 'appsPublicUrl' | 'appsTls' | 'edgeProxy' | 'drainTimeoutMs'
  >;
  logger: Logger;
  /** Where HAProxy is; tests pass one that finds none. */
  findHaproxy?: () => Promise<string | null>;
  /**
   * How to start what carries the apps' traffic so that it runs outside the service's CPU reserve
   * (src/dataplane/service-cpu-reserve.ts); as it is when there is none.
   */
  ordinary?: (argv: readonly string[]) => string[];
  /** The series' clock; tests move it. */
  now?: () => number;
  /** The most thread pins held at once (THREAD_PINS); tests fill a smaller table. */
  threadPins?: number;
}

/**
 * Connections one client address may hold open on the apps port at once (both edges). Past it, its new
 * connections are closed as they arrive: one client cannot take every connection HAProxy may hold (its
 * maxconn, about half its file descriptors) nor the service's file descriptors (the built-in edge), which
 * would leave every app, or the API, unreachable. Not applied when SLIPWAY_APPS_PUBLIC_URL says a proxy
 * in front terminates the clients' connections (its address would be every client's).
 */
export const PER_CLIENT_CONNECTIONS = 1000;

/** A client's address for the limit: an IPv6 address by its /64 (one host has all of it), else itself. */
export function clientOf(address: string): string {
  if (!address.includes(':') || address.startsWith('::ffff:')) return address;
  const [head = '', tail] = address.split('::');
  const first = head === '' ? [] : head.split(':');
  const last = tail === undefined || tail === '' ? [] : tail.split(':');
  const groups =
    tail === undefined ? first : [...first, ...Array<string>(8 - first.length - last.length).fill('0'), ...last];
  return `${groups.slice(0, 4).join(':')}::/64`;
}

function perClientConnections(config: AppEdgeDeps['config']): number | null {
  return config.appsPublicUrl === null ? PER_CLIENT_CONNECTIONS : null;
}

/** The table methods of an implementation, bound to it (the data plane passes them around apart from it). */
function routesOf(routes: AppRoutes): AppRoutes {
  return {
    setTargets: (slug, targets, options) => routes.setTargets(slug, targets, options),
    remove: (slug, options) => routes.remove(slug, options),
    setSplit: (slug, split, options) => routes.setSplit(slug, split, options),
    targets: (slug) => routes.targets(slug),
  };
}

/** The URL of one app on this edge. */
export function appUrl(edge: Pick<AppEdge, 'publicUrl'>, slug: string): string {
  const { prefix, suffix } = appUrlParts(edge);
  return `${prefix}${slug}${suffix}`;
}

/** What comes before and after an app's slug in its URL on this edge. */
export function appUrlParts(edge: Pick<AppEdge, 'publicUrl'>): { prefix: string; suffix: string } {
  const base = new URL(edge.publicUrl);
  return { prefix: `${base.protocol}//`, suffix: `.${base.host}` };
}

function publicUrlOf(config: AppEdgeDeps['config'], port: number): string {
  if (config.appsPublicUrl !== null) return config.appsPublicUrl;
  const scheme = config.appsTls ? 'https' : 'http';
  const defaultPort = scheme === 'https' ? 443 : 80;
  return `${scheme}://${config.appsDomain}${port === defaultPort ? '' : `:${port}`}`;
}

export async function startAppEdge(deps: AppEdgeDeps): Promise<AppEdge> {
  const { config, logger } = deps;
  const haproxy =
    config.edgeProxy === 'builtin' ? null : await (deps.findHaproxy ?? (() => findExecutable('haproxy')))();
  if (config.edgeProxy === 'haproxy' && haproxy === null)
    throw new Error('SLIPWAY_EDGE_PROXY=haproxy but HAProxy is not installed (apt-get install haproxy)');
  if (config.appsTls) {
    // Said at start, naming the file, rather than by the proxy at its first reload.
    for (const file of [config.appsTls.certFile, config.appsTls.keyFile])
      await fs.access(file, fs.constants.R_OK).catch(() => {
        throw new Error(`the apps TLS file ${file} cannot be read`);
      });
  }
  const forwardedProto = config.appsTls || config.appsPublicUrl?.startsWith('https:') ? 'https' : 'http';
  const traffic = createTrafficSeries(deps.now);
  const checkPort = () =>
    config.appsPort === 0 ? Promise.resolve() : requireFreePort(config.appsHost, config.appsPort);
  if (haproxy !== null) {
    const port = config.appsPort === 0 ? await freePort() : config.appsPort;
    const edge = await startHaproxyEdge({
      dir: path.join(config.dataDir, 'edge'),
      haproxyPath: haproxy,
      listenHost: config.appsHost,
      listenPort: port,
      appsDomain: config.appsDomain,
      forwardedProto,
      tls: config.appsTls,
      drainTimeoutMs: config.drainTimeoutMs,
      perClientConnections: perClientConnections(config),
      threadPins: deps.threadPins ?? THREAD_PINS,
      logger,
      checkPort,
      traffic,
      ...(deps.ordinary ? { ordinary: deps.ordinary } : {}),
    });
    const publicUrl = publicUrlOf(config, port);
    logger.info({ edge: 'haproxy', haproxy, port, publicUrl }, `apps are served by HAProxy at ${publicUrl}`);
    return {
      kind: 'haproxy',
      publicUrl,
      port,
      ...routesOf(edge),
      stats: () => edge.stats(),
      traffic,
      requestLogCounts: () => edge.requestLog?.counts() ?? null,
      threadPins: () => edge.threadPins(),
      close: () => edge.close(),
    };
  }
  await checkPort();
  return startBuiltinEdge(deps, forwardedProto, traffic);
}

/**
 * Says which setting to change when the apps port cannot be had, before a proxy fails on it with words
 * of its own.
 */
async function requireFreePort(host: string, port: number): Promise<void> {
  const server = net.createServer();
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => resolve());
    });
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'EADDRINUSE')
      throw new ConfigError(
        'SLIPWAY_APPS_PORT',
        `${port} is already in use on ${host} (another process listens there): stop it, or set SLIPWAY_APPS_PORT to a free port`,
      );
    if (code === 'EACCES')
      throw new ConfigError(
        'SLIPWAY_APPS_PORT',
        `this user may not listen on port ${port}: set SLIPWAY_APPS_PORT to 1024 or above`,
      );
    if (code === 'EADDRNOTAVAIL' || code === 'ENOTFOUND')
      throw new ConfigError('SLIPWAY_APPS_HOST', `${host} is not an address of this machine`);
    throw error;
  } finally {
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}

/**
 * Serves an upgrade that is not a WebSocket (`Upgrade: h2c` from `curl --http2`) as the plain HTTP/1.1
 * request it also is. Once a server has an 'upgrade' listener, Node hands it every request with an
 * Upgrade header, detached from the HTTP parser; so the request head is written back without its
 * upgrade headers and the socket is given to the server again, which parses it as if it had just arrived.
 */
function replayWithoutUpgrade(server: http.Server, req: IncomingMessage, socket: Duplex, head: Buffer): void {
  const dropped = new Set(['upgrade', 'http2-settings']);
  const lines = [`${req.method} ${req.url} HTTP/${req.httpVersion}`];
  for (let i = 0; i + 1 < req.rawHeaders.length; i += 2) {
    const name = req.rawHeaders[i]!;
    const value = req.rawHeaders[i + 1]!;
    const lower = name.toLowerCase();
    if (dropped.has(lower)) continue;
    if (lower === 'connection') {
      const kept = value
        .split(',')
        .map((t) => t.trim())
        .filter((t) => t !== '' && !dropped.has(t.toLowerCase()));
      if (kept.length > 0) lines.push(`${name}: ${kept.join(', ')}`);
      continue;
    }
    lines.push(`${name}: ${value}`);
  }
  socket.unshift(Buffer.concat([Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1'), head]));
  server.emit('connection', socket);
}

async function startBuiltinEdge(
  deps: AppEdgeDeps,
  forwardedProto: 'http' | 'https',
  traffic: TrafficSeries,
): Promise<AppEdge> {
  const { config, logger } = deps;
  const router = createAppRouter({
    appsDomain: config.appsDomain,
    logger,
    drainTimeoutMs: config.drainTimeoutMs,
    forwardedProto,
    traffic,
    threadPins: deps.threadPins ?? THREAD_PINS,
  });
  const notFound = 'No deployment is served at this host name.';
  const onRequest = (req: IncomingMessage, res: http.ServerResponse) => {
    if (!router.handle(req, res)) sendError(req, res, 404, 'not_found', notFound);
  };
  const server = config.appsTls
    ? https.createServer(
        {
          cert: await fs.readFile(config.appsTls.certFile),
          key: await fs.readFile(config.appsTls.keyFile),
        },
        onRequest,
      )
    : http.createServer(onRequest);
  server.keepAliveTimeout = 75_000;
  const limit = perClientConnections(config);
  if (limit !== null) {
    // By address (IPv6 by its /64, as the HAProxy edge counts): past the limit, closed at once.
    const open = new Map<string, number>();
    /** Sockets counted already: a plain request replayed after an h2c upgrade comes as a connection again. */
    const counted = new WeakSet<net.Socket>();
    server.on('connection', (socket: net.Socket) => {
      if (counted.has(socket)) return;
      counted.add(socket);
      const client = clientOf(socket.remoteAddress ?? '');
      const count = (open.get(client) ?? 0) + 1;
      if (count > limit) {
        socket.destroy();
        return;
      }
      open.set(client, count);
      socket.once('close', () => {
        const left = (open.get(client) ?? 1) - 1;
        if (left === 0) open.delete(client);
        else open.set(client, left);
      });
    });
  }
  server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    if (router.upgrade(req, socket, head)) return;
    if (req.headers.upgrade?.toLowerCase() === 'websocket') sendSocketError(req, socket, 404, 'not_found', notFound);
    else replayWithoutUpgrade(server, req, socket, head);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(config.appsPort, config.appsHost, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  const publicUrl = publicUrlOf(config, port);
  logger.warn(
    { edge: 'builtin', port, publicUrl },
    `apps are served by the built-in proxy at ${publicUrl} (install HAProxy for app traffic that stays off the API's CPU: docs/app-urls.md)`,
  );
  let closing: Promise<void> | null = null;
  return {
    kind: 'builtin',
    publicUrl,
    port,
    ...routesOf(router),
    stats: async () => router.stats(),
    traffic,
    requestLogCounts: () => null,
    threadPins: async () => router.threadPins(),
    close() {
      closing ??= (async () => {
        const closed = new Promise<void>((resolve) => server.close(() => resolve()));
        await router.close();
        server.closeAllConnections();
        await closed;
      })();
      return closing;
    },
  };
}
