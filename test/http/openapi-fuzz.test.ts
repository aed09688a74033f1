/**
 * The whole API fuzzed from its own OpenAPI document (docs/api.md, "The fuzz test"). The service runs
 * on a real port; for every operation of /openapi.json, fast-check makes requests from the documented
 * schemas: valid and invalid bodies, path and query parameters, headers and credentials, odd Unicode,
 * wrong types, missing fields, overlong strings, wrong content types and bodies over the limit. Real
 * resources (deployments, a listener and its credential, an upload URL, a code-host integration...) are
 * made first (test/http/openapi-fixtures.ts), so that existing ids are exercised as well as unknown ones.
 * Its companion, test/http/openapi-hostile.test.ts, sends every operation the same fixed list of hostile
 * requests (no key, keys of the wrong kind, a lower role, malformed ids...) rather than random ones.
 *
 * Every answer must be what the document promises: no 5xx, a documented status, a body of a documented
 * media type that validates against the documented schema, the headers it declares required (the check
 * every test caller makes too: test/support/openapi-conformance.ts), an X-Request-Id header, and a body
 * with `detail` and `code` in every JSON error (an error with an empty body fails too). Any failure is
 * listed with the request that caused it.
 *
 * A fixed seed by default. A longer or different run:
 *   SLIPWAY_FUZZ_RUNS=300 SLIPWAY_FUZZ_SEED=$RANDOM npm test -- test/http/openapi-fuzz.test.ts
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { gzipSync } from 'node:zlib';
import fc from 'fast-check';
import { signWebhookBody } from '../../src/codehost/webhook-signature.ts';
import { ADMIN_KEY, type TestApp } from '../support/harness.ts';
import { OpenApiConformance } from '../support/openapi-conformance.ts';
import { ODD_STRINGS, generators, oddString, type Generators } from './openapi-arbitraries.ts';
import {
  BODY_LIMIT,
  UPLOAD_LIMIT,
  operationsOf,
  startFuzzService,
  type Document,
  type Fixtures,
  type FuzzService,
  type Operation,
  type Parameter,
  check,
  send,
  type FuzzRequest,
} from './openapi-fixtures.ts';

/** Requests per operation: enough that most operations get a request all of whose parts are valid (asserted at the end). */
const RUNS = Number(process.env.SLIPWAY_FUZZ_RUNS ?? 10);
const SEED = Number(process.env.SLIPWAY_FUZZ_SEED ?? 20261124);

let service: FuzzService;
let t: TestApp;
let base: string;
let doc: Document;
let fixtures: Fixtures;

before(async () => {
  service = await startFuzzService();
  ({ t, base, doc, fixtures } = service);
});

after(() => service.close());

// ----- request generation --------------------------------------------------------------------------

function resolveRef(ref: string): any {
  const [, kind, name] = /^#\/components\/(schemas|responses)\/(.+)$/.exec(ref) ?? [];
  const target = kind === 'schemas' ? doc.components.schemas?.[name!] : doc.components.responses?.[name!];
  assert.ok(target, `${ref} resolves`);
  return target;
}

/** Printable ASCII only: what a header value can carry through fetch. */
const headerSafe = (value: unknown): string =>
  (typeof value === 'string' ? value : (JSON.stringify(value) ?? '')).replace(/[^\x20-\x7e]/g, '?').trim();
/** Lone surrogates replaced, as a URL can only carry well-formed text. */
const wellFormed = (value: string): string =>
  value.replace(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g, '\uFFFD');
const text = (value: unknown): string => (typeof value === 'string' ? value : (JSON.stringify(value) ?? 'null'));

/**
 * Parameters that would make the service wait (long polls, the followed log stream): always sent, and
 * only with values that answer at once (GET /v2/auth/wait waits 30 s when timeout is absent). The
 * waiting itself has tests of its own (test/listener-protocol, test/oauth, test/routes/revision-logs.test.ts);
 * here it would only make the run slow.
 */
const noWait = (valid: string, invalid: string[]) =>
  fc.oneof({ weight: 3, arbitrary: fc.constant(valid) }, { weight: 1, arbitrary: fc.constantFrom(...invalid) });
const NO_WAIT: Record<string, fc.Arbitrary<string>> = {
  wait: noWait('0', ['-1', '61', '1.5', 'abc', '', '1e3']),
  timeout: noWait('0', ['-1', '61', '1.5', 'abc', '', '1e3']),
  follow: noWait('false', ['no', 'FALSE', '', 'maybe', '2']),
};

