/**
 * Fields and query parameters an operation does not know (docs/api.md, "Conventions"): accepted, since
 * clients send extra ones (LangChain's CLI does), but never in silence. Each answer names every one in
 * a `Warning` header (RFC 9111's 299, as Kubernetes does with `fieldValidation`), with the name a typo
 * probably meant: `299 - "unknown field \"secretz\"; did you mean \"secrets\"?"`. The request header
 * `X-Field-Validation` picks the mode: `Warn` (the default), `Strict` (a 422 `extra_forbidden` at each,
 * before anything runs) or `Ignore`.
 *
 * What is known is read from the route's own schema (its body and querystring), so no route says it
 * twice. Validation then drops the unknown body fields (validation.ts), so no handler sees them.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { nearestName } from '../domain/near-names.ts';
import { ValidationError, type ValidationIssue } from '../errors.ts';

export const FIELD_VALIDATION_HEADER = 'X-Field-Validation';
const MODES = ['strict', 'warn', 'ignore'] as const;
type Mode = (typeof MODES)[number];

/** Warnings past this many are summed up in one: a body of 5,000 unknown fields gets 21 headers. */
const MAX_WARNINGS = 20;
/** A name is cut short in an answer: a 1 MB key must not come back in a header. */
const MAX_NAME = 120;

type Schema = Record<string, unknown>;
type Path = (string | number)[];

interface Unknown {
  readonly where: 'body' | 'query';
  readonly path: Path;
  /** The known path it probably meant, or null. */
  readonly meant: string | null;
}

const isObject = (value: unknown): value is Record<string, unknown> =>
  value !== null && typeof value === 'object' && !Array.isArray(value);

/** Parsed JSON (not the Buffer of a webhook, nor the stream of an upload). */
const isJsonObject = (value: unknown): value is Record<string, unknown> =>
  isObject(value) && !ArrayBuffer.isView(value) && typeof (value as { pipe?: unknown }).pipe !== 'function';

/** The object schema a (possibly nullable) schema describes, or null when it lists no properties. */
function objectSchema(schema: unknown): Schema | null {
  if (!isObject(schema)) return null;
  if (isObject(schema.properties)) return schema;
  // `Nullable` of a schema without `type` is anyOf [schema, null] (schema-helpers.ts): one object branch.
  const branches = Array.isArray(schema.anyOf) ? schema.anyOf.map(objectSchema).filter((s) => s !== null) : [];
  return branches.length === 1 ? branches[0]! : null;
}

function itemsSchema(schema: unknown): unknown {
  if (!isObject(schema)) return undefined;
  if (schema.items !== undefined) return schema.items;
  const branches = Array.isArray(schema.anyOf) ? schema.anyOf.filter((s) => isObject(s) && s.items !== undefined) : [];
  return branches.length === 1 ? (branches[0] as Schema).items : undefined;
}

const dotted = (path: Path): string =>
  path.map((part, i) => (typeof part === 'number' ? `[${part}]` : i === 0 ? part : `.${part}`)).join('');

/** Names a typo at `path` may have meant: its siblings, and the fields of its siblings that are objects. */
function candidates(properties: Record<string, unknown>, path: Path): Map<string, string> {
  const out = new Map<string, string>();
  for (const [name, sub] of Object.entries(properties)) {
    if (!out.has(name)) out.set(name, dotted([...path, name]));
    const inner = objectSchema(sub);
    if (inner)
      for (const child of Object.keys(inner.properties as Record<string, unknown>))
        if (!out.has(child) && !(child in properties)) out.set(child, dotted([...path, name, child]));
  }
  return out;
}

