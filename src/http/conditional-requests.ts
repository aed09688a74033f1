/**
 * Conditional requests (docs/api.md, "Conditional requests"): ETags on single resources, `If-Match` on
 * their PATCH and DELETE (412 `precondition_failed` when the resource changed), `If-None-Match` on their
 * GET (304). Without those headers nothing changes.
 *
 * Design:
 * - The ETag is a strong validator: the SHA-256 of the resource's JSON representation, the exact bytes
 *   of the answer. Every route that answers one resource (a GET, a create, a patch: a 200 or 201 whose
 *   schema has an `id`) tags its answer, so a PATCH's ETag is the ETag a GET gives next. No version
 *   column to keep in step in every table and store function; the price is that a change the service
 *   makes itself (a deployment's status, a listener's last_seen_at) changes the ETag too, which is
 *   true: the representation changed.
 * - What a route takes is declared with the route (src/http/route-needs.ts): `etag: true` on a route
 *   that answers one resource, `ifMatch` on its PATCH and DELETE.
 * - If-Match is checked inside the write's own transaction, under the resource's row lock: a PATCH or
 *   DELETE of a resource with a GET declares `ifMatch` (the representation its GET answers, read
 *   through a given transaction); when the request carries If-Match, `request.precondition` reads
 *   it, serializes it with the GET's own response schema, hashes it and compares. The route passes
 *   `request.precondition` to its service, which runs it right after `select ... for update` of the row
 *   and before changing anything (src/service/preconditions.ts). So check and write are atomic against
 *   every other writer of the row, conditional or not, on any replica: a writer that locked the row
 *   first has committed when the check reads it. A resource that is gone is 404 as without If-Match.
 * - A PATCH or DELETE of a resource without a GET (an API key, a credential, a tag key) has no ETag to
 *   compare: If-Match there is refused with 412 rather than ignored, except `*`.
 */
import { createHash } from 'node:crypto';
import type {
  FastifyInstance,
  FastifyReply,
  FastifyRequest,
  RouteOptions,
  onSendAsyncHookHandler,
  preHandlerHookHandler,
} from 'fastify';
import { AppError } from '../errors.ts';
import type { Precondition } from '../service/preconditions.ts';
import type { Db } from '../store/schema.ts';
import { errorResponses } from './schema-helpers.ts';

/**
 * If-Match on a PATCH or DELETE: the resource as its GET answers it, read through `tx` (the write's
 * transaction, with the row locked), to compare with; or 'only-star' where the resource has no GET (so no
 * ETag): If-Match other than `*` is refused.
 */
export type IfMatch = ((request: FastifyRequest, tx: Db) => Promise<object>) | 'only-star';

declare module 'fastify' {
  interface FastifyRequest {
    /** Set when the request carries If-Match on a route that declares `ifMatch`: the route passes it to its write. */
    precondition: Precondition | undefined;
  }
}

/** The ETag of a JSON representation: a strong validator. */
export function entityTag(representation: string | Buffer): string {
  return `"${createHash('sha256').update(representation).digest('base64url')}"`;
}

/** The entity tags of an If-Match or If-None-Match header; `*` stays `*`. */
function entityTags(header: string): string[] {
  return header
    .split(',')
    .map((tag) => tag.trim())
    .filter((tag) => tag !== '');
}

/** If-Match: strong comparison (a weak tag never matches). */
export function ifMatchHolds(header: string, current: string): boolean {
  return entityTags(header).some((tag) => tag === '*' || tag === current);
}

