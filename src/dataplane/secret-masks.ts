/**
 * Masking a revision's secret values in its logs (docs/logs.md, "Secret masking"): what to look for
 * for each value, and how to replace it without leaving a part of it behind.
 *
 * Besides the value itself, the forms an app most often prints a secret in by accident are masked: its
 * base64 (standard and URL-safe, padded or not, and inside a longer base64 text such as a Basic
 * credential, at each of the three offsets base64 can put it at) and its URL encoding (whatever set of
 * characters the encoder leaves alone, with either case of hex digits, a space as %20 or +). Masking
 * cannot promise more: code that can read a secret can always print it in a form no mask knows.
 */

export const REDACTED = '********';
/** Lines of a multi-line secret (a PEM key) are masked one by one when at least this long. */
const MIN_SECRET_LINE_CHARS = 8;
/**
 * Encoded forms shorter than this are not masked: the base64 of a 2-character secret is 4 common
 * characters, and masking those everywhere would mangle unrelated output.
 */
const MIN_ENCODED_CHARS = 8;

const toUrlSafe = (base64: string): string => base64.replaceAll('+', '-').replaceAll('/', '_');

/**
 * The base64 characters that encode `value` whatever comes before and after it in a longer text, for
 * each offset (0, 1 or 2 bytes past a 3-byte boundary): the characters whose 6 bits all come from the
 * value. Each is a substring of the base64 of every text that holds the value at that offset.
 */
function base64Fragments(bytes: Buffer): string[] {
  const fragments: string[] = [];
  for (let offset = 0; offset < 3; offset++) {
    const padded = Buffer.concat([Buffer.alloc(offset), bytes, Buffer.alloc(2)]);
    const first = Math.ceil((8 * offset) / 6);
    const end = Math.floor((8 * (offset + bytes.length)) / 6);
    fragments.push(padded.toString('base64').slice(first, end));
  }
  return fragments;
}

/** The base64 forms of `value`: whole (padded and not), and as part of a longer text. */
function base64Forms(value: string): string[] {
  const bytes = Buffer.from(value, 'utf8');
  const whole = bytes.toString('base64');
  const standard = [whole, whole.replace(/=+$/, ''), ...base64Fragments(bytes)];
  return [...standard, ...standard.map(toUrlSafe)];
}

const REGEX_SPECIAL = /[\\^$.*+?()[\]{}|/-]/g;
const hexBoth = (byte: number): string => {
  const hex = byte.toString(16).toUpperCase().padStart(2, '0');
  return [...hex].map((digit) => (/[A-F]/.test(digit) ? `[${digit}${digit.toLowerCase()}]` : digit)).join('');
};

/**
 * A pattern for `value` URL-encoded by any common encoder: each character as itself or as the
 * percent-encoding of its UTF-8 bytes (hex digits in either case), a space also as `+`. Letters and
 * digits, which no common encoder escapes, stand for themselves. Null when URL encoding cannot change
 * the value, or when the encoded value is too short to mask safely.
 */
function urlPattern(value: string): RegExp | null {
  if (/^[A-Za-z0-9._-]*$/.test(value) || encodeURIComponent(value).length < MIN_ENCODED_CHARS) return null;
  let source = '';
  let groups = 0;
  for (const char of value) {
    if (/[A-Za-z0-9]/.test(char)) {
      source += char;
      continue;
    }
    if (char === '%') {
      // `%` and `%25` share their start: taken atomically (a lookahead and its backreference), so that a
      // secret of many `%` cannot make the match backtrack exponentially over output written to exploit it.
      groups += 1;
      source += `(?=(%(?:25)?))\\${groups}`;
      continue;
    }
    const percent = [...Buffer.from(char, 'utf8')].map((byte) => `%${hexBoth(byte)}`).join('');
    const alternatives = [char.replace(REGEX_SPECIAL, '\\$&'), percent];
    if (char === ' ') alternatives.push('\\+');
    source += `(?:${alternatives.join('|')})`;
  }
  return new RegExp(source, 'g');
}

/** Each value to mask and the lines of a multi-line one (output is only ever seen a line at a time). */
function secretTexts(redact: readonly string[]): string[] {
  const texts = new Set<string>();
  for (const value of redact) {
    if (value.length === 0) continue;
    texts.add(value);
    if (value.includes('\n')) {
      for (const part of value.split(/\r?\n/)) if (part.length >= MIN_SECRET_LINE_CHARS) texts.add(part);
    }
  }
  return [...texts];
}

export interface Redactor {
  redact(text: string): string;
  /**
   * Where to cut `text` at or before `at` so that no secret is split by the cut (a split secret would
   * leave its first part unmasked). With `truncated`, the text's end is not the line's end, so a secret
   * that starts near the end and would continue past it counts as split too.
   */
  safeCut(text: string, at: number, truncated: boolean): number;
  /** Length of the longest literal form looked for. */
  longest: number;
}

export function createRedactor(redact: readonly string[]): Redactor {
  const texts = secretTexts(redact);
  // Literal forms, longest first so that a secret containing another is masked whole. The canonical
  // URL encoding is among them too, for the partial match at the end of a truncated text.
  const literal = new Set<string>(texts);
  for (const text of texts) {
    for (const form of [...base64Forms(text), encodeURIComponent(text)])
      if (form.length >= MIN_ENCODED_CHARS) literal.add(form);
  }
  const values = [...literal].sort((a, b) => b.length - a.length);
  // URL patterns, of the longest secrets first; each also matches its secret as written.
  const patterns = texts
    .sort((a, b) => b.length - a.length)
    .map(urlPattern)
    .filter((pattern): pattern is RegExp => pattern !== null);

  return {
    longest: values[0]?.length ?? 0,
    redact(text) {
      let out = text;
      for (const pattern of patterns) out = out.replace(pattern, REDACTED);
      for (const value of values) if (out.includes(value)) out = out.replaceAll(value, REDACTED);
      return out;
    },
    safeCut(text, at, truncated) {
      let cut = at;
      for (let moved = true; moved;) {
        moved = false;
        for (const pattern of patterns) {
          for (const match of text.matchAll(pattern)) {
            if (match.index >= cut) break;
            if (match.index + match[0].length > cut) {
              cut = match.index;
              moved = true;
              break;
            }
          }
        }
        for (const value of values) {
          const from = Math.max(0, cut - value.length + 1);
          const found = text.indexOf(value, from);
          if (found !== -1 && found < cut) {
            cut = found;
            moved = true;
            continue;
          }
          if (!truncated) continue;
          for (let p = Math.max(from, text.length - value.length + 1); p < cut; p += 1) {
            if (value.startsWith(text.slice(p))) {
              cut = p;
              moved = true;
              break;
            }
          }
        }
      }
      // Never split a surrogate pair: half a character is not valid UTF-8 for PostgreSQL.
      const code = text.charCodeAt(cut - 1);
      return cut > 0 && code >= 0xd800 && code <= 0xdbff ? cut - 1 : cut;
    },
  };
}
