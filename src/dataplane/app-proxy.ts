/**
 * The proxying half of the app router (src/dataplane/app-router.ts): a request or WebSocket for an app,
 * once routed, goes to one of its instances through http-proxy-3 (streaming, WebSockets), with the
 * X-Forwarded-* headers this service owns, retries only where the app cannot have seen the request, and
 * the in-flight accounting the drain waits on.
 */
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { Readable, type Duplex } from 'node:stream';
import { TLSSocket } from 'node:tls';
import { createProxyServer } from 'http-proxy-3';
import type { Logger } from 'pino';
import { redactUrl } from '../logger.ts';
import { pick, servedBy, settle, splitCookieOf, type Backend, type Route } from './app-backends.ts';
import { sendError, sendSocketError } from './app-error-answers.ts';
import { SERVICE_COOKIE_NAME_PATTERN, SERVICE_CREDENTIAL_PATTERN } from './edge-haproxy-config.ts';

/** A request for an app, as the router matched it. */
export interface AppRequest {
  slug: string;
  /** The path and query the app sees. */
  url: string;
  /** The table's route that serves it when not the slug's own: a traffic split's second revision. */
  route?: string;
}

/**
 * Methods sent again after a reset on a reused keep-alive socket. Such a reset mostly means the app closed
 * the idle socket as the request went out, but the app may have seen it: so only methods without side
 * effects (RFC 9110, 9.2.1).
 */
const IDEMPOTENT = new Set(['GET', 'HEAD', 'OPTIONS']);
/** Response headers about the app's connection to us, not the client's to us (RFC 9110, 7.6.1). */
const HOP_BY_HOP = ['connection', 'keep-alive', 'proxy-connection'];
/** Response headers an app may not send: they would widen what its pages may do (a service worker's scope). */
const WIDENING = ['service-worker-allowed'];

/** The app's response headers without the hop-by-hop ones (and the framing Node redoes for the client). */
function responseHeaders(proxyRes: IncomingMessage): http.OutgoingHttpHeaders {
  const listed = proxyRes.headers.connection;
  const skip = new Set([
    ...HOP_BY_HOP,
    ...WIDENING,
    'transfer-encoding',
    ...(listed ?? '').split(',').map((t) => t.trim().toLowerCase()),
  ]);
  const headers: http.OutgoingHttpHeaders = {};
  for (const [name, value] of Object.entries(proxyRes.headers))
    if (value !== undefined && !skip.has(name)) headers[name] = value;
  return headers;
}

function errorCode(error: unknown): string {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : 'EPROXY';
}

/** A credential of this service in a header value: the same rule as the HAProxy edge's. */
const SERVICE_CREDENTIAL = new RegExp(SERVICE_CREDENTIAL_PATTERN, 'i');

function isServiceCredential(value: string | string[] | undefined): boolean {
  // Node joins a repeated X-Api-Key with commas: a key in any of the parts counts.
  return value !== undefined && [value].flat().some((v) => v.split(',').some((part) => SERVICE_CREDENTIAL.test(part)));
}

/**
 * A pair of the Cookie header that holds a service cookie: by its name, or after a comma (a proxy in front
 * that joins Cookie lines with commas makes `a=1, slipway_session=...` one pair); such a pair goes whole,
 * as the HAProxy edge drops the whole header.
 */
const SERVICE_COOKIE = new RegExp(`(^|,)\\s*${SERVICE_COOKIE_NAME_PATTERN}`);

/** The Cookie header without the service's own cookies; undefined when none is left. */
function withoutServiceCookies(header: string): string | undefined {
  const kept = header.split(';').filter((pair) => pair.trim() !== '' && !SERVICE_COOKIE.test(pair));
  return kept.length > 0 ? kept.map((pair) => pair.trim()).join('; ') : undefined;
}

/** A request without Content-Length or Transfer-Encoding has no body (RFC 9112, 6.3), so it can be sent again. */
function hasBody(req: IncomingMessage): boolean {
  const length = req.headers['content-length'];
  return req.headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0');
}

export interface AppProxyOptions {
  logger: Logger;
  /** X-Forwarded-Proto on plain connections. */
  forwardedProto: 'http' | 'https';
  /** The router's table, read on every attempt: a retry goes to the instances routed at that moment. */
  routes: ReadonlyMap<string, Route>;
}

export interface AppProxy {
  /** Sends a routed request to one of the route's instances (the route has at least one). */
  web(req: IncomingMessage, res: ServerResponse, app: AppRequest): void;
  /** Sends a WebSocket handshake to `backend`, and the connection's traffic after it. */
  ws(req: IncomingMessage, socket: Duplex, head: Buffer, app: AppRequest, backend: Backend): void;
  /** Closes the kept-alive connections to the apps. */
  close(): void;
}

/**
 * X-Forwarded-* as this service saw the request. For and the prior hops are kept (apps pick how many
 * to trust); Proto and Host are set here, so a client cannot make an app build links to a host of its
 * choosing. The service's own credentials never reach an app.
 */
