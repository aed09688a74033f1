/**
 * Small builders over TypeBox for the shapes our schemas repeat. Nullable primitives use JSON Schema's
 * `type: [t, 'null']` rather than `anyOf`, so that a wrong value gives one clear 422 item.
 */
import { Type, type Static, type TSchema, type TUnsafe } from 'typebox';
import { SHOWN_ONCE } from './shown-once.ts';

type JsonType = 'string' | 'number' | 'integer' | 'boolean' | 'object' | 'array';

/** `T | null`, keeping the schema's keywords. */
export function Nullable<T extends TSchema>(schema: T): TUnsafe<Static<T> | null> {
  const raw = JSON.parse(JSON.stringify(schema)) as { type?: JsonType; enum?: unknown[] } & Record<string, unknown>;
  if (raw.type === undefined) return Type.Unsafe<Static<T> | null>({ anyOf: [raw, { type: 'null' }] });
  const out: Record<string, unknown> = { ...raw, type: [raw.type, 'null'] };
  if (raw.enum) out.enum = [...raw.enum, null];
  return Type.Unsafe<Static<T> | null>(out);
}

/** A string limited to `values`, as a plain `enum` (readable in OpenAPI and in 422 messages). */
export function StringEnum<const V extends readonly string[]>(
  values: V,
  options: Record<string, unknown> = {},
): TUnsafe<V[number]> {
  return Type.Unsafe<V[number]>({ type: 'string', enum: [...values], ...options });
}

export const Uuid = (options: Record<string, unknown> = {}) => Type.String({ format: 'uuid', ...options });
export const DateTime = (options: Record<string, unknown> = {}) => Type.String({ format: 'date-time', ...options });

/**
 * A secret: `writeOnly: true` marks it, and a 422 never echoes it nor anything holding it (secret-fields.ts).
 * Every request field that holds a secret is one of these.
 */
export const SecretString = (options: Record<string, unknown> = {}) => Type.String({ ...options, writeOnly: true });

/**
 * A field of an answer that holds a credential shown once, in this answer only: the answer is sent with
 * `Cache-Control: no-store` and never kept for an Idempotency-Key replay (shown-once.ts).
 */
export const ShownOnceString = (options: Record<string, unknown> = {}) =>
  Type.String({ ...options, [SHOWN_ONCE]: true });

/** FastAPI-compatible error body for 4xx and 5xx other than 422. */
export const ErrorBody = Type.Object(
  { detail: Type.String(), code: Type.Optional(Type.String()), request_id: Type.Optional(Type.String()) },
  { $id: 'ErrorBody', description: 'Error with a human message in detail and a stable code.' },
);

export const ValidationErrorBody = Type.Object(
  {
    detail: Type.Array(
      Type.Object({
        type: Type.String(),
        loc: Type.Array(Type.Union([Type.String(), Type.Integer()])),
        msg: Type.String(),
        input: Type.Optional(Type.Unknown()),
      }),
    ),
    code: Type.Optional(Type.String()),
  },
  { $id: 'ValidationErrorBody', description: 'The request does not match the schema.' },
);

/** Standard error responses to add to a route's `response` map. */
export function errorResponses(...statuses: number[]): Record<number, TSchema> {
  const out: Record<number, TSchema> = {};
  for (const status of statuses) out[status] = status === 422 ? Type.Ref('ValidationErrorBody') : Type.Ref('ErrorBody');
  return out;
}

/** Query controls shared by every list. */
export const PageQuery = {
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 20, description: 'Page size, 1 to 100.' })),
  // Bounded so that PostgreSQL's bigint OFFSET never sees a number it cannot parse (1e20 would be a 500).
  offset: Type.Optional(
    Type.Integer({
      minimum: 0,
      maximum: 2_147_483_647,
      default: 0,
      description: 'Resources to skip; pass the previous response offset.',
    }),
  ),
};

export function ListEnvelope<T extends TSchema>(item: T, description: string) {
  // The list of a named schema is named too (DeploymentList for Deployment): see src/http/openapi.ts.
  const name = (item as { title?: unknown }).title;
  return Type.Object(
    {
      resources: Type.Array(item),
      offset: Type.Integer({ description: 'Pass as offset to get the next page.' }),
    },
    { description, ...(typeof name === 'string' ? { title: `${name}List` } : {}) },
  );
}

/** The page a list request asks for (schema defaults apply; these cover a schema without them). */
export function pageOf(
  query: { limit?: number; offset?: number },
  defaultLimit = 20,
): { limit: number; offset: number } {
  return { limit: query.limit ?? defaultLimit, offset: query.offset ?? 0 };
}

/** The list envelope: `offset` is what to pass for the next page. */
export function envelope<T>(resources: T[], offset: number): { resources: T[]; offset: number } {
  return { resources, offset: offset + resources.length };
}

/** The longest path parameter a route documents: an agent id (routes/oauth-flow.ts), 256 characters. */
export const MAX_PATH_PARAM_CHARS = 256;

/**
 * The router's limit on a path parameter (Fastify's maxParamLength, default 100). It applies to the raw
 * path, before percent-decoding, where one character takes up to 12 (4 UTF-8 bytes as %XX); the schema's
 * maxLength then bounds the decoded value.
 */
export const ROUTER_MAX_PARAM_LENGTH = MAX_PATH_PARAM_CHARS * 12;

/**
 * A request schema's keyword holding what the OpenAPI document shows instead of it (src/http/openapi.ts,
 * `documentAsDeclared`): a more precise form (a oneOf by source, say) than the one requests are validated
 * with, where validating with it would give a 422 of the whole instead of the contract's 400 naming a field.
 */
export const DOCUMENTED_AS = 'x-documented-as';
