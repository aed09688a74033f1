/**
 * The reverse proxy in front of deployed apps. Each app process listens on its own 127.0.0.1 port; the
 * router gives it stable URLs on the service's own port (see app-urls.ts) and switches between
 * instances without losing requests: `setTargets` changes the table at once and then waits for the
 * requests already sent to the old instances, so the caller stops those only when they are idle.
 *
 * Proxying itself is http-proxy-3 (streaming, WebSockets); this module adds the routing table, the
 * in-flight accounting behind the drain, retries that are safe, and error answers in the API's shape.
 */
import { randomUUID } from 'node:crypto';
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { Readable, type Duplex } from 'node:stream';
import { TLSSocket } from 'node:tls';
import type { FastifyServerFactory } from 'fastify';
import { createProxyServer } from 'http-proxy-3';
import type { Logger } from 'pino';
import type { ErrorCode } from '../errors.ts';
import { redactUrl } from '../logger.ts';
import { slugFromHost, slugFromPath } from './app-urls.ts';

/** An app process listening on 127.0.0.1:port. */
export interface AppTarget {
  instanceId: string;
  port: number;
}

export interface AppRouter {
  /**
   * Routes the slug to these targets (round-robin). The table changes at once; the promise resolves when
   * every request that was in flight to targets no longer listed has finished, or after drainTimeoutMs.
   */
  setTargets(slug: string, targets: AppTarget[], options?: { drainTimeoutMs?: number }): Promise<void>;
  /** Stops routing the slug; resolves when its in-flight requests are drained (or the timeout). */
  remove(slug: string, options?: { drainTimeoutMs?: number }): Promise<void>;
  targets(slug: string): AppTarget[];
  /** Handles the request when it is for an app (Host `<slug>.<appsDomain>` or path `/apps/<slug>/...`); returns false otherwise so the API handles it. */
  handle(req: IncomingMessage, res: ServerResponse): boolean;
  /** Same for WebSocket upgrades; other upgrades (h2c) return false and are served as plain requests. */
  upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): boolean;
  /**
   * Stops serving apps (503 from then on): open WebSockets are closed at once, in-flight requests get
   * drainTimeoutMs to finish and are cut after that. Idempotent.
   */
  close(): Promise<void>;
}

export interface AppRouterOptions {
  appsDomain: string;
  logger: Logger;
  /** Default wait for in-flight requests in setTargets, remove and close. */
  drainTimeoutMs: number;
  /**
   * The service's public URL (SLIPWAY_PUBLIC_URL). Its scheme becomes X-Forwarded-Proto on plain
   * connections, so apps behind a TLS-terminating proxy in front of Slipway see `https`.
   */
  publicUrl?: string;
}

/** One target with what is in flight to it: the drain waits for both sets to empty. */
interface Backend {
  readonly target: AppTarget;
  readonly url: string;
  readonly responses: Set<ServerResponse>;
  /** Upgraded (WebSocket) connections; they can live for hours, so drains wait for them only up to the timeout. */
  readonly sockets: Set<Duplex>;
  readonly idleWaiters: (() => void)[];
}

interface Route {
  backends: Backend[];
  next: number;
}

interface AppRequest {
  slug: string;
  /** `/apps/<slug>` for path-based requests, null for host-based ones. */
  prefix: string | null;
  /** The path and query the app sees. */
  url: string;
}

const REQUEST_ID = /^[\x21-\x7e]{1,200}$/;
/**
 * Methods sent again after a reset on a reused keep-alive socket. Such a reset mostly means the app closed
 * the idle socket as the request went out, but the app may have seen it: so only methods without side
 * effects (RFC 9110, 9.2.1).
 */
const IDEMPOTENT = new Set(['GET', 'HEAD', 'OPTIONS']);
/** Response headers about the app's connection to us, not the client's to us (RFC 9110, 7.6.1). */
const HOP_BY_HOP = ['connection', 'keep-alive', 'proxy-connection'];

