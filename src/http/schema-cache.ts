/**
 * One compiled function per distinct schema, for the app's validators and serializers alike, each
 * compiled when first used.
 *
 * Fastify compiles every route's schemas when the route is registered: a validator for each part of a
 * request and a serializer for each status of its responses. Most of those schemas are the same ones
 * again (registerOpenApiConventions gives every route the error envelope of 400, 408, 417, 422, 431,
 * 500 and 503, and the body and query schemas repeat between routes), each a new object: Fastify's own
 * serializer compiler and Ajv (which caches by object) compiled each of them anew, about 1,700
 * serializers of 80 distinct schemas and 240 validators of 70 at every start of the service (about 0.55
 * of the 1.3 CPU-seconds that buildApp and ready() took; 0.8 with this). A compiled function depends
 * only on its schema's content (and on the schemas the app shares by id, which stay the same for a
 * compiler), so one compiled for a schema serves every route whose schema reads the same.
 *
 * Even those 150 compilations were most of a start's work (0.6 of the 0.9 CPU-seconds of building the
 * app, measured with a database ready), for routes most processes never call: a replica that serves a
 * few routes, every test of the suite (each builds the app). So each is compiled when its route first
 * needs it, in the first request's time (tens of milliseconds of CPU: bench/app-start.ts). What that
 * gives up: a schema the compiler refuses would no longer stop the start, but fail its route's requests.
 * `DeferredCompiles.all()` compiles every one at once; the suite does so for the whole app
 * (test/http/schema-cache.test.ts), so no such schema ships, and checks that a route's first request is
 * refused as a later one is.
 */
import { SerializerSelector } from '@fastify/fast-json-stringify-compiler';
import type { FastifyServerOptions } from 'fastify';

/**
 * The schema's text when it says everything a compiler reads of it, else null (it is then compiled on
 * its own): plain objects, arrays, strings, finite numbers, booleans and null only. Anything JSON would
 * leave out or change (`undefined`, a function, an instance of a class, a value with `toJSON`) makes two
 * schemas of one text possibly different ones. Symbol-keyed properties (TypeBox's) are not read by
 * Ajv or fast-json-stringify, and are left out of the text.
 */
export function schemaKey(schema: unknown): string | null {
  let exact = true;
  const text = JSON.stringify(schema, function (this: Record<string, unknown>, key: string, value: unknown) {
    const original = this[key];
    if (original === null || typeof original === 'string' || typeof original === 'boolean') return value;
    if (typeof original === 'number') {
      if (!Number.isFinite(original)) exact = false;
      return value;
    }
    if (typeof original === 'object') {
      const proto: unknown = Object.getPrototypeOf(original);
      if (!(Array.isArray(original) || proto === Object.prototype || proto === null)) exact = false;
      if ('toJSON' in original) exact = false;
      return value;
    }
    exact = false;
    return value;
  });
  return exact && typeof text === 'string' ? text : null;
}

/**
 * The compilations an app has deferred, each run when first needed (`defer`), or all at once (`all`).
 * One per app: the app's validator compiler and serializer factory share it.
 */
export class DeferredCompiles {
  readonly #pending = new Set<() => unknown>();

  /** `compile`, run when the returned function is first called; its result kept. A throw is not kept. */
  defer<T>(compile: () => T): () => T {
    let compiled: { value: T } | null = null;
    const run = (): T => {
      if (compiled === null) {
        compiled = { value: compile() };
        this.#pending.delete(run);
      }
      return compiled.value;
    };
    this.#pending.add(run);
    return run;
  }

  /** Runs every compilation not yet run; the first that throws throws here. How many ran. */
  all(): number {
    const pending = [...this.#pending];
    for (const run of pending) run();
    return pending.length;
  }
}

/** Compiles `schema` with `compile` once per key (null: every time). */
export function compileOnce<T>(cache: Map<string, T>, key: string | null, compile: () => T): T {
  if (key === null) return compile();
  let compiled = cache.get(key);
  if (compiled === undefined) {
    compiled = compile();
    cache.set(key, compiled);
  }
  return compiled;
}

type SerializerFactory = NonNullable<
  NonNullable<NonNullable<FastifyServerOptions['schemaController']>['compilersFactory']>['buildSerializer']
>;

/**
 * Fastify's own serializer factory (fast-json-stringify), that compiles a response schema once for
 * the app, when a response first needs it: the same function for every route and status whose schema,
 * and whose app's shared schemas, read the same. Fastify builds a new compiler whenever a context of the app added shared schemas, so
 * the cache is the factory's, keyed by those too.
 */
export function serializerFactoryOnce(deferred: DeferredCompiles): SerializerFactory {
  const build = SerializerSelector();
  const compiled = new Map<string, ReturnType<ReturnType<SerializerFactory>>>();
  return (externalSchemas, options) => {
    const compile = build(externalSchemas, options);
    const parts = [externalSchemas, options].map((part) => (part === undefined ? 'undefined' : schemaKey(part)));
    const context = parts.includes(null) ? null : parts.join('\n');
    return (route) => {
      const serializer = deferred.defer(() => {
        const own = context === null ? null : schemaKey(route.schema);
        return compileOnce(compiled, own === null ? null : `${context}\n${own}`, () => compile(route));
      });
      return (data) => serializer()(data);
    };
  };
}
