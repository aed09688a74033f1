/**
 * Secret fields are marked in the schemas with `writeOnly: true` (the JSON Schema annotation for "sent,
 * never read back"; schema-helpers.ts has `SecretString`). A 422 never echoes a secret: the input of an
 * item at a secret field, or at anything that may hold one (its list, its object, the whole body) is
 * replaced by SECRET_MASK. The rule goes by where a value sits in the schema, not by what it looks
 * like, so a secret sent with the wrong shape (a number, an object, a list) is hidden too, and marking a
 * new field is all it takes to cover it. A `$ref` is not followed: mark secrets in inline schemas (as
 * every request schema here is).
 */
import type { ValidationIssue } from '../errors.ts';

/** What a 422 shows instead of a secret (the mask responses show for secret values too). */
export const SECRET_MASK = '********';

/** Any key or list index. */
const ANY = Symbol('any');
type Segment = string | typeof ANY;

/** Keywords whose value is a map of names to schemas. */
const NAMED = ['properties'];
/** Keywords whose value is a schema (or a list of them) for every member of an object or list. */
const MEMBERS = [
  'items',
  'prefixItems',
  'additionalItems',
  'additionalProperties',
  'patternProperties',
  'contains',
  'unevaluatedProperties',
  'unevaluatedItems',
];
/** Keywords whose value is a schema (or a list of them) for the same value. */
const SAME_VALUE = ['anyOf', 'oneOf', 'allOf', 'not', 'if', 'then', 'else'];

const isObject = (value: unknown): value is Record<string, unknown> =>
  value !== null && typeof value === 'object' && !Array.isArray(value);

/** Schemas are trees of a few levels; this only stops a pathological (or cyclic) one. */
const MAX_SCHEMA_DEPTH = 64;

function collect(schema: unknown, path: Segment[], out: Segment[][]): void {
  if (!isObject(schema) || path.length > MAX_SCHEMA_DEPTH) return;
  if (schema.writeOnly === true) {
    out.push(path);
    return;
  }
  for (const keyword of NAMED) {
    const map = schema[keyword];
    if (isObject(map)) for (const [name, sub] of Object.entries(map)) collect(sub, [...path, name], out);
  }
  for (const keyword of MEMBERS) {
    const sub = schema[keyword];
    if (keyword === 'patternProperties' && isObject(sub))
      for (const each of Object.values(sub)) collect(each, [...path, ANY], out);
    else if (Array.isArray(sub)) for (const each of sub) collect(each, [...path, ANY], out);
    else collect(sub, [...path, ANY], out);
  }
  for (const keyword of SAME_VALUE) {
    const sub = schema[keyword];
    if (Array.isArray(sub)) for (const each of sub) collect(each, path, out);
    else collect(sub, path, out);
  }
}

const cache = new WeakMap<object, Segment[][]>();

/** Where in values of `schema` secrets sit; ANY stands for any key or index. */
export function secretPaths(schema: unknown): Segment[][] {
  if (!isObject(schema)) return [];
  let paths = cache.get(schema);
  if (paths === undefined) {
    paths = [];
    collect(schema, [], paths);
    cache.set(schema, paths);
  }
  return paths;
}

/** True when the value at `path` is a secret, lies inside one, or holds one. */
export function touchesSecret(paths: Segment[][], path: (string | number)[]): boolean {
  return paths.some((secret) => {
    const shared = Math.min(secret.length, path.length);
    for (let i = 0; i < shared; i++) if (secret[i] !== ANY && secret[i] !== String(path[i])) return false;
    return true;
  });
}

/** The schemas of a route by the first element of a 422 `loc`. */
export interface PartSchemas {
  body?: unknown;
  querystring?: unknown;
  /** Fastify's other name for querystring. */
  query?: unknown;
  params?: unknown;
  headers?: unknown;
}

function schemaOf(schemas: PartSchemas, where: unknown): unknown {
  if (where === 'body') return schemas.body;
  if (where === 'query') return schemas.querystring ?? schemas.query;
  if (where === 'path') return schemas.params;
  if (where === 'header') return schemas.headers;
  return undefined;
}

/** The issues with every input that touches a secret of the route's schemas masked. */
export function redactSecrets(issues: ValidationIssue[], schemas: PartSchemas | undefined): ValidationIssue[] {
  return issues.map((issue) => {
    if (!('input' in issue)) return issue;
    const [where, ...path] = issue.loc;
    const paths = schemas ? secretPaths(schemaOf(schemas, where)) : [];
    return touchesSecret(paths, path) ? { ...issue, input: SECRET_MASK } : issue;
  });
}