/** Routers made here, with the hook their server factory needs (a fake router simply lacks it). */
const serverHooks = new WeakMap<AppRouter, { serverClosing(): void }>();

function requestId(req: IncomingMessage): string {
  const given = req.headers['x-request-id'];
  return typeof given === 'string' && REQUEST_ID.test(given) ? given : randomUUID();
}

function errorBody(detail: string, code: ErrorCode): string {
  return JSON.stringify({ detail, code });
}

function sendError(req: IncomingMessage, res: ServerResponse, status: number, code: ErrorCode, detail: string): void {
  if (res.headersSent) {
    // Part of the app's answer is out: cut it so the client sees a broken response, not a hang.
    res.destroy();
    return;
  }
  if (res.destroyed || res.writableEnded) return;
  const body = errorBody(detail, code);
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(body), 'x-request-id': requestId(req) });
  res.end(body);
}

/** The same answer on a raw socket, for upgrades that cannot go through. */
function sendSocketError(req: IncomingMessage, socket: Duplex, status: number, code: ErrorCode, detail: string): void {
  if (socket.destroyed || !socket.writable) return;
  const body = errorBody(detail, code);
  socket.once('finish', () => socket.destroy());
  socket.end(
    `HTTP/1.1 ${status} ${http.STATUS_CODES[status] ?? ''}\r\n` +
      `content-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\n` +
      `x-request-id: ${requestId(req)}\r\nconnection: close\r\n\r\n${body}`,
  );
}

/** The app's response headers without the hop-by-hop ones (and the framing Node redoes for the client). */
function responseHeaders(proxyRes: IncomingMessage): http.OutgoingHttpHeaders {
  const listed = proxyRes.headers.connection;
  const skip = new Set([...HOP_BY_HOP, 'transfer-encoding', ...(listed ?? '').split(',').map((t) => t.trim().toLowerCase())]);
  const headers: http.OutgoingHttpHeaders = {};
  for (const [name, value] of Object.entries(proxyRes.headers)) if (value !== undefined && !skip.has(name)) headers[name] = value;
  return headers;
}

function errorCode(error: unknown): string {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : 'EPROXY';
}

/** A request without Content-Length or Transfer-Encoding has no body (RFC 9112, 6.3), so it can be sent again. */
function hasBody(req: IncomingMessage): boolean {
  const length = req.headers['content-length'];
  return req.headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0');
}

function isWebSocket(req: IncomingMessage): boolean {
  return req.method === 'GET' && req.headers.upgrade?.toLowerCase() === 'websocket';
}

function isIdle(backend: Backend): boolean {
  return backend.responses.size === 0 && backend.sockets.size === 0;
}

function settle(backend: Backend): void {
  if (isIdle(backend)) for (const wake of backend.idleWaiters.splice(0)) wake();
}

function whenIdle(backend: Backend): Promise<void> {
  return isIdle(backend) ? Promise.resolve() : new Promise((resolve) => backend.idleWaiters.push(resolve));
}

function targetKey(target: AppTarget): string {
  return `${target.instanceId}@${target.port}`;
}

