/**
 * What the OpenAPI document (/openapi.json) says beyond each route's own schema, so that no route has to
 * repeat it (docs/api.md, "The OpenAPI document"):
 *
 * - `registerOpenApiConventions`, an onRoute hook: routes without an API key (`config.auth: 'none'`)
 *   document `security: []` unless they name their own scheme; every operation lists 400 (a request
 *   the HTTP parser or the router refuses, `malformed_request`, before any route runs), 422 (a
 *   refused X-Field-Validation or, with `Strict`, an unknown field: unknown-fields.ts), 500 and 503
 *   (the database unreachable, or the server shutting down; with Retry-After), and every operation
 *   whose method carries a body lists 413, 415 and 422, with the error envelope. Those are answers the
 *   service (src/http/error-handler.ts, src/http/framework-answers.ts) can give on any route.
 * - `documentOptionalBodies`: an operation of such a method that reads no body documents an optional,
 *   ignored JSON body (an empty body with `Content-Type: application/json` is taken, src/http/json-body.ts).
 * - `shapeDocument`, the document's final transform: a response header declared `required: true` is
 *   required on the header object, every schema with a `title` becomes the component
 *   of that name and each use a `$ref` to it (a nullable use `anyOf: [$ref, null]`), and the plain
 *   error answers become shared responses (`#/components/responses/NotFound`...).
 *
 * The schemas stay inline in the routes on purpose: request validation, the secret redaction of 422s
 * (src/http/secret-fields.ts) and the nullable helper all work on inline schemas. Naming them is a
 * matter of the document only, so it is done on the document.
 */
import { STATUS_CODES } from 'node:http';
import type { FastifyInstance, RouteOptions } from 'fastify';
import { DOCUMENTED_AS, ErrorBody, ValidationErrorBody, errorResponses } from './schema-helpers.ts';
import { FIELD_VALIDATION_HEADER } from './unknown-fields.ts';

/** Methods whose requests Fastify reads a body of (DELETE too, when one is sent): 413 and 415 apply. */
const BODY_METHODS = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type JsonObject = { [key: string]: Json };

const isObject = (value: unknown): value is JsonObject =>
  value !== null && typeof value === 'object' && !Array.isArray(value);

/**
 * The error statuses every operation of `methods` can answer, on top of what its route lists. 400: a
 * request the HTTP parser refuses (an invalid character in a header value, broken framing) or the
 * router cannot read (a malformed percent-encoding) never reaches a route, so any operation answers it.
 */
function frameworkStatuses(methods: string[]): number[] {
  // 422 on any operation: an X-Field-Validation it cannot read, or an unknown field or query parameter
  // with `Strict` (unknown-fields.ts); and a body that is not JSON, even where none is read. 408, 417
  // and 431 are Node's answers before any route, as 400 (framework-answers.ts): a request that did not
  // arrive in time, an Expect other than 100-continue, a request line and headers over 16 KiB.
  const always = [400, 408, 417, 422, 431, 500, 503];
  return methods.some((m) => BODY_METHODS.has(m)) ? [...always, 413, 415].sort((a, b) => a - b) : always;
}

export const RetryAfterHeader = {
  type: 'string',
  description: 'Seconds to wait before retrying, when the service knows (always when the database is unreachable).',
};

/** A 503 in the error envelope, as a route lists it or as added above: it documents Retry-After. */
function withRetryAfter(response: unknown): unknown {
  if (response === null || typeof response !== 'object') return response;
  const schema = response as { $ref?: unknown; content?: Record<string, unknown>; headers?: Record<string, unknown> };
  // The envelope, or a response of several media types of which the envelope is one (the OAuth callback's).
  if (schema.$ref !== 'ErrorBody' && schema.content?.['application/json'] === undefined) return response;
  return { ...schema, headers: { ...schema.headers, 'Retry-After': RetryAfterHeader } };
}

