/**
 * The service the tests of the whole OpenAPI document run against (openapi-fuzz.test.ts,
 * openapi-hostile.test.ts): the app on a real port with small body limits and a fake GitHub, its served
 * document, and real resources of every kind (deployments of two sources, a listener and its
 * credential, an upload URL, a tag, an OAuth provider and a pending authorization, an agent credential,
 * a spare API key, a code-host integration...), so that existing ids are exercised as well as unknown
 * ones. And the check of an answer both tests make.
 */
import assert from 'node:assert/strict';
import { gzipSync } from 'node:zlib';
import { startFakeGitHub, makeRepositories, type FakeGitHub } from '../fakes/github-server.ts';
import { ADMIN_KEY, createTestApp, type TestApp, listen } from '../support/harness.ts';
import { OpenApiConformance } from '../support/openapi-conformance.ts';
import type { Schema } from './openapi-arbitraries.ts';

/** Small limits, so that a body over them costs little to send. */
export const BODY_LIMIT = 32 * 1024;
export const UPLOAD_LIMIT = 64 * 1024;
const GITHUB_TOKEN = 'ghp_fuzztoken0123456789abcdefghijklmnop';

export interface Parameter {
  in: 'path' | 'query' | 'header' | 'cookie';
  name: string;
  required?: boolean;
  schema?: Schema;
}
export interface Media {
  schema?: Schema;
}
export interface Response {
  $ref?: string;
  content?: Record<string, Media>;
}
export interface Operation {
  operationId?: string;
  security?: Record<string, string[]>[];
  parameters?: Parameter[];
  requestBody?: { content: Record<string, Media> };
  responses: Record<string, Response>;
}
export interface Document {
  paths: Record<string, Record<string, Operation>>;
  components: { schemas?: Record<string, Schema>; responses?: Record<string, Response> };
}

/** Existing things the requests use besides made-up ones. */
export interface Fixtures {
  /** Existing values of each path parameter, by its name. */
  byParameter: Record<string, string[]>;
  uuids: string[];
  orgKey: string;
  listenerCredential: string;
  agentCredential: string;
  webhookSecret: string;
}

export interface FuzzService {
  t: TestApp;
  base: string;
  doc: Document;
  fixtures: Fixtures;
  close(): Promise<void>;
}

/** Starts the service on a port with `env` besides the small limits, reads its document, makes the fixtures. */
export async function startFuzzService(env: Record<string, string> = {}): Promise<FuzzService> {
  const github: FakeGitHub = await startFakeGitHub({
    repositories: makeRepositories(3),
    tokens: { [GITHUB_TOKEN]: 'all' },
  });
  const t = await createTestApp(
    {
      SLIPWAY_BODY_LIMIT_BYTES: String(BODY_LIMIT),
      SLIPWAY_UPLOAD_LIMIT_BYTES: String(UPLOAD_LIMIT),
      // Code-host calls go to the fake on loopback, never to the internet.
      SLIPWAY_ALLOW_INSECURE_CODEHOST: '1',
      SLIPWAY_CODEHOST_ALLOWED_URLS: github.url,
      ...env,
    },
    { codehostClient: { retries: 0 } },
  );
  await listen(t.app);
  const address = t.app.server.address();
  assert.ok(address !== null && typeof address === 'object');
  const base = `http://127.0.0.1:${address.port}`;
  const res = await fetch(`${base}/openapi.json`);
  assert.equal(res.status, 200);
  const doc = (await res.json()) as Document;
  const fixtures = await makeFixtures(t, base, github.url);
  return {
    t,
    base,
    doc,
    fixtures,
    async close() {
      await t.close();
      await github.close();
    },
  };
}

