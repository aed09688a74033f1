/**
 * Idempotent retries (docs/api.md, "Idempotent retries"): a POST or PATCH of the API sent with an
 * `Idempotency-Key` header is done at most once per key; a retry with the same key and the same request
 * gets the first answer again, marked `Idempotent-Replayed: true`. So a CLI or CI job that retries after
 * a timeout never makes two deployments or two revisions.
 *
 * - Scope: the workspace the request acts in (the API key's, or the one X-Tenant-Id picks); an
 *   organization route called without a workspace uses the organization. Keys live 24 hours.
 * - A key belongs to one request: method, path and body (as the service reads it: key order and the
 *   fields it ignores do not count). Another request with it is 422 `idempotency_key_mismatch`.
 * - While the first request runs, a retry waits for its answer (up to IDEMPOTENCY_WAIT_MS), then gives
 *   up with 409 `idempotency_key_in_progress` and Retry-After.
 * - Only 2xx answers are kept. An error answer changed nothing (every write is one transaction that an
 *   error rolls back), so the key is released and a retry runs afresh; a 5xx or a crash never poisons
 *   a key. A 2xx marked `Cache-Control: no-store` holds a credential shown once: it is not stored, and a
 *   retry gets 409 `idempotency_response_not_kept` instead of a second credential. Routes declare such
 *   answers in their response schema (src/http/shown-once.ts), which src/http/route-needs.ts wires in
 *   first, so that a handler cannot forget the header.
 *
 * Claiming is one INSERT ... ON CONFLICT on the key's primary key (src/store/idempotency-keys.ts), so
 * of concurrent requests on any number of replicas exactly one runs. Waiting polls the row: retries are
 * rare and short, so a poll every few dozen milliseconds costs less than a LISTEN connection.
 *
 * The routes: each POST or PATCH opened with an API key whose body is JSON declares `idempotent: true`
 * (src/http/route-needs.ts). Not the listener protocol (its reports are idempotent by design), webhooks
 * or the OAuth callback, and not POST /v2/uploads, whose body is a stream (a repeated upload only leaves
 * an unused upload that retention removes).
 */
import { createHash } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type {
  FastifyReply,
  FastifyRequest,
  RouteOptions,
  onSendAsyncHookHandler,
  preHandlerAsyncHookHandler,
} from 'fastify';
import type { Clock } from '../clock.ts';
import { AppError, ValidationError } from '../errors.ts';
import {
  claimIdempotencyKey,
  completeIdempotencyKey,
  releaseIdempotencyKey,
  type KeyRef,
  type StoredResponse,
} from '../store/idempotency-keys.ts';
import type { Db } from '../store/schema.ts';
import { errorResponses } from './schema-helpers.ts';

export const IDEMPOTENCY_KEY_HEADER = 'idempotency-key';
export const REPLAYED_HEADER = 'idempotent-replayed';

/** How long a retry waits for the first request with its key to finish before answering 409. */
export const IDEMPOTENCY_WAIT_MS = 10_000;

/** 1 to 255 printable ASCII characters (a UUID is the usual choice). */
export const IdempotencyKeySchema = {
  type: 'string',
  minLength: 1,
  maxLength: 255,
  pattern: '^[\\x20-\\x7e]+$',
  description:
    'Makes the request safe to retry: a retry with the same key (1 to 255 printable ASCII characters, e.g. a UUID) and the same request within 24 hours gets the first answer again, with Idempotent-Replayed: true, instead of doing the work twice (docs/api.md, "Idempotent retries").',
};

/** Headers of a kept answer that a replay gives again (the ETag is computed again from the body). */
const KEPT_HEADERS = ['content-type', 'location'];

/** Whose key it is: the workspace the request acts in, else (organization routes) the organization. */
export function scopeOf(request: FastifyRequest): string {
  const { caller } = request;
  return caller.workspaceId !== null ? `workspace:${caller.workspaceId}` : `organization:${caller.organizationId}`;
}

