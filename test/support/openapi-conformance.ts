/**
 * Every answer the tests receive through the shared callers (`client` in test/helpers.ts, `httpCaller`
 * in test/support/http-caller.ts) is checked against the OpenAPI document the app serves: the status is
 * one the operation documents, the body is of a documented media type and matches the response schema,
 * and the headers the response declares required are there. A mismatch fails the test that made the
 * request, naming the operation and the path of the offending field, so that the document cannot drift
 * from the answers (docs/api.md, "The OpenAPI document"). The fuzz test (test/http/openapi-fuzz.test.ts)
 * checks its answers with the same `OpenApiConformance`.
 *
 * A request that no operation takes (an unknown path or method under the API's prefixes) must get the
 * error envelope with 404 `route_not_found`, or 405 `method_not_allowed` and `Allow`. Requests outside
 * the API (the dashboard's pages, /docs, /openapi.json, deployed apps under /apps/ or on their own host
 * names) are not checked: the document does not describe them.
 *
 * One document per process (apps with the same routes share it; a worker-only app serves fewer), and
 * one compiled validator per operation, status and media type, made when first needed.
 */
import assert from 'node:assert/strict';
import { Ajv2020, type ErrorObject, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import type { FastifyInstance } from 'fastify';

// ajv-formats ships CommonJS with a default export.
const addFormats = addFormatsModule as unknown as (ajv: Ajv2020) => Ajv2020;

interface Header {
  required?: boolean;
}
export interface DocumentedResponse {
  $ref?: string;
  description?: string;
  headers?: Record<string, Header>;
  content?: Record<string, { schema?: unknown }>;
}
export interface DocumentedOperation {
  operationId?: string;
  responses: Record<string, DocumentedResponse>;
}
export interface OpenApiDocument {
  paths: Record<string, Record<string, DocumentedOperation>>;
  components: { schemas?: Record<string, unknown>; responses?: Record<string, DocumentedResponse> };
}

/** An answer as a caller saw it. */
export interface ObservedAnswer {
  method: string;
  /** The path and query the request was sent to. */
  url: string;
  /** The Host the request named, when the caller set one. */
  host?: string;
  status: number;
  /** A response header by its lower-case name. */
  header(name: string): string | undefined;
  body: string;
}

const OPERATION_METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];

interface Template {
  template: string;
  segments: string[];
  pattern: RegExp;
}

const isParameter = (segment: string): boolean => /^\{[^}]+\}$/.test(segment);
const escape = (text: string): string => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** Hosts that are the service itself (inject's default, a test's listening port). */
const SERVICE_HOSTS = new Set(['localhost', '127.0.0.1', '[::1]']);

export class OpenApiConformance {
  private readonly ajv: Ajv2020;
  private readonly templates: Template[];
  /** The first segments of the documented paths (`v2`, `healthz`...): the API's part of the URL space. */
  private readonly prefixes: Set<string>;
  private readonly validators = new Map<string, ValidateFunction>();

  constructor(private readonly document: OpenApiDocument) {
    this.ajv = new Ajv2020({ strict: false, allErrors: true, validateSchema: false });
    addFormats(this.ajv);
    // `writeOnly` is only an annotation to JSON Schema, but OpenAPI (and the clients and fuzzers that read
    // it) take it to mean that answers never carry the field: a value that reaches such a schema in an
    // answer is a mismatch.
    const writeOnly = Object.assign(
      (flag: boolean) => {
        writeOnly.errors = flag
          ? [{ keyword: 'writeOnly', message: 'is write-only, yet the answer carries it', params: {} }]
          : [];
        return !flag;
      },
      { errors: [] as Partial<ErrorObject>[] },
    );
    this.ajv.removeKeyword('writeOnly');
    this.ajv.addKeyword({ keyword: 'writeOnly', schemaType: 'boolean', errors: true, validate: writeOnly });
    // The components under the document's own name: the `#/components/...` references inside resolve there.
    this.ajv.addSchema({ components: document.components }, 'openapi.json');
    this.templates = Object.keys(document.paths).map((template) => {
      const segments = template.split('/');
      const source = segments.map((s) => (isParameter(s) ? '[^/]+' : escape(s))).join('/');
      return { template, segments, pattern: new RegExp(`^${source}$`) };
    });
    this.prefixes = new Set(Object.keys(document.paths).map((p) => p.split('/')[1]!));
  }