/** If-None-Match: weak comparison. True when the client's copy is current. */
function noneMatchFails(header: string, current: string): boolean {
  const bare = (tag: string) => tag.replace(/^W\//, '');
  return entityTags(header).some((tag) => tag === '*' || bare(tag) === bare(current));
}

const asArray = <T>(hooks: T | T[] | undefined): T[] =>
  hooks === undefined ? [] : Array.isArray(hooks) ? hooks : [hooks];

type SchemaObject = { $ref?: string; properties?: Record<string, unknown> } & Record<string, unknown>;

/** The 200 or 201 schema of a route when it is one resource (an object with an `id`), else null. */
function resourceSchema(
  instance: FastifyInstance,
  route: RouteOptions,
): { status: string; schema: SchemaObject } | null {
  const responses = (route.schema?.response ?? {}) as Record<string, SchemaObject | undefined>;
  for (const status of ['200', '201']) {
    let schema = responses[status];
    if (schema === undefined) continue;
    if (typeof schema.$ref === 'string')
      schema = instance.getSchema(schema.$ref.replace(/#.*$/, '')) as SchemaObject | undefined;
    return schema?.properties?.id !== undefined ? { status, schema: responses[status]! } : null;
  }
  return null;
}

const IfMatchHeader = {
  type: 'string',
  description:
    'ETag(s) the resource must still have (from its GET or the answer of its last write); else 412 precondition_failed and nothing changes. `*`: the resource must exist.',
};
const IfNoneMatchHeader = {
  type: 'string',
  description: 'The ETag of the copy the client has: 304 without a body when it is still current.',
};
const IfMatchStarHeader = {
  type: 'string',
  description:
    'Only `*` (the resource must exist): this resource has no ETag, so any other value is 412 precondition_failed and nothing changes.',
};
const ETagHeader = {
  type: 'string',
  // Always sent: `tag` below sets it on every 200 and 201 of a resource (src/http/openapi.ts moves this
  // onto the header itself, where OpenAPI reads it).
  required: true,
  description:
    'Strong validator of this representation: send it in If-Match to write only if nothing changed since, or in If-None-Match to re-read cheaply.',
};

const PRECONDITION_FAILED =
  'The resource changed since the ETag in If-Match was read; nothing was changed. GET it again (its ETag is in the answer) and re-apply the change.';

/**
 * The check of `header` (If-Match) against the resource as `current` reads it in the write's
 * transaction, serialized exactly as its GET answers it (`schema`, the GET's 200 schema).
 */
function ifMatchPrecondition(
  request: FastifyRequest,
  reply: FastifyReply,
  header: string,
  current: (request: FastifyRequest, tx: Db) => Promise<object>,
  schema: object,
): Precondition {
  return async (tx) => {
    const representation = reply.serializeInput(
      (await current(request, tx)) as Record<string, unknown>,
      schema as Record<string, unknown>,
    );
    if (!ifMatchHolds(header, entityTag(representation)))
      throw new AppError('precondition_failed', PRECONDITION_FAILED);
  };
}

/** Conditional requests; `attach` wires what a route declares into it (src/http/route-needs.ts). */
export function createConditionalRequests(app: FastifyInstance): {
  attach(instance: FastifyInstance, route: RouteOptions, declared: { etag: boolean; ifMatch?: IfMatch }): void;
} {
  /** Routes (URL templates) whose GET answers one resource, with that GET's 200 schema. */
  const readable = new Map<string, object>();
  app.decorateRequest('precondition', undefined);

  /** Tags a single resource's answer; a GET whose If-None-Match is current becomes 304. */
  const tag: onSendAsyncHookHandler = async (request, reply, payload) => {
    if ((reply.statusCode !== 200 && reply.statusCode !== 201) || reply.getHeader('etag') !== undefined) return payload;
    if (typeof payload !== 'string' && !Buffer.isBuffer(payload)) return payload;
    const etag = entityTag(payload);
    reply.header('etag', etag);
    const noneMatch = request.headers['if-none-match'];
    if (
      (request.method === 'GET' || request.method === 'HEAD') &&
      typeof noneMatch === 'string' &&
      noneMatchFails(noneMatch, etag)
    ) {
      reply.code(304);
      reply.removeHeader('content-type');
      reply.removeHeader('content-length');
      // No body. A HEAD route's own hook, which runs next, measures a string (null would throw there).
      return request.method === 'HEAD' ? '' : null;
    }
    return payload;
  };

  /** Refuses If-Match where there is no ETag to compare: ignoring it would write unconditionally. */
  const refuseIfMatch: preHandlerHookHandler = (request, _reply, done) => {
    const header = request.headers['if-match'];
    if (header !== undefined && header.trim() !== '*') {
      done(
        new AppError(
          'precondition_failed',
          'This resource has no ETag (it has no GET of its own), so If-Match cannot hold; send the request without it.',
        ),
      );
      return;
    }
    done();
  };

  const attach = (
    instance: FastifyInstance,
    route: RouteOptions,
    declared: { etag: boolean; ifMatch?: IfMatch },
  ): void => {
    const methods = asArray(route.method);
    const method = methods[0]!;
    if (declared.etag === false && declared.ifMatch === undefined) return;
    if (methods.length !== 1) throw new Error(`${route.url}: conditional requests need a route of one method`);
    const schema = route.schema ?? {};
    const response = { ...(schema.response as Record<string, unknown> | undefined) };
    const headerParams: Record<string, unknown> = {};
    const reads = method === 'GET' || method === 'HEAD';
    if (declared.etag) {
      const resource = resourceSchema(instance, route);
      if (resource === null)
        throw new Error(`${method} ${route.url}: etag needs a 200 or 201 answer of one resource (with an id)`);
      // New objects: route schemas may be shared between routes.
      response[resource.status] = {
        ...resource.schema,
        headers: { ...(resource.schema.headers as object | undefined), ETag: ETagHeader },
      };
      // First on a HEAD route: Fastify's own onSend hook there drops the body this hashes.
      route.onSend = method === 'HEAD' ? [tag, ...asArray(route.onSend)] : [...asArray(route.onSend), tag];
      if (reads) {
        if (method === 'GET') readable.set(route.url, resource.schema);
        headerParams['if-none-match'] = IfNoneMatchHeader;
        response['304'] ??= { type: 'null', description: 'Not modified: the ETag in If-None-Match is current.' };
      }
    }
    const ifMatch = declared.ifMatch;
    if (ifMatch !== undefined) {
      if (method !== 'PATCH' && method !== 'DELETE')
        throw new Error(`${method} ${route.url}: ifMatch is for PATCH and DELETE`);
      const getSchema = readable.get(route.url);
      if (ifMatch === 'only-star') {
        // A write that ignored If-Match would do it unconditionally: it must compare with the GET's ETag.
        if (getSchema !== undefined)
          throw new Error(
            `${method} ${route.url}: its resource has a GET with an ETag; declare ifMatch with the resource`,
          );
        headerParams['if-match'] = IfMatchStarHeader;
        Object.assign(response, { ...errorResponses(412), ...response });
        route.preHandler = [...asArray(route.preHandler), refuseIfMatch];
      } else {
        if (getSchema === undefined)
          throw new Error(`${method} ${route.url}: ifMatch needs the resource's GET (declared etag) before it`);
        headerParams['if-match'] = IfMatchHeader;
        Object.assign(response, { ...errorResponses(412), ...response });
        const prepare: preHandlerHookHandler = (request, reply, done) => {
          const header = request.headers['if-match'];
          if (header !== undefined)
            request.precondition = ifMatchPrecondition(request, reply, header, ifMatch, getSchema);
          done();
        };
        route.preHandler = [...asArray(route.preHandler), prepare];
      }
    }
    const headers = schema.headers as { properties?: Record<string, unknown> } | undefined;
    route.schema = {
      ...schema,
      response,
      ...(Object.keys(headerParams).length > 0
        ? { headers: { ...headers, type: 'object', properties: { ...headers?.properties, ...headerParams } } }
        : {}),
    };
  };

  return { attach };
}