/** JSON with object keys sorted: two bodies that differ only in key order are one request. */
function canonicalJson(value: unknown): string {
  if (value === undefined) return '';
  if (Array.isArray(value))
    return `[${value.map((item) => (item === undefined ? 'null' : canonicalJson(item))).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const object = value as Record<string, unknown>;
    return `{${Object.keys(object)
      .filter((key) => object[key] !== undefined)
      .sort()
      .map((key) => `${JSON.stringify(key)}:${canonicalJson(object[key])}`)
      .join(',')}}`;
  }
  return JSON.stringify(value);
}

/**
 * What a key is bound to. Taken after validation: the body is then bounded in depth (validation.ts)
 * and holds only the fields the service reads.
 */
function fingerprintOf(request: FastifyRequest): Buffer {
  return createHash('sha256').update(`${request.method} ${request.url}\n`).update(canonicalJson(request.body)).digest();
}

const asArray = <T>(hooks: T | T[] | undefined): T[] =>
  hooks === undefined ? [] : Array.isArray(hooks) ? hooks : [hooks];

/** A POST or PATCH opened with an API key, with a JSON body: what may declare `idempotent: true`. */
export function idempotentRoute(route: RouteOptions): boolean {
  const methods = asArray(route.method);
  if (!methods.every((m) => m === 'POST' || m === 'PATCH')) return false;
  const auth = route.config?.auth ?? 'workspace';
  if (auth !== 'workspace' && auth !== 'organization') return false;
  // A body documented by media type without JSON (an upload) reaches the handler as a stream.
  const content = (route.schema?.body as { content?: Record<string, unknown> } | undefined)?.content;
  return content === undefined || 'application/json' in content;
}

const ReplayedHeader = {
  type: 'string',
  enum: ['true'],
  description: 'Present on a retry with an Idempotency-Key that got the first answer again instead of doing the work.',
};
const RetryAfterHeader = {
  type: 'string',
  description: 'With idempotency_key_in_progress: seconds to wait before retrying to get the first answer.',
};

type ResponseSchema = { headers?: Record<string, unknown> } & Record<string, unknown>;

/** The documented answers of an idempotent route: its 2xx may be replays, its 409 may say when to retry. */
function documentedResponses(declared: Record<string, unknown> | undefined): Record<string, unknown> {
  const response: Record<string, unknown> = { ...errorResponses(409, 422), ...declared };
  for (const [status, schema] of Object.entries(response)) {
    if (schema === null || typeof schema !== 'object') continue;
    const header = /^2\d\d$/.test(status)
      ? { 'Idempotent-Replayed': ReplayedHeader }
      : status === '409'
        ? { 'Retry-After': RetryAfterHeader }
        : null;
    if (header === null) continue;
    const current = schema as ResponseSchema;
    response[status] = { ...current, headers: { ...current.headers, ...header } };
  }
  return response;
}

/**
 * Idempotent retries over `db`; `attach` wires them into a route that declares them. `clock` (the
 * service's, src/clock.ts) dates keys and leases and times a retry's wait; without one, keys and leases
 * go by the database's `now()` and the wait by this process's monotonic time. A test passes a clock it
 * moves, to make a key, a lease or a wait run out without waiting.
 */
export function createIdempotencyKeys(db: Db, clock?: Clock): { attach(route: RouteOptions): void } {
  /** The attempt each request runs, when it claimed a key. */
  const attempts = new WeakMap<FastifyRequest, { ref: KeyRef; claim: string }>();
  /** Milliseconds for the retry's wait: only differences between two readings count. */
  const elapsedMs = clock === undefined ? () => performance.now() : () => clock().getTime();

  const replay = (reply: FastifyReply, response: StoredResponse) => {
    if (response.body === null) {
      throw new AppError(
        'idempotency_response_not_kept',
        `The request with this Idempotency-Key was done (status ${response.status}), but its answer held a credential that is shown only once, so it was not kept. List the resources to find what it made; use a new key to make another.`,
      );
    }
    reply.code(response.status);
    for (const [name, value] of Object.entries(response.headers)) reply.header(name, value);
    reply.header(REPLAYED_HEADER, 'true');
    return reply.send(response.body === '' ? undefined : response.body);
  };

  const claimOrReplay: preHandlerAsyncHookHandler = async (request, reply) => {
    const key = request.headers[IDEMPOTENCY_KEY_HEADER];
    // The route's header schema has checked the key's format.
    if (typeof key !== 'string') return;
    const ref = { scope: scopeOf(request), key };
    const fingerprint = fingerprintOf(request);
    const deadline = elapsedMs() + IDEMPOTENCY_WAIT_MS;
    for (let pause = 20; ; pause = Math.min(pause * 2, 250)) {
      const state = await claimIdempotencyKey(db, ref, fingerprint, clock);
      if (state.kind === 'claimed') {
        attempts.set(request, { ref, claim: state.claim });
        return;
      }
      if (state.kind !== 'gone' && !state.fingerprint.equals(fingerprint)) {
        throw new ValidationError(
          [
            {
              type: 'idempotency_key_mismatch',
              loc: ['header', IDEMPOTENCY_KEY_HEADER],
              msg: 'This Idempotency-Key was used in the last 24 hours for another request (method, path or body); use a new key for a new request',
              input: key,
            },
          ],
          'idempotency_key_mismatch',
        );
      }
      if (state.kind === 'done') return replay(reply, state.response);
      if (elapsedMs() >= deadline) {
        throw new AppError(
          'idempotency_key_in_progress',
          'A request with this Idempotency-Key is still running; retry it after Retry-After to get its answer.',
          { retryAfterSeconds: 1 },
        );
      }
      // 'gone': the first attempt failed and released the key just now; claim again at once.
      if (state.kind === 'running') await sleep(pause);
    }
  };

  const finish: onSendAsyncHookHandler = async (request, reply, payload) => {
    const attempt = attempts.get(request);
    if (attempt === undefined) return payload;
    attempts.delete(request);
    const status = reply.statusCode;
    try {
      if (status < 200 || status >= 300) {
        await releaseIdempotencyKey(db, attempt.ref, attempt.claim);
        return payload;
      }
      const headers: Record<string, string> = {};
      for (const name of KEPT_HEADERS) {
        const value = reply.getHeader(name);
        if (value !== undefined) headers[name] = String(value);
      }
      const secret = /(^|,)\s*no-store\s*(,|$)/i.test(String(reply.getHeader('cache-control') ?? ''));
      // A stream cannot be kept either: like a secret, its retry is told the request was done.
      const body = secret
        ? null
        : payload === null || payload === undefined
          ? ''
          : typeof payload === 'string'
            ? payload
            : Buffer.isBuffer(payload)
              ? payload.toString('utf8')
              : null;
      if (!(await completeIdempotencyKey(db, attempt.ref, attempt.claim, { status, headers, body }, clock))) {
        request.log.warn(
          { idempotency_key: attempt.ref.key },
          'idempotency: the key was taken over before this request finished (it ran longer than the lease)',
        );
      }
    } catch (error) {
      // The work is done and its answer is on its way: failing the response now would invite a retry
      // that does it again. The key stays running until its lease ends (IDEMPOTENCY_LEASE_SECONDS).
      request.log.error({ err: error, idempotency_key: attempt.ref.key }, 'idempotency: could not record the answer');
    }
    return payload;
  };

  const attach = (route: RouteOptions): void => {
    const schema = route.schema ?? {};
    const headers = (schema.headers ?? { type: 'object' }) as { properties?: Record<string, unknown> };
    const response = documentedResponses(schema.response as Record<string, unknown> | undefined);
    // New objects: route schemas may be shared between routes.
    route.schema = {
      ...schema,
      headers: {
        ...headers,
        type: 'object',
        properties: { ...headers.properties, [IDEMPOTENCY_KEY_HEADER]: IdempotencyKeySchema },
      },
      response,
    };
    route.preHandler = [...asArray(route.preHandler), claimOrReplay];
    route.onSend = [...asArray(route.onSend), finish];
  };
  return { attach };
}