function parameterValue(g: Generators, parameter: Parameter): fc.Arbitrary<unknown> {
  const known = fixtures.byParameter[parameter.name] ?? [];
  const options: fc.WeightedArbitrary<unknown>[] = [
    { weight: 2, arbitrary: g.valid(parameter.schema) },
    { weight: 1, arbitrary: g.invalid(parameter.schema) },
  ];
  if (known.length > 0) options.push({ weight: 4, arbitrary: fc.constantFrom(...known) });
  return fc.oneof(...options);
}

/** An operation's path, every parameter filled and percent-encoded (never one that changes the route). */
function pathArbitrary(g: Generators, template: string, parameters: Parameter[]): fc.Arbitrary<string> {
  const names = [...template.matchAll(/\{([^}]+)\}/g)].map((m) => m[1]!);
  const values = names.map((name) =>
    parameterValue(g, parameters.find((p) => p.in === 'path' && p.name === name) ?? { in: 'path', name })
      .map(text)
      .filter((v) => v !== '' && v !== '.' && v !== '..'),
  );
  return fc.tuple(...values).map((filled) => {
    let i = 0;
    return template.replace(/\{[^}]+\}/g, () => encodeURIComponent(wellFormed(filled[i++]!)));
  });
}

function queryArbitrary(g: Generators, parameters: Parameter[]): fc.Arbitrary<string> {
  const query = parameters.filter((p) => p.in === 'query');
  const pairs = query.map((p) => {
    const value = NO_WAIT[p.name] ?? parameterValue(g, p);
    // An array is sent as the parameter repeated.
    const pairs = value.map((v) => (Array.isArray(v) ? v.map(text) : [text(v)]).map((each) => [p.name, each] as const));
    return NO_WAIT[p.name] ? pairs : fc.option(pairs, { nil: undefined, freq: 2 });
  });
  const extra = fc.option(
    fc.tuple(oddString(10), oddString(10)).map(([k, v]) => [[k, v] as const]),
    { nil: undefined, freq: 5 },
  );
  return fc.tuple(fc.tuple(...pairs), extra).map(([chosen, more]) => {
    const search = new URLSearchParams();
    for (const list of [...chosen, more]) for (const [k, v] of list ?? []) search.append(wellFormed(k), wellFormed(v));
    const encoded = search.toString();
    return encoded === '' ? '' : `?${encoded}`;
  });
}

function credentialArbitrary(op: Operation): fc.Arbitrary<Record<string, string>> {
  const bearer = (value: string) => ({ authorization: `Bearer ${value}` });
  const schemes = new Set((op.security ?? []).flatMap((s) => Object.keys(s)));
  return fc.oneof(
    { weight: 10, arbitrary: fc.constant({ 'x-api-key': ADMIN_KEY }) },
    { weight: 1, arbitrary: fc.constant(bearer(ADMIN_KEY)) },
    { weight: 1, arbitrary: fc.constant({}) },
    { weight: 1, arbitrary: fc.constant({ 'x-api-key': fixtures.orgKey }) },
    {
      weight: 1,
      arbitrary: fc
        .oneof(fc.constantFrom(...ODD_STRINGS), fc.string({ maxLength: 30 }), fc.constant('slw_'.padEnd(600, 'x')))
        .map((v) => ({ 'x-api-key': headerSafe(v) })),
    },
    // The listener protocol, the agent token endpoint and the protocol credential check take their own
    // credentials: they get them most of the time.
    {
      weight: schemes.has('bearer') ? 20 : 1,
      arbitrary: fc.constantFrom(fixtures.listenerCredential, fixtures.agentCredential).map(bearer),
    },
  );
}

