/**
 * Credentials shown once (a new API key, a listener or agent credential, a webhook secret, an upload
 * URL's token): an answer that holds one must be kept by nobody, neither an HTTP cache nor the
 * Idempotency-Key store (src/http/idempotency.ts), which keeps 2xx answers in plain text for 24 hours.
 *
 * The declaration is in the response schema: a field made with `ShownOnceString` (schema-helpers.ts) carries the keyword
 * `x-shown-once: true`, which the OpenAPI document shows. `applyShownOnce` reads it from the route's schema
 * (src/http/route-needs.ts calls it for every route):
 * an answer of such a route that holds one of those fields is sent with `Cache-Control: no-store` (and
 * the document says so), and the idempotency layer does not keep an answer marked no-store. So a new
 * credential field needs only its schema; no handler has to remember the header. A route whose answer
 * holds the field only sometimes (a patch that rotates a secret) gets no-store only then, so its other
 * answers can still be replayed.
 */
import type { RouteOptions, onSendAsyncHookHandler } from 'fastify';

/** The schema keyword of a field shown once (schema-helpers.ts: `ShownOnceString`). */
export const SHOWN_ONCE = 'x-shown-once';

type Node = Record<string, unknown>;
const isNode = (value: unknown): value is Node => value !== null && typeof value === 'object' && !Array.isArray(value);

/** Where shown-once fields sit in an answer of `schema` (property names from the root; objects only). */
export function shownOncePaths(schema: unknown, path: string[] = [], out: string[][] = []): string[][] {
  if (!isNode(schema) || path.length > 8) return out;
  if (schema[SHOWN_ONCE] === true) {
    out.push(path);
    return out;
  }
  if (isNode(schema.properties))
    for (const [name, sub] of Object.entries(schema.properties)) shownOncePaths(sub, [...path, name], out);
  for (const keyword of ['anyOf', 'oneOf', 'allOf']) {
    const subs = schema[keyword];
    if (Array.isArray(subs)) for (const sub of subs) shownOncePaths(sub, path, out);
  }
  return out;
}

function holds(value: unknown, path: string[]): boolean {
  let node = value;
  for (const name of path) {
    if (!isNode(node)) return false;
    node = node[name];
  }
  return node !== undefined && node !== null;
}

const CacheControlHeader = {
  type: 'string',
  description: 'no-store when this answer holds a credential shown once (x-shown-once): keep it nowhere.',
};

const asArray = <T>(hooks: T | T[] | undefined): T[] =>
  hooks === undefined ? [] : Array.isArray(hooks) ? hooks : [hooks];

/** Marks the route's answers that hold a shown-once field (by its own response schema) no-store. */
export function applyShownOnce(route: RouteOptions): void {
  const responses = route.schema?.response as Record<string, unknown> | undefined;
  if (responses === undefined) return;
  const byStatus = new Map<number, string[][]>();
  const response = { ...responses };
  for (const [status, schema] of Object.entries(responses)) {
    if (!/^2\d\d$/.test(status) || !isNode(schema)) continue;
    const paths = shownOncePaths(schema);
    if (paths.length === 0) continue;
    byStatus.set(Number(status), paths);
    response[status] = {
      ...schema,
      headers: { ...(schema.headers as object | undefined), 'Cache-Control': CacheControlHeader },
    };
  }
  if (byStatus.size === 0) return;
  const noStore: onSendAsyncHookHandler = async (_request, reply, payload) => {
    const paths = byStatus.get(reply.statusCode);
    if (paths === undefined) return payload;
    let body: unknown;
    try {
      body =
        typeof payload === 'string' || Buffer.isBuffer(payload) ? (JSON.parse(payload.toString()) as unknown) : null;
    } catch {
      // Unreadable: assume the worst.
      reply.header('cache-control', 'no-store');
      return payload;
    }
    if (paths.some((path) => holds(body, path))) reply.header('cache-control', 'no-store');
    return payload;
  };
  // First, so that the idempotency layer's own onSend hook (which decides what it keeps) sees it.
  route.onSend = [noStore, ...asArray(route.onSend)];
  // A new object: route schemas may be shared between routes.
  route.schema = { ...route.schema, response };
}
