/**
 * fast-check arbitraries made from the JSON schemas of the OpenAPI document: values a schema accepts,
 * and values it refuses (a wrong type, a missing field, a string too long, a number out of range, odd
 * Unicode). Used by the fuzz test of the whole API (openapi-fuzz.test.ts); written by hand for the
 * subset of JSON Schema the service's document uses.
 */
import fc from 'fast-check';

export interface Schema {
  $ref?: string;
  type?: string | string[];
  enum?: unknown[];
  const?: unknown;
  format?: string;
  pattern?: string;
  minLength?: number;
  maxLength?: number;
  minimum?: number;
  maximum?: number;
  minItems?: number;
  maxItems?: number;
  uniqueItems?: boolean;
  items?: Schema;
  properties?: Record<string, Schema>;
  required?: string[];
  additionalProperties?: boolean | Schema;
  anyOf?: Schema[];
  oneOf?: Schema[];
}

export interface Generators {
  /** A value the schema accepts. */
  valid(schema: Schema | undefined): fc.Arbitrary<unknown>;
  /** A value the schema most likely refuses (or, for a schema that takes anything, any value). */
  invalid(schema: Schema | undefined): fc.Arbitrary<unknown>;
}

/** Strings that have broken services before: control and format characters, RTL, emoji, NUL, surrogates. */
export const ODD_STRINGS = [
  '',
  ' ',
  '\u0000',
  'a\u0000b',
  '\uFEFFbom',
  '\u202Eevil',
  'e\u0301',
  '\u00e9',
  '😀',
  '👩‍👩‍👧‍👦',
  '\uD800',
  '\uDFFF',
  '\t\r\n',
  '%00',
  '%',
  '../../etc/passwd',
  "'; drop table deployments; --",
  '${jndi:ldap://x}',
  '<script>alert(1)</script>',
  '\\',
  '"',
  '0',
  '-1',
  '1e309',
  'null',
  'true',
  '[]',
  '{}',
  'ＡＢＣ',
  '𝔘𝔫𝔦𝔠𝔬𝔡𝔢',
];

/** Any code point, lone surrogates included (fast-check's own `binary` unit takes seconds to set up). */
const anyCodePoint = fc.integer({ min: 0, max: 0x10ffff }).map((c) => String.fromCodePoint(c));

/** Any string, with odd ones and odd characters often. */
export const oddString = (maxLength = 40): fc.Arbitrary<string> =>
  fc.oneof(
    fc.constantFrom(...ODD_STRINGS),
    fc.string({ unit: anyCodePoint, maxLength }),
    fc.string({ unit: 'grapheme', maxLength }),
    fc.string({ maxLength }),
  );

const MAX_DEPTH = 6;

function types(schema: Schema): string[] {
  if (schema.type === undefined) return [];
  return Array.isArray(schema.type) ? schema.type : [schema.type];
}