export function registerOpenApiConventions(app: FastifyInstance): void {
  app.addHook('onRoute', (route: RouteOptions) => {
    const schema = route.schema;
    if (schema === undefined || schema.hide) return;
    const methods = Array.isArray(route.method) ? route.method : [route.method];
    const publicRoute = route.config?.auth === 'none' && schema.security === undefined;
    const response = { ...(schema.response as Record<string, unknown> | undefined) };
    for (const [status, body] of Object.entries(errorResponses(...frameworkStatuses(methods)))) {
      if (!(status in response)) response[status] = body;
    }
    response['503'] = withRetryAfter(response['503']);
    // A new object: route schemas may be shared between routes (a plugin registered twice).
    route.schema = { ...schema, response, ...(publicRoute ? { security: [] } : {}) };
  });
}

// ----- named schemas -------------------------------------------------------------------------------

/** Keywords whose value is data, not a schema: a `title` inside them names nothing. */
const DATA_KEYWORDS = new Set(['example', 'examples', 'enum', 'const', 'default']);

/** JSON with object keys sorted, so that two equal schemas give the same text whatever their key order. */
function canonical(value: Json): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (!isObject(value)) return JSON.stringify(value);
  return `{${Object.keys(value)
    .sort()
    .map((key) => `${JSON.stringify(key)}:${canonical(value[key]!)}`)
    .join(',')}}`;
}

/**
 * A schema made nullable by `Nullable` (schema-helpers.ts: `type: [t, 'null']`, `null` added to an
 * enum): the schema it was made from. Null when the schema is not such a one.
 */
function nonNullable(schema: JsonObject): JsonObject | null {
  const type = schema.type;
  if (!Array.isArray(type) || type.length !== 2 || !type.includes('null')) return null;
  const out: JsonObject = { ...schema, type: type.find((t) => t !== 'null')! };
  if (Array.isArray(schema.enum)) out.enum = schema.enum.filter((v) => v !== null);
  return out;
}

/**
 * Moves every titled schema of the document into `components.schemas` under its title and refers to
 * it there. Innermost first, so that a component refers to the components inside it. A titled schema
 * that differs from the component of its title (other than by being nullable) stays inline: the test of
 * the document (test/openapi.test.ts) finds those.
 */
export function nameSchemas<D extends object>(document: D): D {
  const doc = document as unknown as { paths?: Json; components?: { schemas?: JsonObject } };
  const components = (doc.components ??= {});
  const schemas = (components.schemas ??= {});
  const texts = new Map<string, string>();

  const refer = (node: JsonObject): Json => {
    const name = node.title;
    if (typeof name !== 'string') return node;
    const base = nonNullable(node);
    const schema = base ?? node;
    const text = canonical(schema);
    const known = texts.get(name);
    if (known === undefined) {
      if (name in schemas) return node;
      schemas[name] = schema;
      texts.set(name, text);
    } else if (known !== text) {
      return node;
    }
    const ref = { $ref: `#/components/schemas/${encodeURIComponent(name)}` };
    return base ? { anyOf: [ref, { type: 'null' }] } : ref;
  };

  const visit = (node: Json): Json => {
    if (Array.isArray(node)) return node.map(visit);
    if (!isObject(node)) return node;
    const out: JsonObject = {};
    for (const [key, value] of Object.entries(node)) out[key] = DATA_KEYWORDS.has(key) ? value : visit(value);
    return refer(out);
  };

  if (doc.paths !== undefined) doc.paths = visit(doc.paths);
  return document;
}

// ----- shared error responses ----------------------------------------------------------------------

