/**
 * The application/json body parser of every API route (replacing Fastify's): a body is read exactly
 * one way or refused with a 422 that says where. Bytes that are not UTF-8 are refused rather than
 * replaced by U+FFFD (which would silently change what is stored, secret values included); so are a
 * lone UTF-16 surrogate (PostgreSQL refuses it, which was a 500), a key given twice (JSON.parse keeps
 * the last, a proxy may check the first), prototype keys (as Fastify's secure-json-parse did) and JSON
 * nested deeper than MAX_JSON_DEPTH. Fastify still reads the body, so its limit (413) and Content-Length
 * checks apply as before. No answer quotes the body: it may hold secrets.
 */
import type { FastifyInstance } from 'fastify';
import { ValidationError, type ValidationIssue } from '../errors.ts';
import { scanJsonText, type JsonTextProblem } from './json-body-problems.ts';
import { MAX_JSON_DEPTH } from './validation.ts';

// fatal: throw on the first ill-formed sequence. A leading byte order mark is skipped, as before.
const utf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * The offset of the first byte of the first ill-formed UTF-8 sequence (Unicode Table 3-7: no overlong
 * forms, no surrogates, nothing above U+10FFFF), or -1. Only run once TextDecoder has refused a body.
 */
export function firstInvalidUtf8(bytes: Uint8Array): number {
  let i = 0;
  while (i < bytes.length) {
    const lead = bytes[i]!;
    if (lead < 0x80) {
      i++;
      continue;
    }
    let more: number;
    let low = 0x80;
    let high = 0xbf;
    if (lead >= 0xc2 && lead <= 0xdf) more = 1;
    else if (lead >= 0xe0 && lead <= 0xef) {
      more = 2;
      if (lead === 0xe0) low = 0xa0;
      if (lead === 0xed) high = 0x9f;
    } else if (lead >= 0xf0 && lead <= 0xf4) {
      more = 3;
      if (lead === 0xf0) low = 0x90;
      if (lead === 0xf4) high = 0x8f;
    } else return i;
    for (let k = 1; k <= more; k++) {
      const next = bytes[i + k];
      if (next === undefined || next < (k === 1 ? low : 0x80) || next > (k === 1 ? high : 0xbf)) return i;
    }
    i += more + 1;
  }
  return -1;
}

/** A key in a `loc` is cut short like an echoed input: a 1 MB key must not come back in full. */
const shortKey = (segment: string | number): string | number =>
  typeof segment === 'string' && segment.length > 200 ? `${segment.slice(0, 200)}...` : segment;

/** A 422 for bytes that are not UTF-8, at the field they sit in when the text before them says so. */
function notUtf8(body: Buffer): ValidationError {
  const offset = firstInvalidUtf8(body);
  let loc: ValidationIssue['loc'] = ['body'];
  if (offset >= 0) {
    try {
      loc = ['body', ...scanJsonText(utf8.decode(body.subarray(0, offset)), MAX_JSON_DEPTH).pathAtEnd.map(shortKey)];
    } catch {
      // The prefix did not decode either: keep loc at the body.
    }
  }
  const where = offset >= 0 ? ` (byte ${offset} of the body)` : '';
  return new ValidationError([
    { type: 'string_unicode', loc, msg: `Input should be valid UTF-8 text: an invalid byte sequence${where}` },
  ]);
}

/** V8 quotes the text around a syntax error, which may hold a secret: only messages quoting nothing are kept. */
function syntaxMessage(error: unknown): string {
  const message = error instanceof Error ? error.message : '';
  if (message !== '' && !message.includes('"')) return `JSON decode error: ${message}`;
  const position = /at position (\d+)/.exec(message);
  return position ? `JSON decode error at position ${position[1]}` : 'JSON decode error';
}

const PROBLEMS: Record<JsonTextProblem['kind'], { type: string; msg: string }> = {
  duplicate_key: { type: 'json_duplicate_key', msg: 'Duplicate key: a key may appear only once in an object' },
  lone_surrogate: {
    type: 'string_unicode',
    msg: 'Input should be valid Unicode text: a lone UTF-16 surrogate (\\ud800 to \\udfff without its pair) is not',
  },
  forbidden_key: { type: 'json_invalid', msg: 'Object contains forbidden prototype property' },
  too_deep: { type: 'nesting_too_deep', msg: `Input must not nest deeper than ${MAX_JSON_DEPTH} levels` },
};

/**
 * Parses a JSON body or throws a ValidationError (422) saying what is wrong and where. An empty body is
 * no body (undefined) when `bodyless`: the operation reads none, and clients send
 * `Content-Type: application/json` on every write (the interface asks them to), with nothing after it.
 */
export function parseJsonBody(body: Buffer, bodyless = false): unknown {
  if (body.length === 0) {
    if (bodyless) return undefined;
    throw new ValidationError([
      { type: 'json_invalid', loc: ['body'], msg: 'Body is empty but Content-Type is application/json' },
    ]);
  }
  let text: string;
  try {
    text = utf8.decode(body);
  } catch {
    throw notUtf8(body);
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new ValidationError([{ type: 'json_invalid', loc: ['body'], msg: syntaxMessage(error) }]);
  }
  const { problems } = scanJsonText(text, MAX_JSON_DEPTH);
  if (problems.length > 0)
    throw new ValidationError(problems.map((p) => ({ ...PROBLEMS[p.kind], loc: ['body', ...p.path.map(shortKey)] })));
  return value;
}

/**
 * Replaces Fastify's JSON parser in `app` and the plugins registered in it after this call. A route
 * that declares no body schema reads no body: an empty one is taken as none, and a JSON body it is sent
 * (`{}`) is parsed and ignored (docs/api.md, "Conventions"; the OpenAPI document says so, openapi.ts).
 */
export function registerJsonBodyParser(app: FastifyInstance): void {
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, body, done) => {
    try {
      done(null, parseJsonBody(body as Buffer, request.routeOptions.schema?.body === undefined));
    } catch (error) {
      done(error as Error, undefined);
    }
  });
}