function setForwardedHeaders(req: IncomingMessage, app: AppRequest, forwardedProto: 'http' | 'https'): void {
  const headers = req.headers;
  const client = req.socket.remoteAddress ?? '';
  const prior = headers['x-forwarded-for'];
  headers['x-forwarded-for'] = prior ? `${String(prior)}, ${client}` : client;
  headers['x-forwarded-proto'] = req.socket instanceof TLSSocket && req.socket.encrypted ? 'https' : forwardedProto;
  if (headers.host !== undefined) headers['x-forwarded-host'] = headers.host;
  else delete headers['x-forwarded-host'];
  delete headers['x-forwarded-port'];
  delete headers['x-forwarded-prefix'];
  if (isServiceCredential(headers['x-api-key'])) delete headers['x-api-key'];
  if (isServiceCredential(headers.authorization)) delete headers.authorization;
  // Node joins repeated Cookie headers with '; '.
  if (headers.cookie !== undefined) {
    const cookie = withoutServiceCookies(headers.cookie);
    if (cookie === undefined) delete headers.cookie;
    else headers.cookie = cookie;
  }
  req.url = app.url;
}

export function createAppProxy(options: AppProxyOptions): AppProxy {
  const { logger, routes } = options;
  // Keep-alive to the apps saves a connection (and a TIME_WAIT socket) per request. The timeout frees
  // idle sockets before the usual 5 s server keep-alive ends them; Node also honours the app's
  // `Keep-Alive: timeout=` hint. It does not cut active requests: streams may idle for long.
  const agent = new http.Agent({ keepAlive: true, timeout: 4_000 });
  const proxy = createProxyServer({ agent, selfHandleResponse: true });
  /** The latest upstream request of each response, to tell a stale keep-alive socket from a real failure. */
  const upstreamOf = new WeakMap<ServerResponse, http.ClientRequest>();
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
      const headers = responseHeaders(proxyRes);
      // A traffic split's cookie, beside the app's own cookies.
      const cookie = splitCookieOf.get(res);
      if (cookie !== undefined) headers['set-cookie'] = [...[headers['set-cookie'] ?? []].flat().map(String), cookie];
      res.writeHead(proxyRes.statusCode ?? 502, proxyRes.statusMessage || undefined, headers);
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
    if (resOrSocket instanceof http.ServerResponse)
      sendError(req, resOrSocket, 502, 'bad_gateway', 'The deployment did not answer.');
    else resOrSocket.destroy();
  });

  function forward(
    req: IncomingMessage,
    res: ServerResponse,
    slug: string,
    refused: Set<Backend>,
    attempt: number,
  ): void {
    const route = routes.get(slug);
    const backend = route === undefined ? null : pick(route, refused);
    if (backend === null) {
      return sendError(
        req,
        res,
        502,
        'bad_gateway',
        `Deployment ${slug} did not answer: none of its instances accepted the connection.`,
      );
    }
    backend.responses.add(res);
    servedBy.set(res, backend.target);
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
      const log = {
        slug,
        instanceId: backend.target.instanceId,
        port: backend.target.port,
        code,
        method: req.method,
        url: redactUrl(req.url ?? ''),
      };
      // (Not req.destroyed: a request whose body was read to the end is destroyed too.)
      if (res.destroyed || req.socket.destroyed) return logger.debug(log, 'app request ended by the client');
      // Safe to send again only when the app cannot have seen it: a refused connection, or a kept-alive
      // socket the app had just closed (for methods without side effects).
      const refusedNow = code === 'ECONNREFUSED';
      const stale =
        (code === 'ECONNRESET' || code === 'EPIPE') &&
        upstreamOf.get(res)?.reusedSocket === true &&
        IDEMPOTENT.has(req.method ?? '');
      if (bodyless && !res.headersSent && (refusedNow || stale) && attempt <= (route?.backends.length ?? 0)) {
        if (refusedNow) refused.add(backend);
        logger.debug(log, 'app instance did not take the request; trying again');
        return forward(req, res, slug, refused, attempt + 1);
      }
      logger.warn(log, 'app request failed');
      const reason = refusedNow
        ? 'its instance refused the connection'
        : `the connection to its instance failed (${code})`;
      sendError(req, res, 502, 'bad_gateway', `Deployment ${slug} did not answer: ${reason}.`);
    };
    try {
      proxy.web(req, res, { target: backend.url, ...(bodyless ? { buffer: Readable.from([]) } : {}) }, failed);
    } catch (error) {
      // http.request throws at once on a request it cannot send (a path it refuses); answer, not crash.
      failed(error);
    }
  }

  function proxyWebSocket(req: IncomingMessage, socket: Duplex, head: Buffer, app: AppRequest, backend: Backend): void {
    // Browsers do not follow redirects on a WebSocket handshake: `/apps/<slug>` is the app's root.
    setForwardedHeaders(req, app.url.startsWith('/') ? app : { ...app, url: `/${app.url}` }, options.forwardedProto);
    backend.sockets.add(socket);
    socket.once('close', () => {
      backend.sockets.delete(socket);
      settle(backend);
    });
    const failed = (error: unknown) => {
      const code = errorCode(error);
      logger.warn(
        { slug: app.slug, instanceId: backend.target.instanceId, port: backend.target.port, code },
        'app WebSocket failed',
      );
      // Before the 101 the client still waits for an HTTP answer; after it, closing is all there is.
      if ((socket as Partial<Socket>).bytesWritten === 0) {
        const reason =
          code === 'ECONNREFUSED'
            ? 'its instance refused the connection'
            : `the connection to its instance failed (${code})`;
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

  return {
    web(req, res, app) {
      setForwardedHeaders(req, app, options.forwardedProto);
      forward(req, res, app.route ?? app.slug, new Set(), 1);
    },
    ws: proxyWebSocket,
    close() {
      agent.destroy();
    },
  };
}
