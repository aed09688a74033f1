/**
 * What a route needs, declared where the route is declared (docs/architecture.md, "Routes"): its route
 * options carry `config: needs({...})`, so reading a route file tells all of it:
 *
 * - `auth` (and `admin`): who may call it (src/http/authenticate.ts; docs/api.md, "Who may do what").
 * - `idempotent`: an Idempotency-Key makes a retry get the first answer (src/http/idempotency.ts).
 * - `etag`: the answer is one resource, tagged with its ETag; on a GET, If-None-Match (304).
 * - `ifMatch`: on a PATCH or DELETE, If-Match is compared, in the write's transaction, with the
 *   resource as its GET answers it, or only `*` is taken where there is no GET
 *   (src/http/conditional-requests.ts). The handler passes `request.precondition` to its write.
 * - `longLived`: the request holds a stream open and takes a slot (src/http/stream-limits.ts).
 * - Shown-once fields are declared in the route's own response schema (`ShownOnceString`,
 *   src/http/shown-once.ts): such answers are no-store, and never kept for a retry.
 *
 * `registerRouteNeeds` wires each declaration into its route, in one place and one fixed order
 * (shown-once before idempotency, which must see no-store; idempotency before If-Match, so that a
 * replay answers before a precondition is checked), whatever order the modules are registered in. A
 * documented route (not hidden) that declares nothing fails the start, so nothing is attached by a rule
 * from a distance.
 */
import type { FastifyContextConfig, FastifyInstance, FastifyRequest, RouteOptions, onSendHookHandler } from 'fastify';
import type { Clock } from '../clock.ts';
import type { Db } from '../store/schema.ts';
import { createConditionalRequests, type IfMatch } from './conditional-requests.ts';
import { createIdempotencyKeys, idempotentRoute } from './idempotency.ts';
import { applyShownOnce } from './shown-once.ts';
import { documentStreamLimit } from './stream-limits.ts';

export interface RouteNeeds {
  /** An API key acting in a workspace, in its organization, a listener credential, or nobody. */
  auth: 'workspace' | 'organization' | 'listener' | 'none';
  /** The admin role: `true` an admin key, `'organization'` an organization admin key. */
  admin?: boolean | 'organization';
  /** A POST or PATCH with a JSON body opened with an API key: Idempotency-Key is honoured. */
  idempotent?: boolean;
  /** The answer (200 or 201) is one resource with an ETag. */
  etag?: boolean;
  /** A PATCH or DELETE: what If-Match is compared with. */
  ifMatch?: IfMatch;
  /** True when this request will be held open (a stream, a long-poll that waits): it takes a slot. */
  longLived?: (request: FastifyRequest) => boolean;
}

declare module 'fastify' {
  interface FastifyContextConfig {
    idempotent?: boolean;
    etag?: boolean;
    ifMatch?: IfMatch;
    /** Set by `needs`: the route declares what it needs. */
    declared?: true;
  }
}

/** A route's `config`: what it needs, declared with it. */
export function needs(declared: RouteNeeds & Omit<FastifyContextConfig, keyof RouteNeeds>): FastifyContextConfig {
  return { ...declared, declared: true };
}

const asArray = <T>(value: T | T[] | undefined): T[] =>
  value === undefined ? [] : Array.isArray(value) ? value : [value];

/**
 * `forgetKeys`: from registerAuthentication, after every admin write (keys change only through those).
 * `now`: the service's clock (AppDeps.now), which idempotency keys' TTL, leases and waits go by when given.
 */
export function registerRouteNeeds(
  app: FastifyInstance,
  db: Db,
  auth: { forgetKeys: onSendHookHandler },
  now?: Clock,
): void {
  const idempotency = createIdempotencyKeys(db, now);
  const conditional = createConditionalRequests(app);

  app.addHook('onRoute', function (this: FastifyInstance, route: RouteOptions) {
    const config = route.config ?? {};
    const methods = asArray(route.method);
    if (config.declared !== true && !route.schema?.hide)
      throw new Error(
        `${methods.join(',')} ${route.url}: declare what the route needs with config: needs({...}) (src/http/route-needs.ts)`,
      );
    const declared = { idempotent: config.idempotent ?? false, etag: config.etag ?? false, ifMatch: config.ifMatch };
    if (declared.idempotent && !idempotentRoute(route))
      throw new Error(
        `${methods.join(',')} ${route.url}: idempotent is for a POST or PATCH with a JSON body and an API key`,
      );
    // An admin write may have revoked a key: the key cache forgets. Not the listener protocol, whose
    // agents' heartbeats change no key and must not empty the cache.
    if (config.admin && config.auth !== 'listener' && methods.some((m) => m !== 'GET' && m !== 'HEAD'))
      route.onSend = [...asArray(route.onSend), auth.forgetKeys];
    applyShownOnce(route);
    if (declared.idempotent) idempotency.attach(route);
    conditional.attach(this, route, declared);
    if (config.longLived !== undefined) documentStreamLimit(route);
  });
}
