/**
 * Budgets of long-lived requests (docs/api.md, "Streams and long-polls"): a followed log, a desired-state
 * long-poll or an OAuth wait holds a connection, a timer and database reads for as long as it is open,
 * so each tenant has its own share and none can take everyone's (issue 33: one shared per-address cap
 * was first come, first served for every app and every fleet behind one proxy).
 *
 * A route declares `config.longLived(request)`: true when this request will be held open (follow=true,
 * a long-poll that asks to wait). Before its handler runs, such a request takes a slot of each budget it
 * belongs to, and gives them back when its response closes, however it ends:
 * - its credential's (API key or listener credential) and its workspace's;
 * - its deployment's, when it comes from an app through the app's own way to the API (src/http/app-connections.ts:
 *   known from the connection itself, never from anything the client sends);
 * - its client address's, only when it has no credential and is no app's (the address is the TCP peer's,
 *   or the client a trusted proxy names: SLIPWAY_TRUSTED_PROXIES, Fastify's trustProxy).
 * Over any of them it is answered 429 `too_many_streams` with Retry-After, naming the budget. The counts
 * are this process's: each replica has its own.
 */
import type { FastifyInstance, FastifyRequest, RouteOptions } from 'fastify';
import type { StreamBudgets } from '../config.ts';
import { AppError } from '../errors.ts';
import type { AppConnections } from './app-connections.ts';
import { errorResponses } from './schema-helpers.ts';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** True when this request will be held open (a stream, a long-poll that waits): it takes a slot. */
    longLived?: (request: FastifyRequest) => boolean;
  }
}

export type StreamLimits = StreamBudgets;

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

/** The workspace a request acts in (an organization key on an organization route: none). */
function workspaceOf(request: FastifyRequest): string | null {
  return request.listenerCredential?.workspace_id ?? request.caller?.workspaceId ?? null;
}

/** One budget: whose slot a request takes (null: it takes none of this budget), how many, and the refusal. */
interface Budget {
  slotOf(request: FastifyRequest): string | null;
  max: number;
  refusal: string;
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
export function registerStreamLimits(
  app: FastifyInstance,
  limits: StreamLimits,
  apps: Pick<AppConnections, 'originOf'>,
): void {
  const origin = (request: FastifyRequest) => apps.originOf(request.raw.socket);
  const budgets: Budget[] = [
    {
      slotOf: credentialOf,
      max: limits.perKey,
      refusal: `This credential already holds ${limits.perKey} open streams or long-polls, as many as allowed; close one first.`,
    },
    {
      slotOf: workspaceOf,
      max: limits.perWorkspace,
      refusal: `This workspace's keys and listeners already hold ${limits.perWorkspace} open streams or long-polls, as many as allowed; close one first.`,
    },
    {
      slotOf: (request) => origin(request)?.deploymentId ?? null,
      max: limits.perDeployment,
      refusal: `This deployment's app already holds ${limits.perDeployment} open streams or long-polls, as many as allowed; close one first.`,
    },
    {
      // Anonymous callers only: keyed callers have their own shares, whoever else is on their address.
      slotOf: (request) => (credentialOf(request) === null && origin(request) === null ? (request.ip ?? '') : null),
      max: limits.perAddress,
      refusal: `Your address already holds ${limits.perAddress} open streams or long-polls, as many as allowed; close one first.`,
    },
  ];
  const counters = budgets.map(() => createCounter());

  // After authentication and validation (the predicate reads the parsed query), before the handler.
  app.addHook('preHandler', async (request, reply) => {
    const longLived = request.routeOptions.config?.longLived;
    if (longLived === undefined || !longLived(request)) return;
    const slots = budgets.map((budget) => budget.slotOf(request));
    for (const [i, budget] of budgets.entries()) {
      const slot = slots[i];
      if (slot !== null && slot !== undefined && counters[i]!.get(slot) >= budget.max)
        throw new AppError('too_many_streams', budget.refusal, { retryAfterSeconds: RETRY_AFTER_SECONDS });
    }
    // Gone before it started: nothing to hold (a 'close' already emitted would never release it).
    if (reply.raw.closed) return;
    const held = slots.flatMap((slot, i) =>
      slot === null || slot === undefined ? [] : [[counters[i]!, slot] as const],
    );
    for (const [counter, slot] of held) counter.add(slot);
    // 'close' comes once the response is done or the connection is gone, whichever way the request ends
    // (a hijacked event stream included).
    reply.raw.once('close', () => {
      for (const [counter, slot] of held) counter.remove(slot);
    });
  });
}