export function createAppRouter(options: AppRouterOptions): AppRouter {
  const { appsDomain, logger } = options;
  const publicProto = options.publicUrl === undefined ? 'http' : new URL(options.publicUrl).protocol.replace(/:$/, '');
  const routes = new Map<string, Route>();
  /** Every backend that is routed to or still draining, for close(). */
  const backends = new Set<Backend>();
  // Keep-alive to the apps saves a connection (and a TIME_WAIT socket) per request. The timeout frees
  // idle sockets before the usual 5 s server keep-alive ends them; Node also honours the app's
  // `Keep-Alive: timeout=` hint. It does not cut active requests: streams may idle for long.
  const agent = new http.Agent({ keepAlive: true, timeout: 4_000 });
  const proxy = createProxyServer({ agent, selfHandleResponse: true });
  /** The latest upstream request of each response, to tell a stale keep-alive socket from a real failure. */
  const upstreamOf = new WeakMap<ServerResponse, http.ClientRequest>();
  let closing: Promise<void> | null = null;

  proxy.on('proxyReq', (proxyReq, _req, res) => {
    upstreamOf.set(res, proxyReq);
  });
  // Responses are copied here rather than by http-proxy's passes, which would pass on the app's
  // Connection and Keep-Alive headers: `Connection: close` from an app would close the client's
  // keep-alive connection to us. The app's own response object stays untouched: Node's agent reads
  // its Keep-Alive hint.
  proxy.on('proxyRes', (proxyRes, _req, res) => {
    // An app that dies mid-answer ends its response without completing it; without this the client
    // would wait for the rest forever.
    proxyRes.once('close', () => {
      if (!proxyRes.complete) res.destroy();
    });
    if (res.destroyed || res.headersSent) {
      proxyRes.resume();
      return;
    }
    try {
      res.writeHead(proxyRes.statusCode ?? 502, proxyRes.statusMessage || undefined, responseHeaders(proxyRes));
    } catch (error) {
      // Thrown inside http-proxy's response handler it would take the process down.
      logger.warn({ err: error }, 'app response could not be passed on');
      proxyRes.destroy();
      res.destroy();
      return;
    }
    // Each chunk goes out as the app writes it (pipe does not buffer): SSE and chunked streams work.
    proxyRes.pipe(res);
  });
  // Errors that reach no callback (a client socket failing during a WebSocket proxy): never crash.
  proxy.on('error', (error, req, resOrSocket) => {
    logger.debug({ err: error, url: redactUrl(req.url ?? '') }, 'app proxy error');
    if (resOrSocket instanceof http.ServerResponse) sendError(req, resOrSocket, 502, 'bad_gateway', 'The deployment did not answer.');
    else resOrSocket.destroy();
  });

  function newBackend(target: AppTarget): Backend {
    const backend: Backend = { target: { ...target }, url: `http://127.0.0.1:${target.port}`, responses: new Set(), sockets: new Set(), idleWaiters: [] };
    backends.add(backend);
    return backend;
  }

  /** Resolves when the backends are idle or the time is up; a busy one at the end is logged, not failed. */
  async function drain(slug: string, draining: Backend[], timeoutMs: number): Promise<void> {
    const busy = draining.filter((b) => !isIdle(b));
    const forget = () => {
      for (const b of draining) if (isIdle(b)) backends.delete(b);
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
        { slug, instances: left.map((b) => ({ instanceId: b.target.instanceId, requests: b.responses.size, websockets: b.sockets.size })), drainTimeoutMs: timeoutMs },
        'app instances still busy when the drain time ran out',
      );
      // Once their last connection ends nothing refers to them; until then close() may still cut them.
      for (const b of left) void whenIdle(b).then(() => backends.delete(b));
    }
    forget();
  }

  function match(req: IncomingMessage): AppRequest | null {
    const bySlug = slugFromHost(req.headers.host, appsDomain);
    if (bySlug !== null) return { slug: bySlug, prefix: null, url: req.url ?? '/' };
    const byPath = slugFromPath(req.url);
    if (byPath !== null) return { slug: byPath.slug, prefix: `/apps/${byPath.slug}`, url: byPath.rest };
    return null;
  }

  /** Round-robin over the route, skipping targets that already refused this request. */
  function pick(route: Route, refused: ReadonlySet<Backend>): Backend | null {
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

  /**
   * X-Forwarded-* as this service saw the request. For and the prior hops are kept (apps pick how many
   * to trust); Proto, Host and Prefix are set here, so a client cannot make an app build links to a host
   * or prefix of its choosing.
   */
  function setForwardedHeaders(req: IncomingMessage, app: AppRequest): void {
    const headers = req.headers;
    const client = req.socket.remoteAddress ?? '';
    const prior = headers['x-forwarded-for'];
    headers['x-forwarded-for'] = prior ? `${prior}, ${client}` : client;
    headers['x-forwarded-proto'] = req.socket instanceof TLSSocket && req.socket.encrypted ? 'https' : publicProto;
    if (headers.host !== undefined) headers['x-forwarded-host'] = headers.host;
    else delete headers['x-forwarded-host'];
    delete headers['x-forwarded-port'];
    if (app.prefix !== null) headers['x-forwarded-prefix'] = app.prefix;
    else delete headers['x-forwarded-prefix'];
    req.url = app.url;
  }

  function forward(req: IncomingMessage, res: ServerResponse, slug: string, refused: Set<Backend>, attempt: number): void {
    const route = routes.get(slug);
    const backend = route === undefined ? null : pick(route, refused);
    if (backend === null) {
      return sendError(req, res, 502, 'bad_gateway', `Deployment ${slug} did not answer: none of its instances accepted the connection.`);
    }
    backend.responses.add(res);
    let done = false;
    const release = () => {
      if (done) return;
      done = true;
      backend.responses.delete(res);
      settle(backend);
    };
    res.once('close', release);
    const bodyless = !hasBody(req);
    // A bodyless request is sent from an empty stream, so a retry does not depend on `req` being unread.
    const failed = (error: unknown) => {
      if (done) return; // the client went away, or another error of this attempt was already handled
      release();
      const code = errorCode(error);
      const log = { slug, instanceId: backend.target.instanceId, port: backend.target.port, code, method: req.method, url: redactUrl(req.url ?? '') };
      // (Not req.destroyed: a request whose body was read to the end is destroyed too.)
      if (res.destroyed || req.socket.destroyed) return logger.debug(log, 'app request ended by the client');
      // Safe to send again only when the app cannot have seen it: a refused connection, or a kept-alive
      // socket the app had just closed (for methods without side effects).
      const refusedNow = code === 'ECONNREFUSED';
      const stale = (code === 'ECONNRESET' || code === 'EPIPE') && upstreamOf.get(res)?.reusedSocket === true && IDEMPOTENT.has(req.method ?? '');
      if (bodyless && !res.headersSent && (refusedNow || stale) && attempt <= (route?.backends.length ?? 0)) {
        if (refusedNow) refused.add(backend);
        logger.debug(log, 'app instance did not take the request; trying again');
        return forward(req, res, slug, refused, attempt + 1);
      }
      logger.warn(log, 'app request failed');
      const reason = refusedNow ? 'its instance refused the connection' : `the connection to its instance failed (${code})`;
      sendError(req, res, 502, 'bad_gateway', `Deployment ${slug} did not answer: ${reason}.`);
    };
    try {
      proxy.web(req, res, { target: backend.url, ...(bodyless ? { buffer: Readable.from([]) } : {}) }, failed);
    } catch (error) {
      // http.request throws at once on a request it cannot send (a path it refuses); answer, not crash.
      failed(error);
    }
  }

  function serve(req: IncomingMessage, res: ServerResponse, app: AppRequest): void {
    if (closing !== null) return sendError(req, res, 503, 'unavailable', 'The service is shutting down; retry shortly.');
    const route = routes.get(app.slug);
    if (route === undefined) return sendError(req, res, 404, 'not_found', `No deployment is served at ${app.slug}.`);
    if (app.prefix !== null && !app.url.startsWith('/')) {
      // The app's relative links only resolve under the prefix with its trailing slash.
      res.writeHead(308, { location: `${app.prefix}/${app.url}`, 'content-length': 0 });
      res.end();
      return;
    }
    if (route.backends.length === 0) return sendError(req, res, 503, 'unavailable', `Deployment ${app.slug} has no running instance yet; retry shortly.`);
    setForwardedHeaders(req, app);
    forward(req, res, app.slug, new Set(), 1);
  }

  function proxyWebSocket(req: IncomingMessage, socket: Duplex, head: Buffer, app: AppRequest, backend: Backend): void {
    // Browsers do not follow redirects on a WebSocket handshake: `/apps/<slug>` is the app's root.
    setForwardedHeaders(req, app.url.startsWith('/') ? app : { ...app, url: `/${app.url}` });
    backend.sockets.add(socket);
    socket.once('close', () => {
      backend.sockets.delete(socket);
      settle(backend);
    });
    const failed = (error: unknown) => {
      const code = errorCode(error);
      logger.warn({ slug: app.slug, instanceId: backend.target.instanceId, port: backend.target.port, code }, 'app WebSocket failed');
      // Before the 101 the client still waits for an HTTP answer; after it, closing is all there is.
      if ((socket as Partial<Socket>).bytesWritten === 0) {
        const reason = code === 'ECONNREFUSED' ? 'its instance refused the connection' : `the connection to its instance failed (${code})`;
        sendSocketError(req, socket, 502, 'bad_gateway', `Deployment ${app.slug} did not answer: ${reason}.`);
      } else {
        socket.destroy();
      }
    };
    try {
      proxy.ws(req, socket, head, { target: backend.url, agent: false }, failed);
    } catch (error) {
      failed(error);
    }
  }

  const router: AppRouter = {
    setTargets(slug, targets, opts) {
      const invalid = targets.find((t) => !Number.isInteger(t.port) || t.port < 1 || t.port > 65535);
      if (invalid !== undefined) return Promise.reject(new Error(`app target ${invalid.instanceId} has no valid port (${invalid.port}); the route is unchanged`));
      const route = routes.get(slug) ?? { backends: [], next: 0 };
      const current = new Map(route.backends.map((b) => [targetKey(b.target), b]));
      const next = new Map<string, Backend>();
      for (const target of targets) {
        const key = targetKey(target);
        if (!next.has(key)) next.set(key, current.get(key) ?? newBackend(target));
      }
      const removed = route.backends.filter((b) => !next.has(targetKey(b.target)));
      route.backends = [...next.values()];
      route.next = route.backends.length === 0 ? 0 : route.next % route.backends.length;
      routes.set(slug, route);
      logger.debug({ slug, targets: route.backends.map((b) => b.target), draining: removed.map((b) => b.target) }, 'app route set');
      return drain(slug, removed, opts?.drainTimeoutMs ?? options.drainTimeoutMs);
    },

    remove(slug, opts) {
      const route = routes.get(slug);
      if (route === undefined) return Promise.resolve();
      routes.delete(slug);
      logger.debug({ slug }, 'app route removed');
      return drain(slug, route.backends, opts?.drainTimeoutMs ?? options.drainTimeoutMs);
    },

    targets(slug) {
      return (routes.get(slug)?.backends ?? []).map((b) => ({ ...b.target }));
    },

    handle(req, res) {
      const app = match(req);
      if (app === null) return false;
      try {
        serve(req, res, app);
      } catch (error) {
        logger.error({ err: error, slug: app.slug }, 'app request failed in the router');
        sendError(req, res, 500, 'internal', 'Internal server error');
      }
      return true;
    },

    upgrade(req, socket, head) {
      if (!isWebSocket(req)) return false;
      const app = match(req);
      if (app === null) return false;
      socket.on('error', (error) => logger.debug({ err: error, slug: app.slug }, 'app WebSocket client error'));
      const route = closing === null ? routes.get(app.slug) : undefined;
      const backend = route === undefined ? null : pick(route, new Set());
      if (closing !== null) sendSocketError(req, socket, 503, 'unavailable', 'The service is shutting down; retry shortly.');
      else if (route === undefined) sendSocketError(req, socket, 404, 'not_found', `No deployment is served at ${app.slug}.`);
      else if (backend === null) sendSocketError(req, socket, 503, 'unavailable', `Deployment ${app.slug} has no running instance yet; retry shortly.`);
      else proxyWebSocket(req, socket, head, app, backend);
      return true;
    },

    close() {
      closing ??= (async () => {
        for (const backend of backends) for (const socket of backend.sockets) socket.destroy();
        const busy = [...backends];
        let timer: NodeJS.Timeout | undefined;
        await Promise.race([Promise.all(busy.map(whenIdle)), new Promise<void>((resolve) => (timer = setTimeout(resolve, options.drainTimeoutMs)))]);
        clearTimeout(timer);
        for (const backend of busy) for (const res of backend.responses) res.destroy();
        routes.clear();
        backends.clear();
        agent.destroy();
      })();
      return closing;
    },
  };
  serverHooks.set(router, { serverClosing: () => void router.close() });
  return router;
}

