/**
 * Every operation of the served OpenAPI document, sent the same fixed list of hostile requests (issue 34,
 * item 8: a fuzzer that reads the document found statuses it does not list): no credential, an unknown
 * key, a credential of the wrong kind (a listener's `slwl_`, an agent's `slwa_`, the metrics token
 * `slwm_`, a sign-in cookie of no session), an `X-Tenant-Id` that is not a UUID, a lower role's key,
 * another workspace's `X-Tenant-Id`, malformed and unknown path ids, malformed, oversized and wrong-type
 * bodies, unknown query values. The random fuzz test (openapi-fuzz.test.ts) may or may not draw each of
 * these; here each is sent to each operation.
 *
 * Every answer must be one the document lists for the operation, with a body of the documented schema
 * (the fuzz test's check). And the order of the checks is the contract's: a request without a usable
 * credential is 401 on every operation that needs one, whatever else is wrong with it (a malformed id,
 * body, query or X-Tenant-Id), since what is wrong with a request is told only to a caller who may make
 * it.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import { after, before, test } from 'node:test';
import { ADMIN_KEY, newWorkspace, newWorkspaceAdmin } from '../support/harness.ts';
import { OpenApiConformance } from '../support/openapi-conformance.ts';
import {
  BODY_LIMIT,
  check,
  operationsOf,
  send,
  startFuzzService,
  type Answer,
  type FuzzRequest,
  type FuzzService,
  type Operation,
} from './openapi-fixtures.ts';

const METRICS_TOKEN = `slwm_${randomBytes(24).toString('hex')}`;
const UNKNOWN_UUID = '00000000-0000-4000-8000-00000000dead';

let service: FuzzService;
/** A member key and a workspace admin key of the default workspace; an admin key of another workspace. */
let memberKey: string;
let otherWorkspaceKey: string;
let otherWorkspaceId: string;

before(async () => {
  service = await startFuzzService({ SLIPWAY_METRICS_TOKEN: METRICS_TOKEN });
  const { t } = service;
  const member = await fetch(`${service.base}/v2/api-keys`, {
    method: 'POST',
    headers: { 'x-api-key': ADMIN_KEY, 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'hostile-member', role: 'member' }),
  });
  assert.equal(member.status, 201);
  memberKey = ((await member.json()) as { key: string }).key;
  const other = await newWorkspace(t, 'hostile-other');
  otherWorkspaceId = other.id;
  otherWorkspaceKey = (await newWorkspaceAdmin(t, other.id, 'hostile-other-admin')).key;
});
after(() => service.close());

/** What a case sends besides the operation's own path: headers, how to fill path ids, query and body. */
interface Case {
  name: string;
  headers: () => Record<string, string>;
  /** `existing`: a fixture's id; else the value put in every path parameter. */
  ids?: 'existing' | 'unknown' | 'malformed' | 'long';
  query?: 'unknown-values' | 'unknown-parameter' | 'over-limit';
  body?: 'none' | 'empty-object' | 'malformed' | 'array' | 'text' | 'over-limit' | 'wrong-type';
  /** Whether the answer must be 401 on every operation that needs a credential. */
  unauthenticated?: boolean;
  /** The operations (by operationId) this credential does open, where it is not 401. */
  opens?: string[];
}

const apiKey = (key: string) => ({ 'x-api-key': key });
const bearer = (value: string) => ({ authorization: `Bearer ${value}` });
const sessionCookie = { cookie: `slipway_session=${'n'.repeat(43)}` };

/** Requests without a usable credential, each with everything else wrong too: they must all be 401. */
const UNAUTHENTICATED: Case[] = [
  { name: 'no credential', headers: () => ({}) },
  { name: 'an unknown key', headers: () => apiKey(`slw_${'x'.repeat(43)}`) },
  { name: 'an unknown key as bearer', headers: () => bearer(`slw_${'x'.repeat(43)}`) },
  { name: 'a key without the prefix', headers: () => apiKey(randomBytes(24).toString('hex')) },
  { name: 'an empty X-Api-Key', headers: () => ({ 'x-api-key': '' }) },
  { name: 'Basic credentials', headers: () => ({ authorization: 'Basic YWRtaW46YWRtaW4=' }) },
  { name: 'a bearer scheme without a token', headers: () => ({ authorization: 'Bearer' }) },
  { name: 'an overlong key', headers: () => apiKey(`slw_${'x'.repeat(2000)}`) },
  { name: 'an agent credential', headers: () => apiKey(service.fixtures.agentCredential) },
  {
    name: 'an agent credential as bearer',
    headers: () => bearer(service.fixtures.agentCredential),
    // A deployment's server checks its callers' protocol credentials with it too.
    opens: ['getAgentAccessToken', 'verifyProtocolCredential'],
  },
  { name: 'the metrics token as bearer', headers: () => bearer(METRICS_TOKEN) },
  { name: 'the metrics token', headers: () => apiKey(METRICS_TOKEN) },
  { name: 'a sign-in cookie of no session', headers: () => sessionCookie },
  { name: 'no credential, X-Tenant-Id not a UUID', headers: () => ({ 'x-tenant-id': 'not-a-uuid' }) },
  {
    name: 'an unknown key, X-Tenant-Id not a UUID',
    headers: () => ({ ...apiKey(`slw_${'y'.repeat(43)}`), 'x-tenant-id': 'not-a-uuid' }),
  },
  {
    name: 'a cookie of no session, X-Tenant-Id not a UUID',
    headers: () => ({ ...sessionCookie, 'x-tenant-id': 'not-a-uuid' }),
  },
  {
    name: "no credential, another workspace's X-Tenant-Id",
    headers: () => ({ 'x-tenant-id': otherWorkspaceId }),
  },
].map((c) => ({ ...c, ids: 'malformed', query: 'unknown-values', body: 'malformed', unauthenticated: true }));

