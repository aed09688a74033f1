/**
 * The API documents itself: /openapi.json is OpenAPI 3.1 listing every route the app serves with its
 * schemas, /docs is a browsable page without a key, and docs/errors.md lists every error code.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import type { FastifyInstance } from 'fastify';
import { ERROR_RESPONSES as ERROR_CODES } from '../src/http/error-statuses.ts';
import { client, createTestApp, type TestApp } from './support/harness.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

interface Schema {
  $ref?: string;
  type?: string | string[];
  properties?: Record<string, Schema>;
  required?: string[];
  items?: Schema;
  oneOf?: Schema[];
  anyOf?: Schema[];
}
interface Response {
  $ref?: string;
  description?: string;
  content?: Record<string, { schema?: Schema }>;
}
interface Operation {
  operationId?: string;
  security?: Record<string, string[]>[];
  parameters?: { in: string; name: string; required?: boolean; schema?: Schema }[];
  requestBody?: { content: Record<string, { schema?: Schema; examples?: unknown; example?: unknown }> };
  responses: Record<string, Response>;
}
interface Document {
  openapi: string;
  info: { title: string; version: string };
  paths: Record<string, Record<string, Operation>>;
  components: {
    schemas?: Record<string, Schema>;
    responses?: Record<string, Response>;
    securitySchemes?: Record<string, { type: string; in?: string; name?: string; scheme?: string }>;
  };
}

let t: TestApp;
let doc: Document;

before(async () => {
  t = await createTestApp();
  const res = await client(t.app, null).get<Document>('/openapi.json');
  assert.equal(res.status, 200, 'the document needs no API key');
  doc = res.body;
});
after(() => t.close());

/** Pages a browser opens, answered with HTML rather than JSON. */
const BROWSER_PAGES = new Set(['GET /v2/auth/callback/{provider_id}', 'GET /v2/sso/callback']);

/**
 * Every method and path the app serves, read from Fastify's route tree (`printRoutes`), in OpenAPI
 * notation. HEAD routes (added by Fastify for every GET), the documentation itself and the web
 * dashboard's pages and files (src/routes/dashboard.ts: hidden from the document, not API operations)
 * are left out.
 */
function servedRoutes(app: FastifyInstance): Set<string> {
  const tree = app.printRoutes({ commonPrefix: false });
  const ancestors: string[] = [];
  const out = new Set<string>();
  for (const line of tree.split('\n')) {
    const match = /^((?:[│ ] {3})*)[├└]── (.+?)(?: \(([A-Z, ]+)\))?$/.exec(line);
    if (!match) continue;
    ancestors.length = match[1]!.length / 4;
    ancestors.push(match[2]!);
    const url = ancestors.join('').replace(/:(\w+)/g, '{$1}');
    for (const method of match[3]?.split(', ') ?? []) {
      if (method === 'HEAD' || url.startsWith('/docs') || url === '/openapi.json') continue;
      if (url === '/' || url === '/*' || url.startsWith('/assets/')) continue;
      out.add(`${method} ${url}`);
    }
  }
  return out;
}

function documentedRoutes(): Set<string> {
  const out = new Set<string>();
  for (const [url, operations] of Object.entries(doc.paths)) {
    for (const method of Object.keys(operations)) out.add(`${method.toUpperCase()} ${url}`);
  }
  return out;
}

function operation(route: string): Operation {
  const [method, url] = route.split(' ') as [string, string];
  const op = doc.paths[url]?.[method.toLowerCase()];
  assert.ok(op, `${route} is documented`);
  return op;
}

/** Follows a local $ref into components. */
function resolve(schema: Schema | undefined): Schema {
  assert.ok(schema, 'a schema');
  if (!schema.$ref) return schema;
  const name = schema.$ref.replace('#/components/schemas/', '');
  const target = doc.components.schemas?.[name];
  assert.ok(target, `${schema.$ref} resolves`);
  return target;
}

