/**
 * Request validation: one Ajv for bodies (no type coercion: a JSON number is not a string) and one for
 * path, query and headers (strings coerced to the declared types), both with every error collected.
 * `toValidationIssues` turns Ajv's errors into FastAPI-style 422 items with `loc`.
 */
import { Ajv, type ErrorObject, type Options } from 'ajv';
import addFormatsModule from 'ajv-formats';
import type { FastifySchemaValidationError } from 'fastify/types/schema.js';
import type { ValidationIssue } from '../errors.ts';

// ajv-formats ships CommonJS with a default export.
const addFormats = addFormatsModule as unknown as (ajv: Ajv) => Ajv;

function makeAjv(options: Options): Ajv {
  const ajv = new Ajv({ allErrors: true, useDefaults: true, removeAdditional: false, strict: false, ...options });
  addFormats(ajv);
  return ajv;
}

export function createValidatorCompiler() {
  const bodies = makeAjv({ coerceTypes: false });
  const strings = makeAjv({ coerceTypes: 'array' });
  return ({ schema, httpPart }: { schema: object; httpPart?: string }) =>
    (httpPart === 'body' ? bodies : strings).compile(schema);
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
    default:
      return error.keyword;
  }
}

function message(error: ErrorObject | FastifySchemaValidationError): string {
  const params = error.params as Record<string, unknown>;
  if (error.keyword === 'required') return 'Field required';
  if (error.keyword === 'enum') return `Input should be one of: ${(params.allowedValues as unknown[]).filter((v) => v !== null).map((v) => `'${String(v)}'`).join(', ')}`;
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
  if (typeof value === 'string' && value.length > 200) return `${value.slice(0, 200)}...`;
  if (value !== null && typeof value === 'object' && JSON.stringify(value).length > 500) return '[too large to echo]';
  return value;
}

export function toValidationIssues(errors: (ErrorObject | FastifySchemaValidationError)[], context: string, data: unknown): ValidationIssue[] {
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
    const issue: ValidationIssue = { type: typeOf(error), loc: [LOCATION[context] ?? context, ...path], msg: message(error) };
    if (error.keyword !== 'required') issue.input = shortened(valueAt(data, path));
    issues.push(issue);
  }
  return issues;
}