/**
 * Serves an upgrade that is not a WebSocket for an app (the API's, or an `Upgrade: h2c` from
 * `curl --http2`) as the plain HTTP/1.1 request it also is. Once a server has an 'upgrade' listener,
 * Node hands it every request with an Upgrade header, detached from the HTTP parser; so the request
 * head is written back without its upgrade headers and the socket is given to the server again, which
 * parses it as if it had just arrived (body, keep-alive and all).
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
      const kept = value.split(',').map((t) => t.trim()).filter((t) => t !== '' && !dropped.has(t.toLowerCase()));
      if (kept.length > 0) lines.push(`${name}: ${kept.join(', ')}`);
      continue;
    }
    lines.push(`${name}: ${value}`);
  }
  socket.unshift(Buffer.concat([Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1'), head]));
  server.emit('connection', socket);
}

function numberOption(opts: Record<string, unknown>, name: string): number | undefined {
  const value = opts[name];
  return typeof value === 'number' ? value : undefined;
}

/**
 * A Fastify `serverFactory` that offers each request and upgrade to the router first; what it declines
 * goes to Fastify unchanged. It makes the HTTP/1.1 server Fastify would have made, with the same
 * timeouts. Closing the server closes the router too: WebSockets are cut (the server would otherwise
 * wait for them forever) and app requests get the router's drainTimeoutMs.
 */