/** What each error status means on any operation; the detail of an answer says more. */
const ERROR_MEANINGS: Record<number, [name: string, description: string]> = {
  400: [
    'BadRequest',
    'The request breaks a rule (the detail names the field), or is not valid HTTP (`malformed_request`: a malformed header, framing or Content-Length; the connection is closed). Codes: docs/errors.md.',
  ],
  401: [
    'Unauthorized',
    "No usable credential for the operation: none, an unknown, revoked or malformed one, one of another kind (a listener's credential outside the listener protocol, an agent credential, the metrics token), or a sign-in cookie of no live session. Checked before anything else of the request (its ids, body, query or X-Tenant-Id).",
  ],
  403: [
    'Forbidden',
    "A usable credential that may not do this: a role below the operation's (a member key on an admin operation, a workspace key on an organization admin one), X-Tenant-Id naming a workspace it may not act in, an organization key of several workspaces without X-Tenant-Id, or a change made with the sign-in cookie from another origin.",
  ],
  408: ['RequestTimeout', 'The request line, headers or body did not arrive in time; the connection is closed.'],
  417: ['ExpectationFailed', 'An Expect header other than 100-continue, the only expectation the service meets.'],
  431: [
    'RequestHeaderFieldsTooLarge',
    'The request line and headers are larger than the service reads (16 KiB); the connection is closed.',
  ],
  404: ['NotFound', "No such resource in the workspace (another workspace's resources do not exist for the caller)."],
  409: ['Conflict', 'The request conflicts with the current state (a name taken, a resource in use).'],
  412: [
    'PreconditionFailed',
    'If-Match does not hold: the resource changed since that ETag was read, or it has no ETag (only `*` holds then). Nothing was changed.',
  ],
  413: ['PayloadTooLarge', 'The body is larger than the service accepts.'],
  415: ['UnsupportedMediaType', 'The Content-Type is not one this operation reads.'],
  422: ['ValidationFailed', "The request does not match the schema; each item's loc says where."],
  429: [
    'TooManyRequests',
    'Too many at once: the credential or the client address holds as many open streams and long-polls as allowed (`too_many_streams`). Retry-After says when to try again.',
  ],
  500: ['InternalError', 'An unexpected failure; the body carries the request id for the service log.'],
  502: ['BadGateway', 'An upstream (an identity provider, a code host) answered wrongly.'],
  503: ['ServiceUnavailable', 'The database or an upstream is unreachable right now; retry shortly.'],
};

/**
 * Headers the shared response of a status always documents. A plain error of that status with other
 * headers is shared under a name of its own (`ConflictWithRetryAfter`), so that the names never
 * depend on the order of the routes.
 */
const USUAL_HEADERS: Record<number, string[]> = { 429: ['Retry-After'], 503: ['Retry-After'] };

/** `Precondition Failed` -> `PreconditionFailed`, for a status without an entry above. */
const pascalCase = (text: string): string =>
  text
    .replace(/[^A-Za-z0-9]+(.)?/g, (_, c: string | undefined) => (c ?? '').toUpperCase())
    .replace(/^./, (c) => c.toUpperCase());

const ENVELOPES: Record<string, string | undefined> = {
  '#/components/schemas/ErrorBody': (ErrorBody as { description?: string }).description,
  '#/components/schemas/ValidationErrorBody': (ValidationErrorBody as { description?: string }).description,
};

/**
 * A response that is the error envelope and nothing else (headers aside, no description of its own)
 * becomes a reference to the shared response of its status: the document then says once what a 404
 * is, rather than on every operation.
 */
function isPlainError(response: Json): response is JsonObject {
  if (!isObject(response)) return false;
  const keys = Object.keys(response)
    .filter((key) => key !== 'headers' || isObject(response.headers))
    .sort()
    .join();
  if (keys !== 'content,description' && keys !== 'content,description,headers') return false;
  const content = response.content;
  if (!isObject(content) || Object.keys(content).join() !== 'application/json') return false;
  const media = content['application/json'];
  if (!isObject(media) || Object.keys(media).join() !== 'schema' || !isObject(media.schema)) return false;
  const ref = media.schema.$ref;
  return (
    typeof ref === 'string' &&
    Object.keys(media.schema).length === 1 &&
    ENVELOPES[ref] !== undefined &&
    ENVELOPES[ref] === response.description
  );
}