/** A response, or the shared one (`#/components/responses/...`) it refers to. */
function responseOf(route: string, status: string): Response {
  const response = operation(route).responses[status];
  assert.ok(response, `${route} documents ${status}`);
  if (!response.$ref) return response;
  const target = doc.components.responses?.[response.$ref.replace('#/components/responses/', '')];
  assert.ok(target, `${response.$ref} resolves`);
  return target;
}

const jsonSchemaOf = (route: string, status: string): Schema =>
  resolve(responseOf(route, status).content?.['application/json']?.schema);
const requestSchemaOf = (route: string, type = 'application/json'): Schema =>
  resolve(operation(route).requestBody?.content[type]?.schema);
/** A body's schema, or each schema of its oneOf (the deployment create's, one per source). */
const variantsOf = (schema: Schema): Schema[] => (schema.oneOf ? schema.oneOf.map(resolve) : [schema]);
/** A field's schema, or each object of its anyOf (a nullable use, or a choice of shapes). */
const shapesOf = (schema: Schema | undefined): Schema[] =>
  (resolve(schema).anyOf ?? [schema!]).filter((s) => s.type !== 'null').map(resolve);

describe('/openapi.json', () => {
  test('is OpenAPI 3.1 with the API keys as security schemes', () => {
    assert.match(doc.openapi, /^3\.1\./);
    assert.equal(doc.info.title, 'Slipway');
    const schemes = Object.values(doc.components.securitySchemes ?? {});
    assert.ok(schemes.some((s) => s.type === 'apiKey' && s.in === 'header' && s.name === 'X-Api-Key'));
    assert.ok(schemes.some((s) => s.type === 'http' && s.scheme === 'bearer'));
  });

  test('lists every route the app serves, and nothing it does not', () => {
    const served = servedRoutes(t.app);
    assert.ok(
      served.has('POST /v2/deployments') && served.has('PATCH /v2/listeners/{listener_id}'),
      `the route tree was read: ${[...served].join(', ')}`,
    );
    assert.ok(served.size > 25, `found ${served.size} routes`);
    const documented = documentedRoutes();
    assert.deepEqual([...served].filter((r) => !documented.has(r)).sort(), [], 'served but not documented');
    assert.deepEqual([...documented].filter((r) => !served.has(r)).sort(), [], 'documented but not served');
  });

  test('every interface operation is there under its exact path', () => {
    const documented = documentedRoutes();
    for (const route of [
      'PATCH /v2/auth/providers/{provider_id}',
      'GET /v2/auth/agents/{agent_id}/connections',
      'GET /v1/integrations/forge/codehost/{integration_id}/repos',
      'POST /v2/deployments',
      'PATCH /v2/deployments/{deployment_id}',
      'GET /v2/deployments',
      'GET /v2/deployments/{deployment_id}/revisions',
      'POST /v2/listeners',
      'PATCH /v2/listeners/{listener_id}',
      'GET /v2/listeners',
    ]) {
      assert.ok(documented.has(route), `${route} is documented`);
    }
  });

  test('every operation documents its success response, and JSON responses have schemas', () => {
    for (const route of documentedRoutes()) {
      const op = operation(route);
      const statuses = Object.keys(op.responses);
      const success = statuses.filter((s) => s.startsWith('2'));
      assert.ok(success.length > 0, `${route} documents a 2xx response`);
      for (const status of statuses) {
        const response = responseOf(route, status);
        // 304 Not Modified never has a body, whatever its description says.
        if (status === '304') continue;
        if (status === '204') {
          assert.equal(response.content, undefined, `${route} 204 has no body`);
          continue;
        }
        if (status.startsWith('2') && BROWSER_PAGES.has(route)) continue;
        const content = response.content ?? {};
        assert.ok(Object.keys(content).length > 0, `${route} ${status} documents its body`);
        for (const [type, media] of Object.entries(content))
          assert.ok(media.schema, `${route} ${status} ${type} has a schema`);
      }
      for (const status of statuses.filter((s) => /^4|^5/.test(s))) {
        const content = responseOf(route, status).content ?? {};
        // A browser page answers its failures as pages too; every other error is the JSON envelope.
        if (BROWSER_PAGES.has(route) && !content['application/json']) {
          assert.ok(content['text/html'], `${route} ${status} is a page`);
          continue;
        }
        const schema = resolve(content['application/json']?.schema);
        assert.ok(schema.properties?.detail, `${route} ${status} is in the contract's error shape`);
      }
    }
  });

  test('path parameters are declared for every templated path', () => {
    for (const route of documentedRoutes()) {
      const op = operation(route);
      const names = [...route.matchAll(/\{(\w+)\}/g)].map((m) => m[1]);
      for (const name of names) {
        const parameter = op.parameters?.find((p) => p.in === 'path' && p.name === name);
        assert.ok(parameter, `${route} declares path parameter ${name}`);
        assert.equal(parameter.required, true, `${route} ${name} is required`);
      }
    }
  });

  test('write operations document their request bodies', () => {
    for (const route of [
      'POST /v2/workspaces',
      'POST /v2/api-keys',
      'POST /v2/deployments',
      'PATCH /v2/deployments/{deployment_id}',
      'POST /v2/listeners',
      'PATCH /v2/listeners/{listener_id}',
      'POST /v2/tags/keys',
      'POST /v2/tags/keys/{tag_key_id}/values',
      'PUT /v2/deployments/{deployment_id}/tags',
      'PATCH /v2/auth/providers/{provider_id}',
    ]) {
      for (const schema of variantsOf(requestSchemaOf(route)))
        assert.ok(schema.properties && Object.keys(schema.properties).length > 0, `${route} documents its JSON body`);
    }
    assert.ok(
      operation('POST /v2/uploads').requestBody?.content['application/gzip'],
      'the upload documents its tarball body',
    );
    for (const [route, media] of Object.entries(doc.paths).flatMap(([url, ops]) =>
      Object.entries(ops).map(([m, op]) => [`${m.toUpperCase()} ${url}`, op.requestBody] as const),
    )) {
      for (const [type, content] of Object.entries(media?.content ?? {}))
        assert.ok(content.schema, `${route} ${type} request body has a schema`);
    }
  });

  test('deployment, revision and listener schemas carry the interface fields', () => {
    const deployment = jsonSchemaOf('GET /v2/deployments/{deployment_id}', '200');
    for (const field of [
      'name',
      'source',
      'source_config',
      'source_revision_config',
      'secrets',
      'id',
      'tenant_id',
      'created_at',
      'updated_at',
      'status',
      'latest_revision_id',
      'active_revision_id',
      'secret_references',
      'image_version',
    ]) {
      assert.ok(deployment.properties?.[field], `Deployment.${field}`);
    }
    for (const field of [
      'integration_id',
      'repo_url',
      'deployment_type',
      'build_on_push',
      'custom_url',
      'resource_spec',
      'listener_id',
      'listener_config',
      'install_command',
      'build_command',
    ]) {
      assert.ok(resolve(deployment.properties?.source_config).properties?.[field], `SourceConfig.${field}`);
    }
    for (const field of ['repo_ref', 'framework_config_path', 'image_uri', 'source_tarball_path', 'repo_commit_sha']) {
      assert.ok(
        resolve(deployment.properties?.source_revision_config).properties?.[field],
        `SourceRevisionConfig.${field}`,
      );
    }
    const creates = variantsOf(requestSchemaOf('POST /v2/deployments'));
    assert.equal(creates.length, 4, 'one create body per source');
    for (const create of creates) {
      assert.ok(['name', 'source'].every((f) => create.required?.includes(f)));
      for (const shape of shapesOf(create.properties?.source_revision_config))
        assert.equal(shape.properties?.repo_commit_sha, undefined, 'repo_commit_sha is response-only');
    }

    const list = jsonSchemaOf('GET /v2/deployments', '200');
    assert.ok(list.properties?.resources && list.properties.offset, 'the list envelope');
    const query = (operation('GET /v2/deployments').parameters ?? [])
      .filter((p) => p.in === 'query')
      .map((p) => p.name)
      .sort();
    assert.deepEqual(query, [
      'deployment_ids',
      'deployment_type',
      'image_version',
      'limit',
      'name',
      'name_contains',
      'offset',
      'remote_reconciled',
      'status',
      'tag_value_ids',
    ]);
    const revisionQuery = (operation('GET /v2/deployments/{deployment_id}/revisions').parameters ?? [])
      .filter((p) => p.in === 'query')
      .map((p) => p.name)
      .sort();
    assert.deepEqual(revisionQuery, ['limit', 'offset', 'remote_reconciled', 'status']);

    const revision = resolve(
      jsonSchemaOf('GET /v2/deployments/{deployment_id}/revisions', '200').properties?.resources?.items,
    );
    for (const field of ['id', 'created_at', 'updated_at', 'status', 'source', 'source_revision_config'])
      assert.ok(revision.properties?.[field], `Revision.${field}`);
    const listener = jsonSchemaOf('GET /v2/listeners/{listener_id}', '200');
    for (const field of ['compute_type', 'compute_id', 'compute_config', 'id', 'created_at', 'updated_at', 'version'])
      assert.ok(listener.properties?.[field], `Listener.${field}`);
  });

  test('the create operations carry examples', () => {
    for (const route of ['POST /v2/deployments', 'POST /v2/listeners']) {
      const media = operation(route).requestBody?.content['application/json'];
      assert.ok(media?.examples ?? media?.example, `${route} has an example`);
    }
  });
});

