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
 * - If-Match is evaluated against the current representation, read through the resource's own GET
 *   route (an in-process request with the caller's credentials), so it can never disagree with what a
 *   GET shows. A resource that answers the GET with an error (404) answers the write with that error.
 * - Check and write are atomic against each other: a conditional write takes a PostgreSQL advisory lock
 *   named after the resource (transaction-level, in a transaction held open beside the request) before
 *   the check and keeps it until the write has committed and its answer is being sent. Two writes with
 *   the same If-Match, on any replicas, are serialized: the second sees the first one's ETag and gets
 *   412. A crashed replica's lock goes with its connection. Writes without If-Match take no lock and
 *   behave as before (the last one wins), as do the service's own status changes.
 * - Each held lock holds a pool connection, so at most LOCK_SLOTS are held per process: the rest of
 *   the pool stays free for the writes themselves, and conditional writes can never starve it.
 * - A PATCH or DELETE of a resource without a GET (an API key, a credential, a tag key) has no ETag to
 *   compare: If-Match there is refused with 412 rather than ignored, except `*`.
 */
import { createHash } from 'node:crypto';
import type {
  FastifyInstance,
  FastifyRequest,
  RouteOptions,
  onSendAsyncHookHandler,
  preHandlerAsyncHookHandler,
  preHandlerHookHandler,
} from 'fastify';
import { sql, type Kysely } from 'kysely';
import { AppError } from '../errors.ts';
import type { Database } from '../store/schema.ts';
import { scopeOf } from './idempotency.ts';
import { errorResponses } from './schema-helpers.ts';

/** Names Slipway's resource locks among other two-key advisory locks of the server ('SLWP'). */
const LOCK_CLASS = 0x534c5750;

/** Conditional writes holding (or waiting for) a resource lock at once, per process. */
export const LOCK_SLOTS = 4;

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

/** Process-wide slots, then a PostgreSQL advisory lock per resource, held until released. */
function createResourceLocks(db: Kysely<Database>) {
  let free = LOCK_SLOTS;
  const queue: (() => void)[] = [];
  const takeSlot = (): Promise<void> => {
    if (free > 0) {
      free -= 1;
      return Promise.resolve();
    }
    return new Promise((resolve) => queue.push(resolve));
  };
  const giveSlot = () => {
    const next = queue.shift();
    if (next) next();
    else free += 1;
  };
  return {
    /** Resolves once the lock on `name` is held; the function it gives releases it. */
    async acquire(name: string): Promise<() => Promise<void>> {
      await takeSlot();
      let unlock!: () => void;
      const unlocked = new Promise<void>((resolve) => (unlock = resolve));
      let locked!: () => void;
      const lockTaken = new Promise<void>((resolve) => (locked = resolve));
      // A transaction-level lock: committing (or losing the connection) always releases it, so no
      // pooled connection can ever go back to the pool still holding one.
      const held = db
        .transaction()
        .execute(async (tx) => {
          await sql`select pg_advisory_xact_lock(${LOCK_CLASS}, hashtext(${name}))`.execute(tx);
          locked();
          await unlocked;
        })
        .finally(giveSlot);
      // Its failure after the lock was taken reaches the caller through the release below.
      held.catch(() => undefined);
      await Promise.race([lockTaken, held]);
      return async () => {
        unlock();
        await held;
      };
    },
  };
}

/** The caller's credentials, for the GET that reads the current representation. */
const FORWARDED_HEADERS = ['x-api-key', 'authorization', 'x-tenant-id', 'x-request-id'];

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

export function registerConditionalRequests(app: FastifyInstance, db: Kysely<Database>): void {
  const locks = createResourceLocks(db);
  /** Routes (URL templates) whose GET answers one resource: the PATCH and DELETE there take If-Match. */
  const readable = new Set<string>();
  const held = new WeakMap<FastifyRequest, () => Promise<void>>();

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

  const checkIfMatch: preHandlerAsyncHookHandler = async (request, reply) => {
    const header = request.headers['if-match'];
    if (header === undefined) return;
    const params = JSON.stringify(request.params ?? {}).toLowerCase();
    held.set(request, await locks.acquire(`${scopeOf(request)} ${request.routeOptions.url} ${params}`));
    const headers: Record<string, string> = {};
    for (const name of FORWARDED_HEADERS) {
      const value = request.headers[name];
      if (typeof value === 'string') headers[name] = value;
    }
    const current = await app.inject({ method: 'GET', url: request.url.split('?')[0]!, headers });
    if (current.statusCode !== 200) {
      // The write would give the same answer (404 for a resource that is gone, 503 while the database is).
      for (const name of ['content-type', 'retry-after']) {
        const value = current.headers[name];
        if (value !== undefined) reply.header(name, value);
      }
      return reply.code(current.statusCode).send(current.body);
    }
    const etag = current.headers.etag;
    if (typeof etag !== 'string' || !ifMatchHolds(header, etag)) {
      throw new AppError(
        'precondition_failed',
        'The resource changed since the ETag in If-Match was read; nothing was changed. GET it again (its ETag is in the answer) and re-apply the change.',
      );
    }
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

  /** After the write committed (or failed), as its answer goes out: the next conditional write may check. */
  const releaseLock: onSendAsyncHookHandler = async (request, _reply, payload) => {
    const release = held.get(request);
    if (release !== undefined) {
      held.delete(request);
      // Ending the lock's transaction cannot undo the write, committed in its own; a failure here only
      // means the connection went, and the lock with it.
      await release().catch((error: unknown) =>
        request.log.warn({ err: error }, 'conditional request: the resource lock ended with an error'),
      );
    }
    return payload;
  };

  app.addHook('onRoute', function (this: FastifyInstance, route) {
    const auth = route.config?.auth ?? 'workspace';
    if (auth !== 'workspace' && auth !== 'organization') return;
    const methods = asArray(route.method);
    if (methods.length !== 1 || route.schema?.hide) return;
    const method = methods[0]!;
    const schema = route.schema ?? {};
    const response = { ...(schema.response as Record<string, unknown> | undefined) };
    const headerParams: Record<string, unknown> = {};
    const reads = method === 'GET' || method === 'HEAD';
    const resource = reads || method === 'POST' || method === 'PATCH' ? resourceSchema(this, route) : null;
    if (resource === null && method !== 'PATCH' && method !== 'DELETE') return;
    if (resource !== null) {
      // New objects: route schemas may be shared between routes.
      response[resource.status] = {
        ...resource.schema,
        headers: { ...(resource.schema.headers as object | undefined), ETag: ETagHeader },
      };
      // First on a HEAD route: Fastify's own onSend hook there drops the body this hashes.
      route.onSend = method === 'HEAD' ? [tag, ...asArray(route.onSend)] : [...asArray(route.onSend), tag];
      if (reads) {
        if (method === 'GET') readable.add(route.url);
        headerParams['if-none-match'] = IfNoneMatchHeader;
        response['304'] ??= { type: 'null', description: 'Not modified: the ETag in If-None-Match is current.' };
      }
    }
    if (method === 'PATCH' || method === 'DELETE') {
      if (readable.has(route.url)) {
        headerParams['if-match'] = IfMatchHeader;
        Object.assign(response, { ...errorResponses(412), ...response });
        route.preHandler = [...asArray(route.preHandler), checkIfMatch];
        route.onSend = [...asArray(route.onSend), releaseLock];
      } else {
        headerParams['if-match'] = IfMatchStarHeader;
        Object.assign(response, { ...errorResponses(412), ...response });
        route.preHandler = [...asArray(route.preHandler), refuseIfMatch];
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
  });
}