async function makeFixtures(t: TestApp, base: string, githubUrl: string): Promise<Fixtures> {
  const call = async (
    method: string,
    path: string,
    body?: unknown,
    headers: Record<string, string> = {},
  ): Promise<any> => {
    const res = await fetch(`${base}${path}`, {
      method,
      headers: {
        'x-api-key': ADMIN_KEY,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        ...headers,
      },
      ...(body === undefined ? {} : { body: Buffer.isBuffer(body) ? new Uint8Array(body) : JSON.stringify(body) }),
    });
    const text = await res.text();
    assert.ok(res.status < 300, `fixture ${method} ${path}: ${res.status} ${text}`);
    return text === '' ? undefined : JSON.parse(text);
  };

  const listener = await call('POST', '/v2/listeners', {
    compute_type: 'k8s',
    compute_id: 'fuzz-cluster',
    compute_config: { k8s_namespaces: ['agents'] },
    version: '0.1.0',
  });
  const listenerCredential = await call('POST', `/v2/listeners/${listener.id}/credentials`);
  const deployment = await call('POST', '/v2/deployments', {
    name: 'fuzz-app',
    source: 'internal_container',
    source_revision_config: { image_uri: 'registry.example.com/fuzz:1' },
    secrets: [{ name: 'TOKEN', value: 's3cret' }],
  });
  const external = await call('POST', '/v2/deployments', {
    name: 'fuzz-external',
    source: 'external_container',
    source_config: { listener_id: listener.id, listener_config: { k8s_namespace: 'agents' } },
    source_revision_config: { image_uri: 'registry.example.com/fuzz:2' },
  });
  const upload = await call('POST', '/v2/uploads', gzipSync(Buffer.from('fuzz')), {
    'content-type': 'application/gzip',
  });
  const uploadUrl = await call('POST', `/v2/deployments/${deployment.id}/upload-url`);
  const [, uploadId, token] = /\/v2\/uploads\/([^?]+)\?token=(.+)$/.exec(uploadUrl.upload_url) ?? [];
  const tagKey = await call('POST', '/v2/tags/keys', { key: 'team' });
  const tagValue = await call('POST', `/v2/tags/keys/${tagKey.id}/values`, { value: 'agents' });
  await call('PUT', `/v2/deployments/${deployment.id}/tags`, { tag_value_ids: [tagValue.id] });
  const provider = await call(
    'POST',
    '/v2/auth/providers',
    {
      provider_id: 'fuzz-idp',
      name: 'Fuzz IdP',
      client_id: 'client',
      client_secret: 'secret',
      auth_url: 'https://idp.example.com/authorize',
      token_url: 'https://idp.example.com/token',
    },
    { 'x-api-key': t.orgKey },
  );
  // A pending authorization (nothing is sent to the provider until its callback brings a code).
  const authorization = await call('POST', '/v2/auth/authenticate', {
    provider_id: 'fuzz-idp',
    agent_id: 'fuzz-agent',
  });
  const agentCredential = await call('POST', `/v2/deployments/${deployment.id}/agent-credentials`, {
    agent_ids: ['fuzz-agent'],
  });
  // Revoking this one (the fuzzer may) leaves the admin key working.
  const spareKey = await call('POST', '/v2/api-keys', { name: 'fuzz-spare', role: 'member' });
  const integration = await call('POST', '/v1/integrations/forge/codehost', {
    name: 'fuzz-github',
    api_url: githubUrl,
    token: GITHUB_TOKEN,
  });

  const byParameter: Record<string, string[]> = {
    deployment_id: [deployment.id, external.id],
    revision_id: [deployment.latest_revision_id, external.latest_revision_id],
    listener_id: [listener.id],
    credential_id: [listenerCredential.id, agentCredential.id],
    provider_id: ['fuzz-idp', provider.id],
    agent_id: ['fuzz-agent', 'fuzz-app'],
    integration_id: [integration.id],
    tag_key_id: [tagKey.id],
    tag_value_id: [tagValue.id],
    api_key_id: [spareKey.id],
    auth_id: [authorization.auth_id],
    upload_id: [uploadId!],
    token: [decodeURIComponent(token!)],
    // A deployment's series (GET /v2/deployments/{id}/metrics).
    window: ['15m', '90s', '1h'],
    step: ['10s', '1m'],
  };
  const uuids = [...new Set(Object.values(byParameter).flat())].filter((v) => /^[0-9a-f-]{36}$/.test(v));
  uuids.push(t.workspaceId, upload.id);
  return {
    byParameter,
    uuids,
    orgKey: t.orgKey,
    listenerCredential: listenerCredential.credential,
    agentCredential: agentCredential.credential,
    webhookSecret: integration.webhook_secret,
  };
}

/** Every operation of the document, as `METHOD /template`. */
export function operationsOf(doc: Document): { method: string; template: string; route: string; op: Operation }[] {
  return Object.entries(doc.paths).flatMap(([template, item]) =>
    Object.entries(item).map(([method, op]) => ({
      method: method.toUpperCase(),
      template,
      route: `${method.toUpperCase()} ${template}`,
      op,
    })),
  );
}

export interface FuzzRequest {
  method: string;
  /** Path and query, encoded. */
  url: string;
  headers: Record<string, string>;
  body?: Buffer;
  /** What the body is, for the report. */
  about: string;
}

// ----- checking answers ----------------------------------------------------------------------------

export interface Answer {
  status: number;
  headers: Headers;
  body: Buffer;
}

/**
 * What is wrong with an answer: what the document says of it (the same check as every test caller's,
 * test/support/openapi-conformance.ts), and what every answer must be besides: no 5xx, an X-Request-Id,
 * and an error that says what went wrong.
 */
export function check(
  conformance: OpenApiConformance,
  request: FuzzRequest,
  route: string,
  op: Operation,
  answer: Answer,
): string[] {
  const problems: string[] = [];
  if (answer.status >= 500) problems.push(`a ${answer.status} answer`);
  if (!answer.headers.get('x-request-id')) problems.push('no X-Request-Id header');
  const text = answer.body.toString('utf8');
  const type = (answer.headers.get('content-type') ?? '').split(';')[0]!.trim().toLowerCase();
  // An error says what went wrong whatever its status: an empty body has no code (no fuzzed request is a HEAD).
  if (answer.status >= 400 && text === '') problems.push('an error without a body (no detail and code)');
  if (answer.status >= 400 && type === 'application/json') {
    let body: any;
    try {
      body = JSON.parse(text);
    } catch {
      // The document check reports it.
    }
    if (typeof body?.code !== 'string' || body.detail === undefined) problems.push('an error without detail and code');
  }
  problems.push(
    ...conformance.operationProblems(route, op, {
      method: request.method,
      url: request.url,
      status: answer.status,
      header: (name) => answer.headers.get(name) ?? undefined,
      body: text,
    }),
  );
  return problems;
}

/** Sends `request` to the service at `base`, redirects not followed. */
export async function send(base: string, request: FuzzRequest): Promise<Answer> {
  const res = await fetch(`${base}${request.url}`, {
    method: request.method,
    headers: request.headers,
    redirect: 'manual',
    ...(request.body ? { body: new Uint8Array(request.body) } : {}),
  });
  return { status: res.status, headers: res.headers, body: Buffer.from(await res.arrayBuffer()) };
}
