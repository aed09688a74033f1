/**
 * Caps on long-lived requests (docs/api.md, "Streams and long-polls"): a followed log, a desired-state
 * long-poll or an OAuth wait holds a connection, a timer and database reads for as long as it is open,
 * so one key must not open hundreds of them and slow everyone else down.
 *
 * A route declares `config.longLived(request)`: true when this request will be held open (follow=true,
 * a long-poll that asks to wait). Such a request takes a slot of its credential (API key or listener
 * credential) and one of its client address before its handler runs, and gives both back when its
 * response closes, however it ends. Over either cap it is answered 429 `too_many_streams` with
 * Retry-After. The counts are this process's: each replica has its own.
 *
 * The address is the TCP peer's (no X-Forwarded-For is trusted): behind a reverse proxy every client
 * shares the proxy's address, and the per-address cap then bounds them together.
 */
import type { FastifyInstance, FastifyRequest, RouteOptions } from 'fastify';
import { AppError } from '../errors.ts';
import { errorResponses } from './schema-helpers.ts';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** True when this request will be held open (a stream, a long-poll that waits): it takes a slot. */
    longLived?: (request: FastifyRequest) => boolean;
  }
}

export interface StreamLimits {
  /** Open streams and long-polls per API key or listener credential. */
  perKey: number;
  /** Open streams and long-polls per client address. */
  perAddress: number;
}

/** What a refused client is told to wait: long enough for a stream of its own to end or be closed. */
const RETRY_AFTER_SECONDS = 5;

const RetryAfterHeader = {
  type: 'string',
  description: 'Seconds to wait before opening another stream or long-poll (or close one first).',
};

/** Counts per name; a name whose count drops to 0 is forgotten, so the map holds only open streams. */
function createCounter() {
  const counts = new Map<string, number>();
  return {
    get: (name: string) => counts.get(name) ?? 0,
    add(name: string): void {
      counts.set(name, (counts.get(name) ?? 0) + 1);
    },
    remove(name: string): void {
      const left = (counts.get(name) ?? 0) - 1;
      if (left > 0) counts.set(name, left);
      else counts.delete(name);
    },
  };
}

/** The credential a request spoke with: an API key, or a listener credential on the listener protocol. */
function credentialOf(request: FastifyRequest): string | null {
  if (request.listenerCredential) return `listener-credential:${request.listenerCredential.id}`;
  return request.caller ? `api-key:${request.caller.keyId}` : null;
}

/** A long-lived route's 429 in its schema (src/http/route-needs.ts calls it for routes that declare longLived). */
export function documentStreamLimit(route: RouteOptions): void {
  if (route.schema === undefined) return;
  const response = { ...(route.schema.response as Record<string, unknown> | undefined) };
  // The plain envelope plus Retry-After: the document shares it as the TooManyRequests response.
  response['429'] = { ...errorResponses(429)[429], headers: { 'Retry-After': RetryAfterHeader } };
  route.schema = { ...route.schema, response };
}

/** Counts and caps the open streams of routes that declare `longLived`. */
export function registerStreamLimits(app: FastifyInstance, limits: StreamLimits): void {
  const byKey = createCounter();
  const byAddress = createCounter();

  // After authentication and validation (the predicate reads the parsed query), before the handler.
  app.addHook('preHandler', async (request, reply) => {
    const longLived = request.routeOptions.config?.longLived;
    if (longLived === undefined || !longLived(request)) return;
    const key = credentialOf(request);
    const address = request.ip;
    if (key !== null && byKey.get(key) >= limits.perKey) {
      throw new AppError(
        'too_many_streams',
        `This credential already holds ${limits.perKey} open streams or long-polls, as many as allowed; close one first.`,
        { retryAfterSeconds: RETRY_AFTER_SECONDS },
      );
    }
    if (byAddress.get(address) >= limits.perAddress) {
      throw new AppError(
        'too_many_streams',
        `Your address already holds ${limits.perAddress} open streams or long-polls, as many as allowed; close one first.`,
        { retryAfterSeconds: RETRY_AFTER_SECONDS },
      );
    }
    // Gone before it started: nothing to hold (a 'close' already emitted would never release it).
    if (reply.raw.closed) return;
    if (key !== null) byKey.add(key);
    byAddress.add(address);
    // 'close' comes once the response is done or the connection is gone, whichever way the request ends
    // (a hijacked event stream included).
    reply.raw.once('close', () => {
      if (key !== null) byKey.remove(key);
      byAddress.remove(address);
    });
  });
}