/** Usable credentials that may not do everything, and requests wrong in one way each. */
const OTHERS: Case[] = [
  { name: 'a member key', headers: () => apiKey(memberKey), ids: 'existing', body: 'empty-object' },
  { name: 'a workspace admin key', headers: () => apiKey(ADMIN_KEY), ids: 'existing', body: 'empty-object' },
  {
    name: 'the organization admin key',
    headers: () => apiKey(service.fixtures.orgKey),
    ids: 'existing',
    body: 'empty-object',
  },
  {
    name: "a workspace key naming another workspace's X-Tenant-Id",
    headers: () => ({ ...apiKey(ADMIN_KEY), 'x-tenant-id': otherWorkspaceId }),
    ids: 'existing',
  },
  {
    name: 'the organization key naming a workspace of no organization',
    headers: () => ({ ...apiKey(service.fixtures.orgKey), 'x-tenant-id': UNKNOWN_UUID }),
    ids: 'existing',
  },
  { name: "another workspace's admin key", headers: () => apiKey(otherWorkspaceKey), ids: 'existing' },
  { name: 'a key and X-Tenant-Id not a UUID', headers: () => ({ ...apiKey(ADMIN_KEY), 'x-tenant-id': 'not-a-uuid' }) },
  { name: "a listener's credential", headers: () => bearer(service.fixtures.listenerCredential), ids: 'existing' },
  { name: "a listener's credential as X-Api-Key", headers: () => apiKey(service.fixtures.listenerCredential) },
  {
    name: 'a key and a cookie of no session',
    headers: () => ({ ...apiKey(ADMIN_KEY), ...sessionCookie }),
    ids: 'existing',
  },
  { name: 'malformed ids', headers: () => apiKey(ADMIN_KEY), ids: 'malformed' },
  { name: 'overlong ids', headers: () => apiKey(ADMIN_KEY), ids: 'long' },
  { name: 'unknown ids', headers: () => apiKey(ADMIN_KEY), ids: 'unknown' },
  { name: 'unknown query values', headers: () => apiKey(ADMIN_KEY), ids: 'existing', query: 'unknown-values' },
  { name: 'an unknown query parameter', headers: () => apiKey(ADMIN_KEY), ids: 'existing', query: 'unknown-parameter' },
  { name: 'malformed JSON', headers: () => apiKey(ADMIN_KEY), ids: 'existing', body: 'malformed' },
  { name: 'a JSON array', headers: () => apiKey(ADMIN_KEY), ids: 'existing', body: 'array' },
  { name: 'a JSON string', headers: () => apiKey(ADMIN_KEY), ids: 'existing', body: 'text' },
  { name: 'a body over the limit', headers: () => apiKey(ADMIN_KEY), ids: 'existing', body: 'over-limit' },
  { name: 'a body of another type', headers: () => apiKey(ADMIN_KEY), ids: 'existing', body: 'wrong-type' },
  { name: 'no body', headers: () => apiKey(ADMIN_KEY), ids: 'existing', body: 'none' },
  { name: 'Accept: text/html only', headers: () => ({ ...apiKey(ADMIN_KEY), accept: 'text/html' }), ids: 'existing' },
  { name: 'If-None-Match: *', headers: () => ({ ...apiKey(ADMIN_KEY), 'if-none-match': '*' }), ids: 'existing' },
  { name: 'a stale If-Match', headers: () => ({ ...apiKey(ADMIN_KEY), 'if-match': '"stale"' }), ids: 'existing' },
  {
    name: 'a malformed Idempotency-Key',
    headers: () => ({ ...apiKey(ADMIN_KEY), 'idempotency-key': 'k'.repeat(300) }),
    ids: 'existing',
  },
  { name: 'a request line over 16 KiB', headers: () => apiKey(ADMIN_KEY), ids: 'existing', query: 'over-limit' },
  {
    name: 'X-Field-Validation: Strict',
    headers: () => ({ ...apiKey(ADMIN_KEY), 'x-field-validation': 'Strict' }),
    query: 'unknown-parameter',
  },
  { name: 'X-Field-Validation unknown', headers: () => ({ ...apiKey(ADMIN_KEY), 'x-field-validation': 'Loose' }) },
  // fetch refuses to send Expect: sent with node:http.
  { name: 'Expect other than 100-continue', headers: () => ({ ...apiKey(ADMIN_KEY), expect: 'the-impossible' }) },
  { name: 'Range', headers: () => ({ ...apiKey(ADMIN_KEY), range: 'bytes=0-1' }), ids: 'existing' },
];