describe('/openapi.json for client generators', () => {
  const operations = (): [string, Operation][] => [...documentedRoutes()].map((route) => [route, operation(route)]);

  test('every operation has its own camelCase operationId', () => {
    const seen = new Map<string, string>();
    for (const [route, op] of operations()) {
      assert.match(op.operationId ?? '', /^[a-z][A-Za-z0-9]*$/, `${route} has a camelCase operationId`);
      assert.equal(
        seen.get(op.operationId!),
        undefined,
        `${route} and ${seen.get(op.operationId!)} share ${op.operationId}`,
      );
      seen.set(op.operationId!, route);
    }
    // The names clients are generated with: renaming one breaks them.
    assert.equal(operation('POST /v2/deployments').operationId, 'createDeployment');
    assert.equal(operation('GET /v2/deployments').operationId, 'listDeployments');
    assert.equal(operation('PATCH /v2/deployments/{deployment_id}').operationId, 'patchDeployment');
    assert.equal(operation('GET /v2/deployments/{deployment_id}/revisions').operationId, 'listRevisions');
    assert.equal(
      operation('POST /v2/deployments/{deployment_id}/revisions/{revision_id}/redeploy').operationId,
      'redeployRevision',
    );
    assert.equal(operation('POST /v2/listeners').operationId, 'createListener');
  });

  test('resources and bodies are named schemas, referenced rather than copied', () => {
    const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });
    const schemas = doc.components.schemas ?? {};
    for (const name of [
      'Deployment',
      'DeploymentCreate',
      'DeploymentPatch',
      'Revision',
      'SourceConfig',
      'SourceRevisionConfig',
      'ResourceSpec',
      'Secret',
      'SecretInput',
      'Listener',
      'ListenerCreate',
      'ListenerPatch',
      'OAuthProvider',
      'AgentConnection',
      'CodehostRepository',
      'ErrorBody',
      'ValidationErrorBody',
    ]) {
      assert.ok(schemas[name], `components.schemas.${name}`);
    }
    assert.deepEqual(
      responseOf('GET /v2/deployments/{deployment_id}', '200').content?.['application/json']?.schema,
      ref('Deployment'),
    );
    assert.deepEqual(
      responseOf('POST /v2/deployments', '201').content?.['application/json']?.schema,
      ref('Deployment'),
    );
    assert.deepEqual(jsonSchemaOf('GET /v2/deployments', '200').properties?.resources?.items, ref('Deployment'));
    assert.deepEqual(
      operation('POST /v2/deployments').requestBody?.content['application/json']?.schema,
      ref('DeploymentCreate'),
    );
    assert.deepEqual(
      jsonSchemaOf('GET /v2/deployments/{deployment_id}/revisions', '200').properties?.resources?.items,
      ref('Revision'),
    );
    assert.deepEqual(
      responseOf('GET /v2/listeners/{listener_id}', '200').content?.['application/json']?.schema,
      ref('Listener'),
    );
    assert.deepEqual(
      responseOf('POST /v2/listeners/{listener_id}/heartbeat', '200').content?.['application/json']?.schema,
      ref('Listener'),
    );

    // No operation carries a copy of a named schema, and every reference resolves.
    const texts = new Map(Object.entries(schemas).map(([name, schema]) => [JSON.stringify(schema), name]));
    const refs = new Set<string>();
    const walk = (node: unknown, where: string): void => {
      if (Array.isArray(node)) return node.forEach((item) => walk(item, where));
      if (node === null || typeof node !== 'object') return;
      const copy = texts.get(JSON.stringify(node));
      assert.equal(copy, undefined, `${where} holds a copy of ${copy} instead of a $ref`);
      for (const [key, value] of Object.entries(node)) {
        if (key === '$ref' && typeof value === 'string') refs.add(value);
        else if (key !== 'example' && key !== 'examples') walk(value, where);
      }
    };
    for (const [route, op] of operations()) walk(op, route);
    for (const [name, schema] of Object.entries(schemas))
      walk(Object.values(schema.properties ?? {}), `components.schemas.${name}`);
    for (const target of refs) {
      const [, kind, name] = /^#\/components\/(schemas|responses)\/(.+)$/.exec(target) ?? [];
      assert.ok(kind === 'schemas' ? schemas[name!] : doc.components.responses?.[name!], `${target} resolves`);
    }
  });

  test('operations without an API key say security: [], and every other one answers 401 without a key', async () => {
    const open = operations()
      .filter(([, op]) => op.security !== undefined && op.security.length === 0)
      .map(([route]) => route)
      .sort();
    assert.deepEqual(open, [
      'GET /healthz',
      'GET /metrics',
      'GET /readyz',
      'GET /v2/auth/callback/{provider_id}',
      'GET /v2/sso/callback',
      'GET /v2/sso/session',
      'POST /v1/integrations/forge/codehost/{integration_id}/webhooks',
      'POST /v2/sso/login',
      'POST /v2/sso/logout',
      'PUT /v2/uploads/{upload_id}',
    ]);
    for (const route of ['GET /healthz', 'GET /readyz', 'GET /metrics']) {
      const [method, url] = route.split(' ') as [string, string];
      assert.equal(
        (await t.app.inject({ method: method as 'GET', url })).statusCode,
        200,
        `${route} answers without a key`,
      );
    }
    for (const [route, op] of operations()) {
      if (op.security !== undefined && op.security.length === 0) continue;
      const [method, template] = route.split(' ') as [string, string];
      const url = template.replace(/\{[^}]+\}/g, '00000000-0000-4000-8000-000000000000');
      const res = await t.app.inject({
        method: method as 'GET',
        url,
        ...(method === 'GET' || method === 'DELETE'
          ? {}
          : { headers: { 'content-type': 'application/json' }, payload: '{}' }),
      });
      assert.equal(res.statusCode, 401, `${route} needs a credential`);
      assert.ok(op.responses['401'], `${route} documents its 401`);
    }
  });

  test('500 is listed on every operation, 413 and 415 on every one that reads a body', () => {
    for (const [route, op] of operations()) {
      assert.ok(op.responses['500'], `${route} lists 500`);
      assert.ok(jsonSchemaOf(route, '500').properties?.code, `${route} 500 is the error envelope`);
      if (route.startsWith('GET ')) continue;
      for (const status of ['413', '415'])
        assert.ok(jsonSchemaOf(route, status).properties?.detail, `${route} lists ${status}`);
    }
    for (const [route, op] of operations())
      if (op.requestBody) assert.ok(op.responses['413'] && op.responses['415'], `${route} has a body: 413 and 415`);
  });

  test("a secret's value is write-only in requests, and the constant mask in answers", () => {
    const schemas = doc.components.schemas ?? {};
    const answered = resolve({ $ref: '#/components/schemas/Secret' }).properties?.value as Schema & {
      enum?: unknown[];
      const?: unknown;
    };
    assert.deepEqual(answered.enum ?? [answered.const], ['********'], 'Secret.value is always ********');
    assert.equal((answered as { writeOnly?: boolean }).writeOnly, undefined, 'answers carry it');
    const sent = schemas.SecretInput?.properties?.value as { writeOnly?: boolean } | undefined;
    assert.equal(sent?.writeOnly, true, 'SecretInput.value is write-only');
    const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });
    assert.deepEqual(
      jsonSchemaOf('GET /v2/deployments/{deployment_id}', '200').properties?.secrets?.items,
      ref('Secret'),
    );
    for (const create of variantsOf(requestSchemaOf('POST /v2/deployments')))
      assert.deepEqual(create.properties?.secrets?.items, ref('SecretInput'));
    assert.deepEqual(
      requestSchemaOf('PATCH /v2/deployments/{deployment_id}').properties?.secrets?.items,
      ref('SecretInput'),
    );
  });

  test('the OAuth callback documents its query parameters and its HTML pages', () => {
    const route = 'GET /v2/auth/callback/{provider_id}';
    const query = (operation(route).parameters ?? []).filter((p) => p.in === 'query').map((p) => p.name);
    for (const name of ['code', 'state', 'error', 'error_description', 'iss'])
      assert.ok(query.includes(name), `query parameter ${name}`);
    for (const status of ['200', '400', '502', '503'])
      assert.ok(responseOf(route, status).content?.['text/html'], `${status} is an HTML page`);
  });
});

