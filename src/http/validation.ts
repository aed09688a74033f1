/**
 * Request validation: one Ajv for bodies (no type coercion: a JSON number is not a string) and one for
 * path, query and headers (strings coerced to the declared types), both with every error collected.
 * Bodies lose unknown fields before the handler sees them; no request value may hold a NUL character
 * or nest deeper than MAX_JSON_DEPTH. `toValidationIssues` turns Ajv's errors into FastAPI-style 422
 * items with `loc`.
 */
import { Ajv, type ErrorObject, type Options } from 'ajv';
import addFormatsModule from 'ajv-formats';
import type { FastifySchemaValidationError } from 'fastify/types/schema.js';
import type { ValidationIssue } from '../errors.ts';
import { compileOnce, schemaKey, type DeferredCompiles } from './schema-cache.ts';

// ajv-formats ships CommonJS with a default export.
const addFormats = addFormatsModule as unknown as (ajv: Ajv) => Ajv;

function makeAjv(options: Options): Ajv {
  // verbose: an error carries its schema, whose `x-pattern-words` says a pattern's rule in words.
  const ajv = new Ajv({
    allErrors: true,
    useDefaults: true,
    removeAdditional: false,
    strict: false,
    verbose: true,
    ...options,
  });
  addFormats(ajv);
  return ajv;
}

/** Deeper JSON than this is refused: no resource nests so far, and deep values overflow the stack later. */
export const MAX_JSON_DEPTH = 64;

type ValidateFunction = ((data: unknown) => boolean) & { errors?: ErrorObject[] | null };

/** A raw body (a Buffer for a webhook, the stream of an upload) rather than parsed JSON or a query. */
function isRawBody(value: object): boolean {
  return ArrayBuffer.isView(value) || typeof (value as { pipe?: unknown }).pipe === 'function';
}

/**
 * What a schema cannot say about any request value: no NUL character in a string (PostgreSQL's text
 * and jsonb refuse it, which would surface as a 500) and no nesting deeper than MAX_JSON_DEPTH.
 * Iterative, so that a hostile depth cannot overflow the stack here.
 */
function unstorable(data: unknown): ErrorObject | null {
  const stack: { value: unknown; path: string; depth: number }[] = [{ value: data, path: '', depth: 0 }];
  while (stack.length > 0) {
    const { value, path, depth } = stack.pop()!;
    if (typeof value === 'string') {
      if (value.includes('\u0000'))
        return {
          keyword: 'nul_character',
          instancePath: path,
          schemaPath: '',
          params: {},
          message: 'must not contain NUL characters',
        };
      continue;
    }
    if (value === null || typeof value !== 'object' || isRawBody(value)) continue;
    if (depth >= MAX_JSON_DEPTH)
      return {
        keyword: 'too_deep',
        instancePath: '',
        schemaPath: '',
        params: {},
        message: `must not nest deeper than ${MAX_JSON_DEPTH} levels`,
      };
    for (const [key, child] of Object.entries(value)) {
      if (key.includes('\u0000'))
        return {
          keyword: 'nul_character',
          instancePath: path,
          schemaPath: '',
          params: {},
          message: 'must not contain NUL characters in keys',
        };
      stack.push({ value: child, path: `${path}/${key.replace(/~/g, '~0').replace(/\//g, '~1')}`, depth: depth + 1 });
    }
  }
  return null;
}

/** Keywords whose value is a map of names to schemas, not a schema. */
const SCHEMA_MAPS = new Set(['properties', 'patternProperties', '$defs', 'definitions']);
/** Keywords whose value is data (or a list of data), never a schema. */
const DATA_KEYWORDS = new Set(['enum', 'const', 'default', 'examples', 'example', 'required']);

/**
 * Unknown request fields are ignored (docs/api.md, "Conventions"): a copy of a body schema in which every
 * object that lists its properties and says nothing about others drops the others (with Ajv's
 * `removeAdditional: true`), so that no handler sees, stores or refuses them. Free-form objects
 * (`additionalProperties: true`) keep everything. Inside anyOf/oneOf/allOf nothing is changed: Ajv would
 * strip fields while trying a branch that then fails.
 */
function ignoringUnknownFields(schema: unknown, inUnion = false): unknown {
  if (Array.isArray(schema)) return schema.map((item) => ignoringUnknownFields(item, inUnion));
  if (schema === null || typeof schema !== 'object') return schema;
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(schema as Record<string, unknown>)) {
    if (DATA_KEYWORDS.has(key)) out[key] = value;
    else if (SCHEMA_MAPS.has(key) && value !== null && typeof value === 'object') {
      out[key] = Object.fromEntries(
        Object.entries(value).map(([name, sub]) => [name, ignoringUnknownFields(sub, inUnion)]),
      );
    } else out[key] = ignoringUnknownFields(value, inUnion || key === 'anyOf' || key === 'oneOf' || key === 'allOf');
  }
  if (!inUnion && out.properties !== undefined && out.additionalProperties === undefined)
    out.additionalProperties = false;
  return out;
}