/** `resolve` follows a `$ref` of the document; `uuids` are ids that exist, used as often as random ones. */
export function generators(resolve: (ref: string) => Schema, uuids: () => string[]): Generators {
  const deref = (schema: Schema | undefined): Schema => {
    let s = schema ?? {};
    for (let i = 0; i < 10 && s.$ref; i++) s = resolve(s.$ref);
    return s;
  };

  function validString(s: Schema): fc.Arbitrary<string> {
    const minLength = s.minLength ?? 0;
    const maxLength = Math.min(s.maxLength ?? 40, Math.max(minLength, 40));
    if (s.format === 'uuid') {
      const known = uuids();
      return known.length > 0 ? fc.oneof(fc.constantFrom(...known), fc.uuid()) : fc.uuid();
    }
    if (s.format === 'date-time')
      return fc
        .date({ min: new Date('2000-01-01'), max: new Date('2100-01-01'), noInvalidDate: true })
        .map((d) => d.toISOString());
    // Not fc.webUrl(): it takes seconds to set up.
    if (s.format === 'uri')
      return fc.stringMatching(/^https?:\/\/[a-z]{1,12}(\.[a-z]{2,6}){1,2}(\/[a-z0-9._-]{1,12}){0,3}$/);
    if (s.pattern !== undefined) {
      try {
        const matching = fc.stringMatching(new RegExp(s.pattern));
        return matching.map((v) =>
          v.length > maxLength && v.length > minLength ? v.slice(0, Math.max(minLength, maxLength)) : v,
        );
      } catch {
        // A pattern fast-check cannot generate from (lookaheads): plain text, which may or may not match.
        return fc.stringMatching(/^[a-z][a-z0-9_.-]{0,20}$/);
      }
    }
    return fc.oneof(fc.string({ minLength, maxLength }), fc.string({ unit: 'grapheme', minLength, maxLength }));
  }

  function valid(schema: Schema | undefined, depth = 0): fc.Arbitrary<unknown> {
    const s = deref(schema);
    if (s.const !== undefined) return fc.constant(s.const);
    if (s.enum !== undefined) return fc.constantFrom(...s.enum);
    const branches = s.anyOf ?? s.oneOf;
    if (branches) return fc.oneof(...branches.map((b) => valid(b, depth + 1)));
    const ts = types(s);
    if (ts.length > 1) return fc.oneof(...ts.map((t) => valid({ ...s, type: t }, depth)));
    switch (ts[0]) {
      case 'null':
        return fc.constant(null);
      case 'boolean':
        return fc.boolean();
      case 'integer':
        return fc.integer({ min: s.minimum ?? -1_000_000, max: s.maximum ?? 1_000_000 });
      case 'number':
        return fc.double({ min: s.minimum ?? -1e6, max: s.maximum ?? 1e6, noNaN: true, noDefaultInfinity: true });
      case 'string':
        return validString(s);
      case 'array': {
        const minLength = s.minItems ?? 0;
        const maxLength = Math.max(minLength, Math.min(s.maxItems ?? 3, depth >= MAX_DEPTH ? minLength : 3));
        const item = valid(s.items, depth + 1);
        return s.uniqueItems
          ? fc.uniqueArray(item, { minLength, maxLength, selector: (v) => JSON.stringify(v) })
          : fc.array(item, { minLength, maxLength });
      }
      case 'object':
      case undefined: {
        if (s.properties === undefined) {
          if (ts[0] === undefined) return fc.jsonValue({ maxDepth: 2 });
          const values =
            typeof s.additionalProperties === 'object'
              ? valid(s.additionalProperties, depth + 1)
              : fc.jsonValue({ maxDepth: 1 });
          return fc.dictionary(fc.string({ minLength: 1, maxLength: 20 }), values, {
            maxKeys: depth >= MAX_DEPTH ? 0 : 3,
          });
        }
        const required = s.required ?? [];
        // Deep down only the required fields, so that recursive shapes stay small.
        const names = depth >= MAX_DEPTH ? required : Object.keys(s.properties);
        const model = Object.fromEntries(names.map((name) => [name, valid(s.properties![name], depth + 1)]));
        return fc.record(model, { requiredKeys: required.filter((name) => name in model) });
      }
      default:
        return fc.jsonValue({ maxDepth: 2 });
    }
  }

  /** A value of another JSON type than the schema's. */
  function wrongType(s: Schema): fc.Arbitrary<unknown> {
    const ts = types(s);
    const others: fc.Arbitrary<unknown>[] = [];
    if (!ts.includes('string')) others.push(oddString());
    if (!ts.includes('integer') && !ts.includes('number'))
      others.push(fc.oneof(fc.integer(), fc.double({ noNaN: true, noDefaultInfinity: true })));
    if (!ts.includes('boolean')) others.push(fc.boolean());
    if (!ts.includes('null')) others.push(fc.constant(null));
    if (!ts.includes('array')) others.push(fc.array(fc.jsonValue({ maxDepth: 1 }), { maxLength: 3 }));
    if (!ts.includes('object'))
      others.push(fc.dictionary(fc.string({ maxLength: 8 }), fc.jsonValue({ maxDepth: 1 }), { maxKeys: 3 }));
    return others.length > 0 ? fc.oneof(...others) : fc.jsonValue({ maxDepth: 2 });
  }

  function invalid(schema: Schema | undefined, depth = 0): fc.Arbitrary<unknown> {
    const s = deref(schema);
    const ts = types(s);
    const out: fc.Arbitrary<unknown>[] = [wrongType(s)];
    if (s.enum !== undefined) out.push(oddString(20).filter((v) => !s.enum!.includes(v)));
    if (ts.includes('string')) {
      out.push(oddString());
      // Over the limit, in characters of one, two and four bytes of UTF-8.
      const over = (s.maxLength ?? 1000) + 1;
      out.push(fc.constantFrom('x', 'é', '😀').map((c) => c.repeat(over)));
      if (s.minLength !== undefined && s.minLength > 0) out.push(fc.constant(''));
    }
    if (ts.includes('integer') || ts.includes('number')) {
      const bounds: number[] = [1e20, -1e20, 1.5, -0, Number.MAX_SAFE_INTEGER + 2];
      if (s.maximum !== undefined) bounds.push(s.maximum + 1);
      if (s.minimum !== undefined) bounds.push(s.minimum - 1);
      out.push(fc.constantFrom(...bounds));
    }
    if (ts.includes('array') && depth < MAX_DEPTH) {
      out.push(fc.array(invalid(s.items, depth + 1), { minLength: 1, maxLength: 2 }));
      if (s.maxItems !== undefined)
        out.push(fc.array(valid(s.items, MAX_DEPTH), { minLength: s.maxItems + 1, maxLength: s.maxItems + 1 }));
    }
    if (s.properties !== undefined && depth < MAX_DEPTH) {
      const names = Object.keys(s.properties);
      const base = valid(s, MAX_DEPTH - 1) as fc.Arbitrary<Record<string, unknown>>;
      // One field broken, the others as they should be.
      out.push(
        fc
          .constantFrom(...names)
          .chain((name) =>
            fc
              .tuple(base, invalid(s.properties![name], depth + 1))
              .map(([object, bad]) => ({ ...object, [name]: bad })),
          ),
      );
      // A required field missing.
      if ((s.required ?? []).length > 0)
        out.push(
          fc
            .tuple(base, fc.constantFrom(...s.required!))
            .map(([object, name]) => Object.fromEntries(Object.entries(object).filter(([k]) => k !== name))),
        );
      // Fields nobody declared, with odd names (ignored by the contract, so this one may well be valid).
      out.push(
        fc
          .tuple(base, fc.dictionary(oddString(10), fc.jsonValue({ maxDepth: 1 }), { minKeys: 1, maxKeys: 3 }))
          .map(([object, extra]) => ({ ...extra, ...object })),
      );
    }
    return fc.oneof(...out);
  }

  return { valid: (schema) => valid(schema), invalid: (schema) => invalid(schema) };
}