describe('/docs', () => {
  test('serves a browsable HTML page without an API key', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/docs' });
    assert.equal(res.statusCode, 200);
    assert.match(String(res.headers['content-type']), /text\/html/);
    assert.match(res.body, /<html/i);
    const spec = await t.app.inject({ method: 'GET', url: '/docs/json' });
    assert.equal(spec.statusCode, 200, 'the page loads its document without a key too');
    assert.equal(JSON.parse(spec.body).openapi, doc.openapi);
  });
});

describe('docs/errors.md', () => {
  test('lists every error code with its HTTP status and a meaning', async () => {
    const text = await fs.readFile(path.join(ROOT, 'docs', 'errors.md'), 'utf8');
    for (const [code, { status }] of Object.entries(ERROR_CODES)) {
      const row = new RegExp(`^\\|\\s*\`${code}\`\\s*\\|\\s*(\\d{3})\\s*\\|\\s*(.+?)\\s*\\|\\s*$`, 'm').exec(text);
      assert.ok(row, `docs/errors.md has a row for ${code}`);
      assert.equal(Number(row[1]), status, `${code} is documented with status ${status}`);
      assert.ok(row[2]!.length > 20, `${code} has a meaning`);
    }
    const documented = [...text.matchAll(/^\|\s*`([a-z_]+)`\s*\|/gm)].map((m) => m[1]!);
    assert.deepEqual(
      documented.filter((code) => !(code in ERROR_CODES)),
      [],
      'no code is documented that does not exist',
    );
  });
});