function shareErrorResponses(doc: { paths?: Json; components?: { responses?: JsonObject } }): void {
  const shared = ((doc.components ??= {}).responses ??= {});
  if (!isObject(doc.paths)) return;
  for (const item of Object.values(doc.paths)) {
    if (!isObject(item)) continue;
    for (const operation of Object.values(item)) {
      if (!isObject(operation) || !isObject(operation.responses)) continue;
      for (const [status, response] of Object.entries(operation.responses)) {
        const code = Number(status);
        if (!(code >= 400) || !isPlainError(response)) continue;
        const [base, description] = ERROR_MEANINGS[code] ?? [
          pascalCase(STATUS_CODES[code] ?? `Status ${status}`),
          STATUS_CODES[code] ?? `Status ${status}`,
        ];
        const headers = Object.keys(isObject(response.headers) ? response.headers : {}).sort();
        const usual = headers.join() === (USUAL_HEADERS[code] ?? []).join();
        const name = usual ? base : `${base}With${headers.map(pascalCase).join('')}`;
        const shape = { ...response, description };
        // Two responses of one name must be the same (a header described otherwise stays inline).
        if (shared[name] !== undefined && canonical(shared[name]) !== canonical(shape)) continue;
        shared[name] ??= shape;
        operation.responses[status] = { $ref: `#/components/responses/${name}` };
      }
    }
  }
}

// ----- required response headers -------------------------------------------------------------------

/**
 * A response header a route declares with `required: true` (a header always sent, such as ETag) gets
 * it on the header object, where OpenAPI reads it: the swagger plugin copies a declared header whole
 * into its `schema`, where a boolean `required` means nothing to JSON Schema.
 */
function hoistRequiredHeaders(doc: { paths?: Json }): void {
  if (!isObject(doc.paths)) return;
  for (const item of Object.values(doc.paths)) {
    if (!isObject(item)) continue;
    for (const operation of Object.values(item)) {
      if (!isObject(operation) || !isObject(operation.responses)) continue;
      for (const response of Object.values(operation.responses)) {
        if (!isObject(response) || !isObject(response.headers)) continue;
        for (const [name, header] of Object.entries(response.headers)) {
          if (!isObject(header) || !isObject(header.schema) || header.schema.required !== true) continue;
          const { required, ...schema } = header.schema;
          response.headers[name] = { ...header, required, schema };
        }
      }
    }
  }
}

// ----- operations that read no body ----------------------------------------------------------------

/**
 * What an operation of a body method that reads no body takes (src/http/json-body.ts): no body, an
 * empty one with `Content-Type: application/json` (which clients send on every write), or any JSON,
 * ignored. Saying so lets a generated client send the header and a fuzzer send `{}`.
 */
export const OptionalIgnoredBody = {
  required: false,
  description:
    'None needed: this operation reads no body. An empty body (with or without `Content-Type: application/json`) or any JSON body such as `{}` is accepted and ignored; a body that is not JSON is refused (415, or 422 for malformed JSON).',
  content: {
    'application/json': { schema: { description: 'Any JSON value, ignored (`{}` for instance).' } },
  },
};

function documentOptionalBodies(doc: { paths?: Json }): void {
  if (!isObject(doc.paths)) return;
  for (const item of Object.values(doc.paths)) {
    if (!isObject(item)) continue;
    for (const [method, operation] of Object.entries(item)) {
      if (!BODY_METHODS.has(method.toUpperCase()) || !isObject(operation) || operation.requestBody !== undefined)
        continue;
      operation.requestBody = structuredClone(OptionalIgnoredBody);
    }
  }
}

// ----- unknown fields ------------------------------------------------------------------------------

const FieldValidationParameter = {
  name: FIELD_VALIDATION_HEADER,
  in: 'header',
  required: false,
  description:
    'What to do with body fields and query parameters the operation does not know: `Warn` (the default) accepts them and names each in a `Warning` header of the answer, `Strict` refuses them (422 `extra_forbidden` at each), `Ignore` accepts them in silence. Any letter case.',
  schema: { type: 'string', enum: ['Strict', 'Warn', 'Ignore'], default: 'Warn' },
};