/** Parameters that would make the service wait: always asked not to (their waiting has tests of its own). */
const NO_WAIT: Record<string, string> = { wait: '0', timeout: '0', follow: 'false' };

/** A value of the wrong type or outside the enum of a query parameter's schema. */
function unknownValue(schema: { type?: unknown; enum?: unknown[]; format?: string } | undefined): string {
  if (schema?.type === 'integer' || schema?.type === 'number') return 'many';
  if (schema?.type === 'boolean') return 'maybe';
  if (schema?.enum !== undefined) return 'NOT_ONE_OF_THEM';
  if (schema?.format === 'uuid') return 'not-a-uuid';
  return '\u00e9'.repeat(300);
}

function requestFor(method: string, template: string, op: Operation, c: Case): FuzzRequest {
  const path = template.replace(/\{([^}]+)\}/g, (_, name: string) => {
    switch (c.ids ?? 'existing') {
      case 'existing':
        return encodeURIComponent(service.fixtures.byParameter[name]?.[0] ?? UNKNOWN_UUID);
      case 'unknown':
        return UNKNOWN_UUID;
      case 'malformed':
        return 'not-a-uuid%20';
      case 'long':
        return 'x'.repeat(3000);
    }
  });
  const search = new URLSearchParams();
  for (const parameter of op.parameters ?? []) {
    if (parameter.in !== 'query') continue;
    if (NO_WAIT[parameter.name] !== undefined) search.set(parameter.name, NO_WAIT[parameter.name]!);
    else if (c.query === 'unknown-values') search.set(parameter.name, unknownValue(parameter.schema));
  }
  if (c.query === 'unknown-parameter') search.set('x-unknown', '42');
  if (c.query === 'over-limit') search.set('x-padding', 'p'.repeat(17 * 1024));
  const query = search.toString();
  const headers = c.headers();
  let body: Buffer | undefined;
  let about = 'no body';
  const reads = method !== 'GET';
  const kind = c.body ?? (reads ? 'empty-object' : 'none');
  if (reads && kind !== 'none') {
    const [type, raw] = (
      {
        'empty-object': ['application/json', '{}'],
        malformed: ['application/json', '{"a":'],
        array: ['application/json', '[]'],
        text: ['application/json', '"text"'],
        'over-limit': ['application/json', `{"x":"${'a'.repeat(BODY_LIMIT)}"}`],
        'wrong-type': ['text/plain', 'hello'],
      } as const
    )[kind];
    headers['content-type'] = type;
    body = Buffer.from(raw);
    about = `${type}: ${raw.slice(0, 40)}`;
  }
  return { method, url: `${path}${query === '' ? '' : `?${query}`}`, headers, ...(body ? { body } : {}), about };
}

/** `request` sent with node:http, which sends what fetch will not (an Expect header). */
function sendWithNodeHttp(request: FuzzRequest): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const sent = http.request(`${service.base}${request.url}`, { method: request.method, headers: request.headers });
    sent.on('error', reject);
    sent.on('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('error', reject);
      res.on('end', () => {
        const headers = new Headers();
        for (const [name, value] of Object.entries(res.headers))
          for (const each of [value ?? []].flat()) headers.append(name, each);
        resolve({ status: res.statusCode!, headers, body: Buffer.concat(chunks) });
      });
    });
    sent.end(request.body);
  });
}

test('every operation answers each hostile request as its document says, and 401 to every one without a usable credential', async () => {
  const conformance = new OpenApiConformance(service.doc);
  // Deletes last, so that the resources they remove serve every other operation first.
  const operations = operationsOf(service.doc).sort(
    (a, b) => Number(a.method === 'DELETE') - Number(b.method === 'DELETE') || a.route.localeCompare(b.route),
  );
  const findings: string[] = [];
  for (const { method, template, route, op } of operations) {
    const needsCredential = op.security === undefined || op.security.length > 0;
    for (const c of [...UNAUTHENTICATED, ...OTHERS]) {
      const request = requestFor(method, template, op, c);
      const answer = request.headers.expect ? await sendWithNodeHttp(request) : await send(service.base, request);
      const problems = check(conformance, request, route, op, answer);
      if (
        c.unauthenticated &&
        needsCredential &&
        !(c.opens ?? []).includes(op.operationId ?? '') &&
        answer.status !== 401
      )
        problems.push(`${answer.status} where a request without a usable credential is 401`);
      if (problems.length > 0)
        findings.push(
          `${route} with ${c.name} (${request.url.slice(0, 120)}, ${request.about}) -> ${answer.status} ${answer.body.toString('utf8').slice(0, 200)}: ${problems.join('; ')}`,
        );
    }
  }
  assert.deepEqual(findings, []);
});
