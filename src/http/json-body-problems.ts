/**
 * What JSON.parse does not say about a JSON text: a key given twice in one object (JSON.parse keeps the
 * last, a proxy or another parser may keep the first, so one body would be read two ways), a string
 * holding a lone UTF-16 surrogate (written as a \u escape; not Unicode, and PostgreSQL refuses it),
 * prototype keys, and nesting deeper than the service takes. One pass over the text with an explicit
 * stack, so a hostile depth cannot overflow the call stack, and each problem located by its path.
 */

export type JsonPath = (string | number)[];

export type JsonTextProblem =
  | { kind: 'duplicate_key'; path: JsonPath }
  | { kind: 'lone_surrogate'; path: JsonPath }
  | { kind: 'forbidden_key'; path: JsonPath }
  | { kind: 'too_deep'; path: JsonPath };

interface Frame {
  /** Keys seen so far, for objects; null for arrays. */
  keys: Set<string> | null;
  /** The key whose value is being read (objects), or the index of the item (arrays). */
  at: string | number | undefined;
  /** The key this container is the value of: `constructor` matters for prototype poisoning. */
  parentKey: string | number | undefined;
}

/**
 * A high surrogate not followed by a low one, or a low one not preceded by a high one. Text decoded as
 * strict UTF-8 holds none, so only strings with a \u escape are tested.
 */
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/** The index just past the closing quote of the string starting at `start`, or -1 if it is not closed. */
function endOfString(text: string, start: number): number {
  for (let i = start + 1; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === BACKSLASH) i++;
    else if (c === QUOTE) return i + 1;
  }
  return -1;
}

/** The string a JSON string token stands for; undefined for a token that is cut short or malformed. */
function decode(token: string): string | undefined {
  if (!token.includes('\\')) return token.slice(1, -1);
  try {
    return JSON.parse(token) as string;
  } catch {
    return undefined;
  }
}

function pathOf(stack: Frame[]): JsonPath {
  const path: JsonPath = [];
  for (const frame of stack) if (frame.at !== undefined) path.push(frame.at);
  return path;
}

export interface ScanResult {
  problems: JsonTextProblem[];
  /** Where the text ends: the path of the value being read at its last character. */
  pathAtEnd: JsonPath;
}

/**
 * Scans `text`: JSON decoded as strict UTF-8 that JSON.parse accepted. It also runs over a prefix of one
 * (to say where a bad byte sat): it never throws, and reports the path it stopped in.
 * Stops after `maxProblems` problems, or at the first container nested deeper than `maxDepth`.
 */
export function scanJsonText(text: string, maxDepth: number, maxProblems = 20): ScanResult {
  const problems: JsonTextProblem[] = [];
  const stack: Frame[] = [];
  let expectKey = false;
  let i = 0;
  const n = text.length;
  while (i < n && problems.length < maxProblems) {
    const c = text.charCodeAt(i);
    const top = stack[stack.length - 1];
    if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
      if (stack.length >= maxDepth) {
        problems.push({ kind: 'too_deep', path: [] });
        break;
      }
      const isObject = c === 0x7b;
      stack.push({ keys: isObject ? new Set() : null, at: isObject ? undefined : 0, parentKey: top?.at });
      expectKey = isObject;
      i++;
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) {
      stack.pop();
      expectKey = false;
      i++;
    } else if (c === 0x2c /* , */) {
      if (top?.keys) {
        top.at = undefined;
        expectKey = true;
      } else if (top && typeof top.at === 'number') top.at++;
      i++;
    } else if (c === 0x3a /* : */) {
      expectKey = false;
      i++;
    } else if (c === QUOTE) {
      const end = endOfString(text, i);
      const token = text.slice(i, end === -1 ? n : end);
      const value = end === -1 ? undefined : decode(token);
      if (expectKey && top?.keys) {
        if (value !== undefined) {
          const path = [...pathOf(stack), value];
          if (top.keys.has(value)) problems.push({ kind: 'duplicate_key', path });
          top.keys.add(value);
          if (token.includes('\\u') && LONE_SURROGATE.test(value))
            problems.push({ kind: 'lone_surrogate', path: pathOf(stack) });
          // The two shapes secure-json-parse (Fastify's default) refuses: they poison prototypes once merged.
          if (value === '__proto__' || (value === 'prototype' && top.parentKey === 'constructor'))
            problems.push({ kind: 'forbidden_key', path });
          top.at = value;
        }
      } else if (value !== undefined && token.includes('\\u') && LONE_SURROGATE.test(value)) {
        problems.push({ kind: 'lone_surrogate', path: pathOf(stack) });
      }
      i = end === -1 ? n : end;
    } else i++;
  }
  return { problems, pathAtEnd: pathOf(stack) };
}