export function appServerFactory(router: AppRouter): FastifyServerFactory {
  return (handler, opts) => {
    if (opts.https || opts.http2) throw new Error('appServerFactory serves plain HTTP/1.1; terminate TLS in front of Slipway');
    const httpOptions = (typeof opts.http === 'object' && opts.http !== null ? opts.http : {}) as http.ServerOptions;
    const server = http.createServer(httpOptions, (req, res) => {
      if (!router.handle(req, res)) handler(req, res);
    });
    // Fastify sets these only on servers it makes itself.
    const keepAliveTimeout = numberOption(opts, 'keepAliveTimeout');
    const requestTimeout = numberOption(opts, 'requestTimeout');
    const connectionTimeout = numberOption(opts, 'connectionTimeout');
    const maxRequestsPerSocket = numberOption(opts, 'maxRequestsPerSocket');
    if (keepAliveTimeout !== undefined) server.keepAliveTimeout = keepAliveTimeout;
    if (requestTimeout !== undefined) server.requestTimeout = requestTimeout;
    if (connectionTimeout !== undefined) server.setTimeout(connectionTimeout);
    if (maxRequestsPerSocket !== undefined && maxRequestsPerSocket > 0) server.maxRequestsPerSocket = maxRequestsPerSocket;

    server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
      if (router.upgrade(req, socket, head)) return;
      // Another upgrade listener (a WebSocket plugin) owns what the router declines.
      if (server.listenerCount('upgrade') > 1) return;
      replayWithoutUpgrade(server, req, socket, head);
    });

    const hooks = serverHooks.get(router);
    if (hooks !== undefined) {
      const close = server.close.bind(server);
      server.close = (callback?: (error?: Error) => void) => {
        hooks.serverClosing();
        return close(callback);
      };
    }
    return server;
  };
}