/** The fields of `value` that `schema` does not list, at any depth (not inside free-form objects). */
function unknownBodyFields(schema: unknown, value: unknown, path: Path, out: Unknown[]): void {
  if (out.length > 100_000) return;
  if (Array.isArray(value)) {
    const items = itemsSchema(schema);
    if (items !== undefined) value.forEach((item, i) => unknownBodyFields(items, item, [...path, i], out));
    return;
  }
  const object = objectSchema(schema);
  if (!object || !isObject(value)) return;
  const properties = object.properties as Record<string, unknown>;
  // Free-form (`additionalProperties: true`) or a map of values: other names are data, not typos.
  const closed = object.additionalProperties === undefined || object.additionalProperties === false;
  let near: Map<string, string> | null = null;
  for (const [key, child] of Object.entries(value)) {
    if (Object.hasOwn(properties, key)) unknownBodyFields(properties[key], child, [...path, key], out);
    else if (closed) {
      near ??= candidates(properties, path);
      const meant = nearestName(key, [...near.keys()]);
      out.push({ where: 'body', path: [...path, key], meant: meant === null ? null : near.get(meant)! });
    }
  }
}

function unknownQueryParameters(request: FastifyRequest): Unknown[] {
  const query = request.query;
  if (!isObject(query)) return [];
  const known = Object.keys(objectSchema(request.routeOptions.schema?.querystring)?.properties ?? {});
  return Object.keys(query)
    .filter((name) => !known.includes(name))
    .map((name) => {
      const meant = nearestName(name, known);
      return { where: 'query' as const, path: [name], meant };
    });
}

function unknownsOf(request: FastifyRequest): Unknown[] {
  const out = unknownQueryParameters(request);
  const body = request.routeOptions.schema?.body;
  if (body !== undefined && isJsonObject(request.body)) unknownBodyFields(body, request.body, [], out);
  return out;
}

/** A name as an answer may show it: printable ASCII (others as \uXXXX), cut short. */
function shown(name: string): string {
  const cut = name.length > MAX_NAME ? `${name.slice(0, MAX_NAME)}...` : name;
  return JSON.stringify(cut).replace(/[^\x20-\x7e]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

function sentence(unknown: Unknown): string {
  const what = unknown.where === 'query' ? 'unknown query parameter' : 'unknown field';
  const meant = unknown.meant === null ? '' : `; did you mean ${shown(unknown.meant)}?`;
  return `${what} ${shown(dotted(unknown.path))}${meant}`;
}

/** A Warning header value (RFC 9111 5.5): code 299, no agent, the text as a quoted string. */
const warningValue = (text: string): string => `299 - "${text.replace(/[\\"]/g, (c) => `\\${c}`)}"`;

function modeOf(request: FastifyRequest): Mode {
  const raw = request.headers[FIELD_VALIDATION_HEADER.toLowerCase()];
  if (raw === undefined) return 'warn';
  const mode = (Array.isArray(raw) ? raw.join(',') : raw).trim().toLowerCase();
  if ((MODES as readonly string[]).includes(mode)) return mode as Mode;
  throw new ValidationError([
    {
      type: 'enum',
      loc: ['header', FIELD_VALIDATION_HEADER.toLowerCase()],
      msg: "Input should be 'Strict', 'Warn' or 'Ignore'",
    },
  ]);
}

async function checkUnknowns(request: FastifyRequest, reply: FastifyReply): Promise<void> {
  if (request.routeOptions.schema === undefined) return;
  const mode = modeOf(request);
  if (mode === 'ignore') return;
  const unknowns = unknownsOf(request);
  if (unknowns.length === 0) return;
  if (mode === 'strict') {
    // No `input`: an unknown field may hold a secret.
    const issues: ValidationIssue[] = unknowns.slice(0, MAX_WARNINGS * 5).map((u) => ({
      type: 'extra_forbidden',
      loc: [
        u.where,
        ...u.path.map((p) => (typeof p === 'string' && p.length > MAX_NAME ? `${p.slice(0, MAX_NAME)}...` : p)),
      ],
      msg: `Extra inputs are not permitted${u.meant === null ? '' : ` (did you mean ${shown(u.meant)}?)`}`,
    }));
    throw new ValidationError(issues);
  }
  const values = unknowns.slice(0, MAX_WARNINGS).map((u) => warningValue(sentence(u)));
  if (unknowns.length > MAX_WARNINGS)
    values.push(warningValue(`and ${unknowns.length - MAX_WARNINGS} more unknown fields`));
  void reply.header('Warning', values);
}

/** Names unknown fields and query parameters on every route that has a schema (see above). */
export function registerUnknownFieldChecks(app: FastifyInstance): void {
  app.addHook('preValidation', checkUnknowns);
}