function headersArbitrary(g: Generators, op: Operation): fc.Arbitrary<Record<string, string>> {
  const tenant = fc.oneof(
    { weight: 10, arbitrary: fc.constant(undefined) },
    {
      weight: 1,
      arbitrary: fc.constantFrom(t.workspaceId, t.workspaceId.toUpperCase(), '00000000-0000-4000-8000-000000000000'),
    },
    { weight: 1, arbitrary: oddString(40).map(headerSafe) },
  );
  const requestId = fc.oneof(
    { weight: 6, arbitrary: fc.constant(undefined) },
    { weight: 1, arbitrary: fc.oneof(fc.string({ maxLength: 300 }), fc.constant('x'.repeat(300))).map(headerSafe) },
  );
  // X-Field-Validation, which every operation takes, is left at its default (Warn), so that the extra
  // query parameters and body fields sent here still reach the handlers; its modes have their own test
  // (test/http/unknown-fields.test.ts). X-Tenant-Id comes from `tenant` above: mostly absent, else the
  // workspace's own id in either case, an unknown one or an odd string.
  const documented = (op.parameters ?? []).filter(
    (p) => p.in === 'header' && p.name !== 'X-Field-Validation' && p.name !== 'X-Tenant-Id',
  );
  const headerValues = documented.map((p) =>
    fc.option(parameterValue(g, p).map(headerSafe), { nil: undefined, freq: 2 }),
  );
  return fc
    .tuple(credentialArbitrary(op), tenant, requestId, fc.tuple(...headerValues))
    .map(([credentials, tenantId, id, values]) => {
      const headers: Record<string, string> = { ...credentials };
      if (tenantId !== undefined) headers['x-tenant-id'] = tenantId;
      if (id !== undefined) headers['x-request-id'] = id;
      documented.forEach((p, i) => {
        if (values[i] !== undefined) headers[p.name.toLowerCase()] = values[i];
      });
      return headers;
    });
}

interface Body {
  contentType?: string;
  body?: Buffer;
  about: string;
}

const WRONG_TYPES = [
  'text/plain',
  'application/xml',
  'application/x-www-form-urlencoded',
  'multipart/form-data; boundary=x',
  'application/json; charset=utf-16',
  'image/png',
];
const RAW_JSON = [
  '',
  '{',
  '{"a":1,"a":2}',
  'null',
  '[]',
  '"text"',
  '1e999',
  '\uFEFF{}',
  '['.repeat(200) + ']'.repeat(200),
  '{"a":"\\ud800"}',
  '{"a":"\\u0000"}',
];

const overLimit = (limit: number): Body => ({
  contentType: 'application/json',
  body: Buffer.from(`{"x":"${'a'.repeat(limit)}"}`),
  about: `a JSON body of ${limit} bytes and more`,
});

function bodyArbitrary(g: Generators, method: string, op: Operation): fc.Arbitrary<Body> {
  const none: Body = { about: 'no body' };
  const junk = fc
    .oneof(
      fc.tuple(fc.constantFrom(...RAW_JSON), fc.constant('application/json')),
      fc.tuple(fc.string({ maxLength: 30 }), fc.constantFrom(...WRONG_TYPES)),
      fc.tuple(fc.constant('{}'), fc.constantFrom(...WRONG_TYPES)),
    )
    .map(([raw, type]): Body => ({ contentType: type, body: Buffer.from(raw), about: `${type}: ${raw.slice(0, 60)}` }));
  const invalidBytes: Body = {
    contentType: 'application/json',
    body: Buffer.from([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x3a, 0x31, 0x7d]),
    about: 'JSON with invalid UTF-8',
  };
  const content = op.requestBody?.content ?? {};
  const json = content['application/json'];
  const gzip = Object.keys(content).find((type) => type.includes('gzip'));
  if (json) {
    const encode =
      (about: string) =>
      (value: unknown): Body => ({
        contentType: 'application/json',
        body: Buffer.from(JSON.stringify(value) ?? 'null'),
        about,
      });
    return fc.oneof(
      { weight: 6, arbitrary: g.valid(json.schema).map(encode('valid JSON')) },
      { weight: 5, arbitrary: g.invalid(json.schema).map(encode('invalid JSON')) },
      { weight: 2, arbitrary: junk },
      { weight: 1, arbitrary: fc.constantFrom(none, invalidBytes, overLimit(BODY_LIMIT)) },
    );
  }
  if (gzip) {
    return fc.oneof(
      {
        weight: 3,
        arbitrary: fc
          .uint8Array({ maxLength: 200 })
          .map((bytes): Body => ({ contentType: gzip, body: gzipSync(bytes), about: 'a gzip body' })),
      },
      {
        weight: 2,
        arbitrary: fc
          .uint8Array({ maxLength: 200 })
          .map((bytes): Body => ({ contentType: gzip, body: Buffer.from(bytes), about: 'random bytes as gzip' })),
      },
      {
        weight: 1,
        arbitrary: fc.constant<Body>({
          contentType: gzip,
          body: Buffer.alloc(UPLOAD_LIMIT + 1, 0x1f),
          about: 'a body over the upload limit',
        }),
      },
      { weight: 1, arbitrary: junk },
      { weight: 1, arbitrary: fc.constant(none) },
    );
  }
  // GET has no body (fetch cannot send one); other methods without a documented body may still get one.
  if (method === 'GET') return fc.constant(none);
  return fc.oneof(
    { weight: 6, arbitrary: fc.constant(none) },
    { weight: 2, arbitrary: junk },
    { weight: 1, arbitrary: fc.constant(overLimit(BODY_LIMIT)) },
  );
}