/**
 * The app's validator compiler. A schema that reads the same as one compiled before (many routes share
 * their body, query and path schemas, each as an object of its own) gets the function compiled for that
 * one (src/http/schema-cache.ts): Ajv's own cache knows a schema by its object only. Each is compiled
 * when its route first validates a request (`deferred`).
 */
export function createValidatorCompiler(deferred: DeferredCompiles) {
  const bodies = makeAjv({ coerceTypes: false, removeAdditional: true });
  const strings = makeAjv({ coerceTypes: 'array' });
  const compiledBodies = new Map<string, ValidateFunction>();
  const compiledStrings = new Map<string, ValidateFunction>();
  return ({ schema, httpPart }: { schema: object; httpPart?: string }) => {
    const compiled = deferred.defer((): ValidateFunction => {
      const key = schemaKey(schema);
      return httpPart === 'body'
        ? compileOnce(compiledBodies, key, () => bodies.compile(ignoringUnknownFields(schema) as object))
        : compileOnce(compiledStrings, key, () => strings.compile(schema));
    });
    const checked: ValidateFunction = (data) => {
      const problem = unstorable(data);
      if (problem) {
        checked.errors = [problem];
        return false;
      }
      const validate = compiled();
      const valid = validate(data);
      checked.errors = validate.errors ?? null;
      return valid;
    };
    return checked;
  };
}

const LOCATION: Record<string, string> = { body: 'body', querystring: 'query', params: 'path', headers: 'header' };

function typeOf(error: ErrorObject | FastifySchemaValidationError): string {
  const params = error.params as Record<string, unknown>;
  switch (error.keyword) {
    case 'required':
      return 'missing';
    case 'type':
      return `${String(params.type).replace(/,null$/, '')}_type`;
    case 'format':
      return `${String(params.format).replace(/-/g, '_')}_parsing`;
    case 'enum':
      return 'enum';
    case 'maximum':
      return 'less_than_equal';
    case 'minimum':
      return 'greater_than_equal';
    case 'maxLength':
      return 'string_too_long';
    case 'minLength':
      return 'string_too_short';
    case 'pattern':
      return 'string_pattern_mismatch';
    case 'maxItems':
    case 'maxProperties':
      return 'too_long';
    case 'minItems':
      return 'too_short';
    case 'nul_character':
      return 'string_nul_character';
    case 'too_deep':
      return 'nesting_too_deep';
    default:
      return error.keyword;
  }
}

/**
 * The keyword a string schema with a `pattern` gives its rule in words with (a deployment name's, a
 * secret's): a 422 says that rather than the regular expression, which few users read.
 */
export const PATTERN_WORDS = 'x-pattern-words';

function message(error: ErrorObject | FastifySchemaValidationError): string {
  const params = error.params as Record<string, unknown>;
  if (error.keyword === 'required') return 'Field required';
  const words = (error as { parentSchema?: Record<string, unknown> }).parentSchema?.[PATTERN_WORDS];
  if (error.keyword === 'pattern' && typeof words === 'string') return words;
  if (error.keyword === 'enum')
    return `Input should be one of: ${(params.allowedValues as (string | number | boolean | null)[])
      .filter((v) => v !== null)
      .map((v) => `'${String(v)}'`)
      .join(', ')}`;
  return error.message ? `Input ${error.message}` : 'Invalid input';
}

function valueAt(root: unknown, path: (string | number)[]): unknown {
  let current = root;
  for (const key of path) {
    if (current === null || typeof current !== 'object') return undefined;
    current = (current as Record<string | number, unknown>)[key];
  }
  return current;
}

/** Echoed inputs are cut short: a 1 MB string must not come back in full. */
function shortened(value: unknown): unknown {
  if (typeof value === 'string') return value.length > 200 ? `${value.slice(0, 200)}...` : value;
  if (value === null || typeof value !== 'object') return value;
  let text: string;
  try {
    text = JSON.stringify(value);
  } catch {
    // Deep enough to overflow the stack: not worth echoing.
    return '[too large to echo]';
  }
  return text.length > 500 ? '[too large to echo]' : value;
}

/** Items in FastAPI's shape. Inputs of secret fields are masked later, by the error handler's 422 (secret-fields.ts). */
export function toValidationIssues(
  errors: (ErrorObject | FastifySchemaValidationError)[],
  context: string,
  data: unknown,
): ValidationIssue[] {
  const issues: ValidationIssue[] = [];
  const seen = new Set<string>();
  for (const error of errors) {
    const path = error.instancePath
      .split('/')
      .slice(1)
      .map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'))
      .map((p) => (/^\d+$/.test(p) ? Number(p) : p));
    const params = error.params as Record<string, unknown>;
    if (error.keyword === 'required') path.push(String(params.missingProperty));
    // anyOf reports each branch as well; one item per location is clearer.
    const key = path.join('\u0000');
    if (seen.has(key)) continue;
    seen.add(key);
    const issue: ValidationIssue = {
      type: typeOf(error),
      loc: [LOCATION[context] ?? context, ...path],
      msg: message(error),
    };
    if (error.keyword !== 'required') issue.input = shortened(valueAt(data, path));
    issues.push(issue);
  }
  return issues;
}
