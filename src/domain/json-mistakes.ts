/**
 * JSON a user wrote (an app config, a package.json), parsed with the line and column of its first
 * mistake. `JSON.parse` gives no position for some mistakes and words them differently from one Node
 * version to the next (the service and a user's `slipway` may run different ones), so when it refuses
 * a text, a small scanner finds where and says why in words of its own. Pure.
 */

export type JsonText = { ok: true; value: unknown } | { ok: false; line: number; column: number; reason: string };

/** Thrown inside the scanner only, to stop at the first mistake; caught in `firstMistake`. */
class Mistake extends Error {
  constructor(
    readonly at: number,
    readonly reason: string,
  ) {
    super(reason);
    this.name = 'Mistake';
  }
}

/** A character for a message: printable ones quoted, others as their code point (never raw bytes). */
function character(c: string): string {
  const code = c.codePointAt(0)!;
  return code >= 0x20 && code !== 0x7f && code < 0xd800
    ? `'${c}'`
    : `U+${code.toString(16).toUpperCase().padStart(4, '0')}`;
}

/** Where the first mistake of a text JSON.parse refused is, and what it is. */
function firstMistake(text: string): Mistake {
  let i = 0;
  const fail = (reason: string): never => {
    throw new Mistake(i, reason);
  };
  const space = () => {
    while (i < text.length && ' \t\n\r'.includes(text[i]!)) i++;
  };
  const string = () => {
    i++;
    for (;;) {
      const c = text[i];
      if (c === undefined) fail('the file ends inside a string (a closing " is missing)');
      else if (c === '"') return void i++;
      else if (c === '\\') {
        const next = text[i + 1];
        if (next !== undefined && '"\\/bfnrt'.includes(next)) i += 2;
        else if (next === 'u' && /^[0-9a-fA-F]{4}$/.test(text.slice(i + 2, i + 6))) i += 6;
        else fail('a backslash starts an escape JSON does not have (\\n, \\", \\\\, \\uXXXX, ...)');
      } else if (c.charCodeAt(0) < 0x20) fail(`${character(c)} inside a string: write a line break as \\n`);
      else i++;
    }
  };
  const NUMBER = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/y;
  const value = (): void => {
    space();
    const c = text[i];
    if (c === undefined) return fail('the file ends where a value is expected');
    if (c === '{')
      return members('}', () => {
        space();
        if (text[i] === undefined) fail('the file ends inside an object (a closing } is missing)');
        if (text[i] !== '"') fail(`expected a property name in double quotes, found ${character(text[i]!)}`);
        string();
        space();
        if (text[i] !== ':') fail("expected ':' after the property name");
        i++;
        value();
      });
    if (c === '[') return members(']', value);
    if (c === '"') return string();
    if (c === '-' || (c >= '0' && c <= '9')) {
      NUMBER.lastIndex = i;
      if (!NUMBER.test(text)) fail('a malformed number');
      i = NUMBER.lastIndex;
      return;
    }
    for (const word of ['true', 'false', 'null']) if (text.startsWith(word, i)) return void (i += word.length);
    fail(`unexpected ${character(c)} where a value is expected`);
  };
  const members = (close: '}' | ']', member: () => void) => {
    const what = close === '}' ? 'object' : 'array';
    i++;
    space();
    if (text[i] === close) return void i++;
    for (;;) {
      member();
      space();
      const c = text[i];
      if (c === ',') {
        i++;
        space();
        if (text[i] === close) fail(`a comma before the closing ${close} (JSON allows no trailing comma)`);
        continue;
      }
      if (c === close) return void i++;
      if (c === undefined) fail(`the file ends inside an ${what} (a closing ${close} is missing)`);
      fail(
        `expected ',' or '${close}' after ${close === '}' ? 'a property value' : 'an element'}, found ${character(c!)}`,
      );
    }
  };
  try {
    value();
    space();
    if (i < text.length) fail('more text after the end of the JSON value');
  } catch (error) {
    if (error instanceof Mistake) return error;
    throw error;
  }
  // JSON.parse refused what the scanner accepts: a disagreement, reported where the text ends.
  return new Mistake(text.length, 'not valid JSON');
}

/** Parses `text` (a leading byte-order mark, which editors on Windows like to write, is allowed). */
export function parseJsonText(text: string): JsonText {
  const body = text.replace(/^\uFEFF/, '');
  try {
    return { ok: true, value: JSON.parse(body) as unknown };
  } catch {
    const { at, reason } = firstMistake(body);
    const before = body.slice(0, at);
    const line = before.split('\n').length;
    const column = at - (before.lastIndexOf('\n') + 1) + 1;
    return { ok: false, line, column, reason };
  }
}

/** "line 4, column 3: expected ..." for a refused text. */
export const jsonMistake = (result: Extract<JsonText, { ok: false }>): string =>
  `line ${result.line}, column ${result.column}: ${result.reason}`;