/** The webhook authenticates by a signature of its body: sign some bodies with the integration's secret. */
function withWebhookHeaders(request: fc.Arbitrary<FuzzRequest>): fc.Arbitrary<FuzzRequest> {
  const signature = fc.constantFrom('real', 'junk', 'none');
  const event = fc.oneof(fc.constantFrom('push', 'ping', 'create'), oddString(10).map(headerSafe));
  return fc.tuple(request, signature, event, fc.uuid()).map(([r, kind, name, delivery]) => {
    const headers: Record<string, string> = { ...r.headers, 'x-github-event': name, 'x-github-delivery': delivery };
    if (kind === 'real')
      headers['x-hub-signature-256'] = signWebhookBody(fixtures.webhookSecret, r.body ?? Buffer.alloc(0));
    if (kind === 'junk') headers['x-hub-signature-256'] = 'sha256=' + '0'.repeat(64);
    return { ...r, headers };
  });
}

function requestArbitrary(g: Generators, method: string, template: string, op: Operation): fc.Arbitrary<FuzzRequest> {
  const parameters = op.parameters ?? [];
  const request = fc
    .tuple(
      pathArbitrary(g, template, parameters),
      queryArbitrary(g, parameters),
      headersArbitrary(g, op),
      bodyArbitrary(g, method, op),
    )
    .map(([path, query, headers, body]): FuzzRequest => ({
      method,
      url: `${path}${query}`,
      headers: body.contentType === undefined ? headers : { ...headers, 'content-type': body.contentType },
      ...(body.body === undefined ? {} : { body: body.body }),
      about: body.about,
    }));
  // Node refuses a request line and headers over 16 KiB (431) before any route sees them: not an
  // answer of the operation, so such requests are not made.
  const sized = request.filter((r) => Buffer.byteLength(r.url) + Object.values(r.headers).join('').length < 12_000);
  return template.endsWith('/webhooks') ? withWebhookHeaders(sized) : sized;
}

// ----- the run -------------------------------------------------------------------------------------

test('every operation answers as its OpenAPI document says, whatever it is sent', async (context) => {
  const g = generators(resolveRef, () => fixtures.uuids);
  const conformance = new OpenApiConformance(doc);
  // Deletes last, so that the resources they remove serve every other operation first.
  const operations = operationsOf(doc).sort(
    (a, b) => Number(a.method === 'DELETE') - Number(b.method === 'DELETE') || a.template.localeCompare(b.template),
  );
  assert.ok(operations.length > 50, `${operations.length} operations`);

  const findings: string[] = [];
  const answered = new Map<string, Map<number, number>>();
  for (const [index, { method, template, route, op }] of operations.entries()) {
    const requests = fc.sample(requestArbitrary(g, method, template, op), { seed: SEED + index, numRuns: RUNS });
    const statuses = new Map<number, number>();
    answered.set(route, statuses);
    for (const request of requests) {
      let problems: string[];
      let status = 0;
      try {
        const answer = await send(base, request);
        status = answer.status;
        problems = check(conformance, request, route, op, answer);
        if (problems.length > 0) problems.push(`answer: ${answer.body.toString('utf8').slice(0, 300)}`);
      } catch (error) {
        problems = [`no answer: ${String(error)}`];
      }
      statuses.set(status, (statuses.get(status) ?? 0) + 1);
      if (problems.length > 0) {
        findings.push(
          `${route} (${op.operationId}): ${request.method} ${request.url.slice(0, 300)} with ${request.about} -> ${status}: ${problems.join('; ')}`,
        );
      }
    }
  }

  context.diagnostic(`seed ${SEED}, ${RUNS} requests per operation; answers by status:`);
  for (const [route, statuses] of answered)
    context.diagnostic(`${route}: ${[...statuses].map(([s, n]) => `${s}x${n}`).join(' ')}`);
  assert.deepEqual(findings.slice(0, 30), [], `${findings.length} findings (seed ${SEED})`);
  // The generated requests reach the handlers, not only the validation: most operations answered a 2xx.
  const succeeded = [...answered.values()].filter((statuses) =>
    [...statuses.keys()].some((s) => s >= 200 && s < 300),
  ).length;
  assert.ok(
    succeeded >= operations.length / 2,
    `${succeeded} of ${operations.length} operations answered a 2xx at least once`,
  );
});