  /** The documented path a request path falls under: a literal segment wins over a parameter, as in the router. */
  private templateOf(path: string): Template | undefined {
    const matches = this.templates.filter((t) => t.pattern.test(path));
    const rank = (t: Template) => t.segments.map((s) => (isParameter(s) ? '1' : '0')).join('');
    return matches.sort((a, b) => rank(a).localeCompare(rank(b)))[0];
  }

  private response(reference: DocumentedResponse): DocumentedResponse {
    if (reference.$ref === undefined) return reference;
    const name = reference.$ref.replace('#/components/responses/', '');
    const shared = this.document.components.responses?.[name];
    assert.ok(shared, `${reference.$ref} resolves`);
    return shared;
  }

  private validator(key: string, schema: unknown): ValidateFunction {
    let validate = this.validators.get(key);
    if (validate === undefined) {
      // References point into the document added in the constructor.
      const anchored = JSON.parse(
        JSON.stringify(schema ?? {}).replaceAll('"#/components/', '"openapi.json#/components/'),
      ) as object;
      validate = this.ajv.compile(anchored);
      this.validators.set(key, validate);
    }
    return validate;
  }

  /** What is wrong with an answer by the document; empty when nothing is, or when the document does not describe it. */
  problems(answer: ObservedAnswer): string[] {
    const host = answer.host?.replace(/:\d+$/, '').toLowerCase();
    if (host !== undefined && !SERVICE_HOSTS.has(host)) return [];
    const path = answer.url.split('?')[0]!;
    if (!this.prefixes.has(path.split('/')[1]!)) return [];
    const method = answer.method.toLowerCase();
    const template = this.templateOf(path);
    // HEAD is GET without the body (Fastify adds it to every GET route; the document lists the GET).
    const operation =
      template === undefined ? undefined : this.document.paths[template.template]![method === 'head' ? 'get' : method];
    if (template === undefined || operation === undefined || !OPERATION_METHODS.includes(method))
      return this.unroutedProblems(answer, template);
    return this.operationProblems(`${answer.method.toUpperCase()} ${template.template}`, operation, answer);
  }

  /** An answer of the operation `route` (`GET /v2/deployments/{deployment_id}`). */
  operationProblems(route: string, operation: DocumentedOperation, answer: ObservedAnswer): string[] {
    const status = String(answer.status);
    const documented = operation.responses[status] ?? operation.responses[`${status[0]}XX`];
    const name = `${route} (${operation.operationId ?? 'no operationId'})`;
    if (documented === undefined)
      return [
        `${name} answered ${status}, which it does not document (documented: ${Object.keys(operation.responses).join(', ')})`,
      ];
    const response = this.response(documented);
    const problems: string[] = [];
    for (const [header, declared] of Object.entries(response.headers ?? {})) {
      if (declared.required === true && answer.header(header.toLowerCase()) === undefined)
        problems.push(`${name} ${status}: no ${header} header, which the document says is always sent`);
    }
    const noBody = answer.method.toUpperCase() === 'HEAD' || status === '204' || status === '304';
    const content = response.content ?? {};
    if (noBody || Object.keys(content).length === 0) {
      if (answer.body !== '')
        problems.push(`${name} ${status}: a body, where the document has none: ${answer.body.slice(0, 200)}`);
      return problems;
    }
    const type = (answer.header('content-type') ?? '').split(';')[0]!.trim().toLowerCase();
    const media = content[type];
    if (media === undefined) {
      problems.push(`${name} ${status}: a ${type || 'typeless'} body, documented: ${Object.keys(content).join(', ')}`);
      return problems;
    }
    // Only JSON is checked further: the other bodies are pages, metrics text or event streams.
    if (type !== 'application/json') return problems;
    let body: unknown;
    try {
      body = JSON.parse(answer.body);
    } catch {
      problems.push(`${name} ${status}: a JSON body that does not parse: ${answer.body.slice(0, 200)}`);
      return problems;
    }
    const validate = this.validator(`${route} ${status} ${type}`, media.schema);
    if (!validate(body))
      problems.push(...(validate.errors ?? []).map((error) => `${name} ${status}: ${describe(error, body)}`));
    return problems;
  }

