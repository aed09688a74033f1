/**
 * The HTTP server of the service when it serves apps too: each request and upgrade is offered to the
 * app router (src/dataplane/app-router.ts) before Fastify sees it.
 */
import http, { type IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { FastifyServerFactory } from 'fastify';
import type { AppRouter } from './app-router.ts';

/** Routers made by createAppRouter, with the hook their server factory needs (a fake router simply lacks it). */
export const serverHooks = new WeakMap<AppRouter, { serverClosing(): void }>();

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
    if (opts.https || opts.http2)
      throw new Error('appServerFactory serves plain HTTP/1.1; terminate TLS in front of Slipway');
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
    if (maxRequestsPerSocket !== undefined && maxRequestsPerSocket > 0)
      server.maxRequestsPerSocket = maxRequestsPerSocket;

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