const WarningHeader = {
  description:
    'One per body field or query parameter the operation does not know (accepted and ignored): `299 - "unknown field \\"secretz\\"; did you mean \\"secrets\\"?"`. See X-Field-Validation.',
  schema: { type: 'string' },
};

/**
 * Every operation takes X-Field-Validation and its successes may carry Warning (src/http/unknown-fields.ts),
 * said here once rather than by every route.
 */
function documentUnknownFields(doc: { paths?: Json }): void {
  if (!isObject(doc.paths)) return;
  for (const item of Object.values(doc.paths)) {
    if (!isObject(item)) continue;
    for (const operation of Object.values(item)) {
      if (!isObject(operation)) continue;
      const parameters = Array.isArray(operation.parameters) ? operation.parameters : [];
      operation.parameters = [...parameters, structuredClone(FieldValidationParameter)];
      if (!isObject(operation.responses)) continue;
      for (const [status, response] of Object.entries(operation.responses)) {
        if (!status.startsWith('2') || !isObject(response) || response.$ref !== undefined) continue;
        response.headers = {
          ...(isObject(response.headers) ? response.headers : {}),
          Warning: structuredClone(WarningHeader),
        };
      }
    }
  }
}

const TenantParameter = {
  name: 'X-Tenant-Id',
  in: 'header',
  required: false,
  description:
    "The workspace the request acts in: a workspace's id (any letter case). A workspace key may name only its own (another: 403); an organization key must name one when its organization has more than one workspace (403 `requires workspace specification`), and may on organization routes. Read only once the credential is usable: without one the answer is 401 whatever this holds; malformed, 422 at `header.x-tenant-id`.",
  schema: { type: 'string', format: 'uuid' },
};

/**
 * Every operation an API key opens (the document's default security, or a route's own that names
 * `apiKey`: the listener protocol's) reads X-Tenant-Id (src/http/authenticate.ts), said here once rather
 * than by every route: not a route schema's header, which would be validated before the credential is
 * (and a bad header would then answer before the 401).
 */
function documentTenantHeader(doc: { paths?: Json }): void {
  if (!isObject(doc.paths)) return;
  for (const item of Object.values(doc.paths)) {
    if (!isObject(item)) continue;
    for (const operation of Object.values(item)) {
      if (!isObject(operation)) continue;
      const security = operation.security;
      const byApiKey =
        security === undefined || (Array.isArray(security) && security.some((s) => isObject(s) && 'apiKey' in s));
      if (!byApiKey) continue;
      const parameters = Array.isArray(operation.parameters) ? operation.parameters : [];
      operation.parameters = [...parameters, structuredClone(TenantParameter)];
    }
  }
}

/**
 * Replaces every schema that declares `DOCUMENTED_AS` by the form it declares, keeping its examples (the
 * request is still validated by the schema itself: schema-helpers.ts).
 */
function documentAsDeclared(document: object): void {
  const visit = (node: Json): Json => {
    if (Array.isArray(node)) return node.map(visit);
    if (!isObject(node)) return node;
    const declared = node[DOCUMENTED_AS];
    if (isObject(declared)) {
      return { ...declared, ...(node.examples === undefined ? {} : { examples: node.examples }) };
    }
    const out: JsonObject = {};
    for (const [key, value] of Object.entries(node)) out[key] = visit(value);
    return out;
  };
  const doc = document as { paths?: Json };
  if (doc.paths !== undefined) doc.paths = visit(doc.paths);
}

/**
 * The swagger plugin's `transformObject`: optional bodies, unknown fields, the tenant header, required
 * headers, named schemas, then shared error responses.
 */
export function shapeDocument<D extends object>(document: D): D {
  documentAsDeclared(document);
  documentOptionalBodies(document);
  documentUnknownFields(document);
  documentTenantHeader(document);
  hoistRequiredHeaders(document);
  nameSchemas(document);
  shareErrorResponses(document);
  return document;
}