  /**
   * A request no documented operation takes: on a documented path, 405 with an Allow naming the
   * path's operations; elsewhere the router's 404.
   */
  private unroutedProblems(answer: ObservedAnswer, template: Template | undefined): string[] {
    const name = `${answer.method.toUpperCase()} ${answer.url.split('?')[0]} (no operation)`;
    const [status, code] = template === undefined ? [404, 'route_not_found'] : [405, 'method_not_allowed'];
    let body: unknown;
    try {
      body = JSON.parse(answer.body);
    } catch {
      return [`${name}: answered ${answer.status} with a body that is not JSON: ${answer.body.slice(0, 200)}`];
    }
    const problems: string[] = [];
    const answered = (body as { code?: unknown } | null)?.code;
    if (answer.status !== status || answered !== code)
      problems.push(`${name}: answered ${answer.status} ${String(answered)}, not ${status} ${code}`);
    if (template !== undefined) {
      const allow = (answer.header('allow') ?? '').split(',').map((m) => m.trim());
      const documented = Object.keys(this.document.paths[template.template]!).map((m) => m.toUpperCase());
      const missing = documented.filter((m) => !allow.includes(m));
      if (missing.length > 0) problems.push(`${name}: Allow (${allow.join(', ')}) lacks ${missing.join(', ')}`);
    }
    const validate = this.validator('unrouted', { $ref: '#/components/schemas/ErrorBody' });
    if (!validate(body))
      problems.push(...(validate.errors ?? []).map((error) => `${name} ${answer.status}: ${describe(error, body)}`));
    return problems;
  }
}

/** One error of Ajv, with where in the body it is and what is there. */
function describe(error: ErrorObject, body: unknown): string {
  const at = error.instancePath === '' ? '(the body)' : error.instancePath;
  const extra =
    error.keyword === 'enum' || error.keyword === 'const'
      ? ` ${JSON.stringify(error.params)}`
      : error.keyword === 'additionalProperties' || error.keyword === 'required'
        ? ` (${JSON.stringify(error.params)})`
        : '';
  const value = valueAt(body, error.instancePath);
  const shown = value === undefined ? '' : `, got ${JSON.stringify(value)?.slice(0, 120)}`;
  return `${at} ${error.message ?? error.keyword}${extra}${shown}`;
}

function valueAt(body: unknown, pointer: string): unknown {
  let value = body;
  for (const part of pointer.split('/').slice(1)) {
    if (value === null || typeof value !== 'object') return undefined;
    value = (value as Record<string, unknown>)[part.replace(/~1/g, '/').replace(/~0/g, '~')];
  }
  return value;
}

// ----- one document per process --------------------------------------------------------------------

/** By the document's text: apps built alike serve the same document, and share its compiled validators. */
const byText = new Map<string, OpenApiConformance>();
const ofApp = new WeakMap<FastifyInstance, Promise<OpenApiConformance>>();
const ofBase = new Map<string, Promise<OpenApiConformance>>();

function conformanceOf(document: unknown): OpenApiConformance {
  const text = JSON.stringify(document);
  let conformance = byText.get(text);
  if (conformance === undefined) {
    conformance = new OpenApiConformance(JSON.parse(text) as OpenApiDocument);
    byText.set(text, conformance);
  }
  return conformance;
}

/** The document `app` serves at /openapi.json, from the builder that serves it (no request is made). */
function documentOfApp(app: FastifyInstance): Promise<OpenApiConformance> {
  let conformance = ofApp.get(app);
  if (conformance === undefined) {
    conformance = (async () => {
      await app.ready();
      return conformanceOf(app.swagger());
    })();
    ofApp.set(app, conformance);
  }
  return conformance;
}

/** The document a listening service at `base` serves. */
function documentAt(base: string): Promise<OpenApiConformance> {
  let conformance = ofBase.get(base);
  if (conformance === undefined) {
    conformance = fetch(`${base}/openapi.json`).then(async (res) => {
      assert.equal(res.status, 200, `GET ${base}/openapi.json`);
      return conformanceOf(await res.json());
    });
    ofBase.set(base, conformance);
  }
  return conformance;
}

/** Fails (an AssertionError for the test that made the request) when the answer breaks the document. */
export async function assertAnswerDocumented(
  source: { app: FastifyInstance } | { base: string },
  answer: ObservedAnswer,
): Promise<void> {
  const conformance = await ('app' in source ? documentOfApp(source.app) : documentAt(source.base));
  const problems = conformance.problems(answer);
  if (problems.length > 0)
    assert.fail(
      `The answer to ${answer.method.toUpperCase()} ${answer.url} is not what /openapi.json says:\n  ${problems.join('\n  ')}`,
    );
}
