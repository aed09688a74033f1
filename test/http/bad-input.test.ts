/**
 * Bad input of any kind is answered with a 4xx in the contract's shape and changes nothing
 * (docs/errors.md); no input gives a 5xx. Each case names the endpoint, what is wrong, the
 * expected status and, for 422, where `loc` must point.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { client, createTestApp, type Response, type TestApp } from '../support/harness.ts';

let t: TestApp;
let api: ReturnType<typeof client>;
let org: ReturnType<typeof client>;
let deploymentId: string;
let listenerId: string;
let tagKeyId: string;

const MISSING = '00000000-0000-4000-8000-000000000000';
const TABLES = [
  'organizations',
  'workspaces',
  'api_keys',
  'tracing_projects',
  'listeners',
  'source_uploads',
  'deployments',
  'revisions',
  'events',
  'tag_keys',
  'tag_values',
  'deployment_tags',
];

before(async () => {
  t = await createTestApp();
  api = client(t.app);
  org = client(t.app, t.orgKey);
  const listener = await api.post('/v2/listeners', {
    compute_type: 'k8s',
    compute_id: 'cluster-a',
    compute_config: { k8s_namespaces: ['agents'] },
  });
  assert.equal(listener.status, 201);
  listenerId = listener.body.id;
  const deployment = await api.post('/v2/deployments', {
    name: 'target',
    source: 'internal_container',
    source_revision_config: { image_uri: 'registry.example.com/agent:1' },
  });
  assert.equal(deployment.status, 201);
  deploymentId = deployment.body.id;
  const tagKey = await api.post('/v2/tags/keys', { key: 'env' });
  assert.equal(tagKey.status, 201);
  tagKeyId = tagKey.body.id;
});
after(() => t.close());

/** Every row of every table, hashed: any insert, update or delete changes it. */
async function fingerprint(): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  for (const table of TABLES) {
    const { rows } = await t.database.pool.query(
      `select count(*)::text || ':' || coalesce(md5(string_agg(x::text, '|' order by x::text)), '') as f from ${table} x`,
    );
    out[table] = rows[0].f;
  }
  return out;
}

/** What a user sees through the API, for the same purpose. */
async function visibleState() {
  return {
    deployments: (await api.get('/v2/deployments?limit=100')).body,
    listeners: (await api.get('/v2/listeners?limit=100')).body,
    revisions: (await api.get(`/v2/deployments/${deploymentId}/revisions?limit=100`)).body,
    tagKeys: (await api.get('/v2/tags/keys?limit=100')).body,
    tagValues: (await api.get(`/v2/tags/keys/${tagKeyId}/values`)).body,
    deploymentTags: (await api.get(`/v2/deployments/${deploymentId}/tags`)).body,
    workspaces: (await org.get('/v2/workspaces?limit=100')).body,
    apiKeys: (await org.get('/v2/api-keys?limit=100')).body,
  };
}

const LOCATIONS = ['body', 'path', 'query', 'header'];

/** A 4xx in the contract's shape: 422 a list of {type, loc, msg}, others a string detail. */
function assertProblem(res: Response, status: number, loc: (string | number)[] | undefined, label: string): void {
  assert.equal(res.status, status, `${label}: got ${res.status} ${JSON.stringify(res.body)?.slice(0, 400)}`);
  assert.ok(res.body && typeof res.body === 'object', `${label}: a JSON body`);
  if (status === 422) {
    assert.ok(Array.isArray(res.body.detail) && res.body.detail.length > 0, `${label}: detail is a non-empty list`);
    for (const item of res.body.detail) {
      assert.equal(typeof item.type, 'string', label);
      assert.equal(typeof item.msg, 'string', label);
      assert.ok(
        Array.isArray(item.loc) && LOCATIONS.includes(item.loc[0]),
        `${label}: loc ${JSON.stringify(item.loc)} starts with body, path, query or header`,
      );
    }
    if (loc) {
      const found = res.body.detail.some((item: { loc: unknown[] }) => loc.every((part, i) => item.loc[i] === part));
      assert.ok(
        found,
        `${label}: some loc starts with ${JSON.stringify(loc)}, got ${JSON.stringify(res.body.detail.map((i: { loc: unknown }) => i.loc))}`,
      );
    }
  } else {
    assert.equal(typeof res.body.detail, 'string', `${label}: detail is a message`);
    assert.ok(!/\n\s+at /.test(res.body.detail), `${label}: no stack trace`);
  }
}

interface Case {
  label: string;
  method: 'POST' | 'PATCH' | 'PUT' | 'GET' | 'DELETE';
  url: () => string;
  /** An object is sent as JSON; a string is sent as it is. */
  body?: unknown;
  headers?: Record<string, string>;
  /** Which key calls: workspace admin (default) or the organization key. */
  as?: 'org';
  status: number;
  loc?: (string | number)[];
}

async function run(cases: Case[]): Promise<void> {
  const beforeRows = await fingerprint();
  const beforeView = await visibleState();
  for (const c of cases) {
    const caller = c.as === 'org' ? org : api;
    const res = await caller.call(c.method, c.url(), c.body, c.headers);
    assertProblem(res, c.status, c.loc, `${c.method} ${c.label}`);
  }
  assert.deepEqual(await fingerprint(), beforeRows, 'no row changed');
  assert.deepEqual(await visibleState(), beforeView, 'no list changed');
}

const validDeployment = {
  name: 'never-made',
  source: 'internal_container',
  source_revision_config: { image_uri: 'registry.example.com/x:1' },
};
const huge = 'a'.repeat(200_000);
const overLimit = JSON.stringify({ ...validDeployment, padding: 'x'.repeat(1_100_000) });

/** Cases every JSON write endpoint must refuse the same way. */
function commonCases(label: string, method: Case['method'], url: () => string, as?: 'org'): Case[] {
  return [
    { label: `${label} malformed JSON`, method, url, body: '{"name": "x", ', status: 422, loc: ['body'], as },
    { label: `${label} trailing garbage`, method, url, body: '{"name": "x"} extra', status: 422, loc: ['body'], as },
    { label: `${label} empty body`, method, url, body: '', status: 422, loc: ['body'], as },
    { label: `${label} array body`, method, url, body: [], status: 422, loc: ['body'], as },
    { label: `${label} string body`, method, url, body: '"just a string"', status: 422, loc: ['body'], as },
    { label: `${label} number body`, method, url, body: '42', status: 422, loc: ['body'], as },
    { label: `${label} null body`, method, url, body: 'null', status: 422, loc: ['body'], as },
    { label: `${label} body over the limit`, method, url, body: overLimit, status: 413, as },
    {
      label: `${label} text/plain`,
      method,
      url,
      body: 'name=x',
      headers: { 'content-type': 'text/plain' },
      status: 415,
      as,
    },
    {
      label: `${label} form`,
      method,
      url,
      body: 'name=x',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      status: 415,
      as,
    },
    {
      label: `${label} xml`,
      method,
      url,
      body: '<name>x</name>',
      headers: { 'content-type': 'application/xml' },
      status: 415,
      as,
    },
    {
      label: `${label} deep nesting`,
      method,
      url,
      body: `{"name":${'['.repeat(5000)}${']'.repeat(5000)}}`,
      status: 422,
      loc: ['body'],
      as,
    },
    {
      label: `${label} NUL in a string`,
      method,
      url,
      body: { name: 'a\u0000b', key: 'a\u0000b', value: 'a\u0000b', version: 'a\u0000b' },
      status: 422,
      loc: ['body'],
      as,
    },
    // One body, one reading: a key given twice is refused rather than the last one winning.
    {
      label: `${label} duplicate key`,
      method,
      url,
      body: '{"name":"a","key":"a","value":"a","name":"b"}',
      status: 422,
      loc: ['body', 'name'],
      as,
    },
    // PostgreSQL cannot store a lone UTF-16 surrogate: a 422 at the field, never a 500.
    {
      label: `${label} lone surrogate`,
      method,
      url,
      body: '{"name":"a\\ud800","key":"\\udc00","value":"\\ud800","version":"\\ud800"}',
      status: 422,
      loc: ['body', 'name'],
      as,
    },
  ];
}

describe('POST /v2/deployments', () => {
  test('refuses every kind of bad body with a 4xx and changes nothing', async () => {
    const url = () => '/v2/deployments';
    const post = (label: string, body: unknown, status: number, loc?: (string | number)[]): Case => ({
      label: `deployments ${label}`,
      method: 'POST',
      url,
      body,
      status,
      loc,
    });
    await run([
      ...commonCases('deployments', 'POST', url),
      post('missing name', { source: 'internal_container' }, 422, ['body', 'name']),
      post('missing source', { name: 'no-source' }, 422, ['body', 'source']),
      post('empty object', {}, 422, ['body', 'name']),
      post('name of the wrong type', { ...validDeployment, name: 42 }, 422, ['body', 'name']),
      post('name not a host name', { ...validDeployment, name: 'Not_Valid' }, 422, ['body', 'name']),
      post('name too long', { ...validDeployment, name: `a${'b'.repeat(63)}` }, 422, ['body', 'name']),
      post('huge name', { ...validDeployment, name: huge }, 422, ['body', 'name']),
      post('unknown source', { ...validDeployment, source: 'github' }, 422, ['body', 'source']),
      post('source of the wrong type', { ...validDeployment, source: ['internal_container'] }, 422, ['body', 'source']),
      post('source_config not an object', { ...validDeployment, source_config: 'dev' }, 422, ['body', 'source_config']),
      post('unknown deployment_type', { ...validDeployment, source_config: { deployment_type: 'staging' } }, 422, [
        'body',
        'source_config',
        'deployment_type',
      ]),
      post('build_on_push not a boolean', { ...validDeployment, source_config: { build_on_push: 'yes' } }, 422, [
        'body',
        'source_config',
        'build_on_push',
      ]),
      post(
        'malformed listener_id',
        { ...validDeployment, source: 'external_container', source_config: { listener_id: 'cluster-a' } },
        422,
        ['body', 'source_config', 'listener_id'],
      ),
      post(
        'malformed integration_id',
        { ...validDeployment, source: 'codehost', source_config: { integration_id: '1234' } },
        422,
        ['body', 'source_config', 'integration_id'],
      ),
      post(
        'repo_url not a URL',
        { ...validDeployment, source: 'codehost', source_config: { repo_url: 'not a url' } },
        422,
        ['body', 'source_config', 'repo_url'],
      ),
      post('huge image_uri', { ...validDeployment, source_revision_config: { image_uri: huge } }, 422, [
        'body',
        'source_revision_config',
        'image_uri',
      ]),
      post('image_uri of the wrong type', { ...validDeployment, source_revision_config: { image_uri: 7 } }, 422, [
        'body',
        'source_revision_config',
        'image_uri',
      ]),
      post(
        'framework_config_path escaping the source',
        {
          name: 'escape',
          source: 'internal_source',
          source_revision_config: { framework_config_path: '../../etc/passwd' },
        },
        422,
        ['body', 'source_revision_config', 'framework_config_path'],
      ),
      post('negative min_scale', { ...validDeployment, source_config: { resource_spec: { min_scale: -1 } } }, 422, [
        'body',
        'source_config',
        'resource_spec',
        'min_scale',
      ]),
      post('huge max_scale', { ...validDeployment, source_config: { resource_spec: { max_scale: 1e9 } } }, 422, [
        'body',
        'source_config',
        'resource_spec',
        'max_scale',
      ]),
      post('fractional scale', { ...validDeployment, source_config: { resource_spec: { min_scale: 1.5 } } }, 422, [
        'body',
        'source_config',
        'resource_spec',
        'min_scale',
      ]),
      post('negative cpu', { ...validDeployment, source_config: { resource_spec: { cpu: -0.5 } } }, 422, [
        'body',
        'source_config',
        'resource_spec',
        'cpu',
      ]),
      post('zero memory', { ...validDeployment, source_config: { resource_spec: { memory_mb: 0 } } }, 422, [
        'body',
        'source_config',
        'resource_spec',
        'memory_mb',
      ]),
      post('memory as a string', { ...validDeployment, source_config: { resource_spec: { memory_mb: '512' } } }, 422, [
        'body',
        'source_config',
        'resource_spec',
        'memory_mb',
      ]),
      post('zero db storage', { ...validDeployment, source_config: { resource_spec: { db_storage_gi: 0 } } }, 422, [
        'body',
        'source_config',
        'resource_spec',
        'db_storage_gi',
      ]),
      post('huge cpu', { ...validDeployment, source_config: { resource_spec: { queue_cpu: 1e300 } } }, 422, [
        'body',
        'source_config',
        'resource_spec',
        'queue_cpu',
      ]),
      post('secrets not a list', { ...validDeployment, secrets: { TOKEN: 'x' } }, 422, ['body', 'secrets']),
      post('secret without value', { ...validDeployment, secrets: [{ name: 'TOKEN' }] }, 422, [
        'body',
        'secrets',
        0,
        'value',
      ]),
      post('secret name not an env name', { ...validDeployment, secrets: [{ name: '1-bad name', value: 'x' }] }, 422, [
        'body',
        'secrets',
        0,
        'name',
      ]),
      post('secret_references item of the wrong type', { ...validDeployment, secret_references: ['x'] }, 422, [
        'body',
        'secret_references',
        0,
      ]),
      // Well-formed but breaking a rule: 400.
      post(
        'a field of another source',
        { ...validDeployment, source_revision_config: { image_uri: 'x/y:1', repo_ref: 'main' } },
        400,
      ),
      post(
        'a listener that does not exist',
        { ...validDeployment, source: 'external_container', source_config: { listener_id: MISSING } },
        400,
      ),
      post(
        'min_scale above max_scale',
        { ...validDeployment, source_config: { resource_spec: { min_scale: 5, max_scale: 1 } } },
        400,
      ),
      post(
        'a duplicate secret name',
        {
          ...validDeployment,
          secrets: [
            { name: 'A', value: '1' },
            { name: 'A', value: '2' },
          ],
        },
        400,
      ),
      post('the secret mask on create', { ...validDeployment, secrets: [{ name: 'A', value: '********' }] }, 400),
      post('a taken name', { ...validDeployment, name: 'target' }, 409),
    ]);
  });

  test('unknown fields are ignored', async () => {
    const res = await api.post('/v2/deployments', {
      ...validDeployment,
      name: 'extra-fields',
      client_version: '9.9',
      source_config: { deployment_type: 'dev', future_field: true },
    });
    assert.equal(res.status, 201, JSON.stringify(res.body));
    assert.equal(res.body.name, 'extra-fields');
    assert.ok(!('client_version' in res.body));
    const stored = await t.database.pool.query('select source_config::text as c from deployments where id = $1', [
      res.body.id,
    ]);
    assert.ok(!stored.rows[0].c.includes('future_field'), 'unknown fields are not stored either');
    const listener = await api.post('/v2/listeners', {
      compute_type: 'k8s',
      compute_id: 'extra-fields',
      compute_config: { k8s_namespaces: ['a'], zone: 'eu' },
      labels: {},
    });
    assert.equal(listener.status, 201, JSON.stringify(listener.body));
    assert.deepEqual(listener.body.compute_config, { k8s_namespaces: ['a'] });
    assert.equal((await api.delete(`/v2/listeners/${listener.body.id}`)).status, 204);
    assert.equal((await api.delete(`/v2/deployments/${res.body.id}?delete_tracing_project=true`)).status, 204);
  });
});

describe('PATCH /v2/deployments/{id}', () => {
  test('refuses bad bodies and malformed ids with a 4xx and changes nothing', async () => {
    const url = () => `/v2/deployments/${deploymentId}`;
    const patch = (label: string, body: unknown, status: number, loc?: (string | number)[]): Case => ({
      label: `patch deployment ${label}`,
      method: 'PATCH',
      url,
      body,
      status,
      loc,
    });
    await run([
      ...commonCases('patch deployment', 'PATCH', url),
      patch(
        'unknown revision_source',
        { revision_source: 'external_container', source_revision_config: { image_uri: 'x/y:2' } },
        422,
        ['body', 'revision_source'],
      ),
      patch('source_revision_config not an object', { source_revision_config: 'x/y:2' }, 422, [
        'body',
        'source_revision_config',
      ]),
      patch('huge image_uri', { source_revision_config: { image_uri: huge } }, 422, [
        'body',
        'source_revision_config',
        'image_uri',
      ]),
      patch('negative max_scale', { source_config: { resource_spec: { max_scale: -3 } } }, 422, [
        'body',
        'source_config',
        'resource_spec',
        'max_scale',
      ]),
      patch('secrets of the wrong type', { secrets: 'TOKEN=x' }, 422, ['body', 'secrets']),
      patch('another name', { name: 'renamed' }, 400),
      patch('another source', { source: 'internal_source' }, 400),
      patch('another deployment_type', { source_config: { deployment_type: 'prod' } }, 400),
      patch('a field of another source', { source_revision_config: { repo_ref: 'main' } }, 400),
      {
        label: 'patch deployment malformed id',
        method: 'PATCH',
        url: () => '/v2/deployments/not-a-uuid',
        body: { source_revision_config: { image_uri: 'x/y:2' } },
        status: 422,
        loc: ['path', 'deployment_id'],
      },
      {
        label: 'patch deployment unknown id',
        method: 'PATCH',
        url: () => `/v2/deployments/${MISSING}`,
        body: { source_revision_config: { image_uri: 'x/y:2' } },
        status: 404,
      },
      {
        label: 'patch deployment over-long id',
        method: 'PATCH',
        url: () => `/v2/deployments/${'a'.repeat(500)}`,
        body: {},
        status: 422,
        loc: ['path'],
      },
      {
        label: 'patch deployment bad percent-encoding',
        method: 'PATCH',
        url: () => '/v2/deployments/%E0%A4%A',
        body: {},
        status: 400,
      },
    ]);
  });
});

describe('listeners', () => {
  test('POST /v2/listeners refuses bad bodies and changes nothing', async () => {
    const url = () => '/v2/listeners';
    const post = (label: string, body: unknown, status: number, loc?: (string | number)[]): Case => ({
      label: `listeners ${label}`,
      method: 'POST',
      url,
      body,
      status,
      loc,
    });
    await run([
      ...commonCases('listeners', 'POST', url),
      post('missing compute_type', { compute_id: 'x' }, 422, ['body', 'compute_type']),
      post('missing compute_id', { compute_type: 'k8s' }, 422, ['body', 'compute_id']),
      post('unknown compute_type', { compute_type: 'ecs', compute_id: 'x' }, 422, ['body', 'compute_type']),
      post('compute_id of the wrong type', { compute_type: 'k8s', compute_id: 12 }, 422, ['body', 'compute_id']),
      post('huge compute_id', { compute_type: 'k8s', compute_id: huge }, 422, ['body', 'compute_id']),
      post('huge version', { compute_type: 'k8s', compute_id: 'x', version: huge }, 422, ['body', 'version']),
      post(
        'namespaces not a list',
        { compute_type: 'k8s', compute_id: 'x', compute_config: { k8s_namespaces: 'agents' } },
        422,
        ['body', 'compute_config', 'k8s_namespaces'],
      ),
      post(
        'empty namespace list',
        { compute_type: 'k8s', compute_id: 'x', compute_config: { k8s_namespaces: [] } },
        422,
        ['body', 'compute_config', 'k8s_namespaces'],
      ),
      post(
        'namespace not a Kubernetes name',
        { compute_type: 'k8s', compute_id: 'x', compute_config: { k8s_namespaces: ['Bad_NS'] } },
        422,
        ['body', 'compute_config', 'k8s_namespaces', 0],
      ),
      post(
        'duplicate namespaces',
        { compute_type: 'k8s', compute_id: 'x', compute_config: { k8s_namespaces: ['a', 'a'] } },
        422,
        ['body', 'compute_config', 'k8s_namespaces'],
      ),
      post('a taken compute_id', { compute_type: 'k8s', compute_id: 'cluster-a' }, 409),
    ]);
  });

  test('PATCH /v2/listeners/{id} refuses bad bodies and ids and changes nothing', async () => {
    const url = () => `/v2/listeners/${listenerId}`;
    const patch = (label: string, body: unknown, status: number, loc?: (string | number)[]): Case => ({
      label: `patch listener ${label}`,
      method: 'PATCH',
      url,
      body,
      status,
      loc,
    });
    await run([
      ...commonCases('patch listener', 'PATCH', url),
      patch('version of the wrong type', { version: 3 }, 422, ['body', 'version']),
      patch('huge version', { version: huge }, 422, ['body', 'version']),
      patch('namespaces of the wrong type', { compute_config: { k8s_namespaces: [1, 2] } }, 422, [
        'body',
        'compute_config',
        'k8s_namespaces',
        0,
      ]),
      patch('another compute_type', { compute_type: 'ecs' }, 400),
      patch('another compute_id', { compute_id: 'cluster-b' }, 400),
      {
        label: 'patch listener malformed id',
        method: 'PATCH',
        url: () => '/v2/listeners/123',
        body: { version: 'x' },
        status: 422,
        loc: ['path', 'listener_id'],
      },
      {
        label: 'patch listener unknown id',
        method: 'PATCH',
        url: () => `/v2/listeners/${MISSING}`,
        body: { version: 'x' },
        status: 404,
      },
    ]);
  });
});

describe('tags', () => {
  test('POST /v2/tags/keys and its values refuse bad bodies and changes nothing', async () => {
    const keys = () => '/v2/tags/keys';
    const values = () => `/v2/tags/keys/${tagKeyId}/values`;
    await run([
      ...commonCases('tag keys', 'POST', keys),
      ...commonCases('tag values', 'POST', values),
      {
        label: 'tag key missing key',
        method: 'POST',
        url: keys,
        body: { description: 'x' },
        status: 422,
        loc: ['body', 'key'],
      },
      {
        label: 'tag key of the wrong type',
        method: 'POST',
        url: keys,
        body: { key: ['env'] },
        status: 422,
        loc: ['body', 'key'],
      },
      { label: 'tag key huge', method: 'POST', url: keys, body: { key: huge }, status: 422, loc: ['body', 'key'] },
      { label: 'tag key empty', method: 'POST', url: keys, body: { key: '' }, status: 422, loc: ['body', 'key'] },
      {
        label: 'tag key huge description',
        method: 'POST',
        url: keys,
        body: { key: 'ok', description: huge },
        status: 422,
        loc: ['body', 'description'],
      },
      { label: 'tag key taken', method: 'POST', url: keys, body: { key: 'env' }, status: 409 },
      { label: 'tag value missing value', method: 'POST', url: values, body: {}, status: 422, loc: ['body', 'value'] },
      {
        label: 'tag value of the wrong type',
        method: 'POST',
        url: values,
        body: { value: true },
        status: 422,
        loc: ['body', 'value'],
      },
      {
        label: 'tag value huge',
        method: 'POST',
        url: values,
        body: { value: huge },
        status: 422,
        loc: ['body', 'value'],
      },
      {
        label: 'tag value malformed key id',
        method: 'POST',
        url: () => '/v2/tags/keys/env/values',
        body: { value: 'x' },
        status: 422,
        loc: ['path', 'tag_key_id'],
      },
      {
        label: 'tag value unknown key id',
        method: 'POST',
        url: () => `/v2/tags/keys/${MISSING}/values`,
        body: { value: 'x' },
        status: 404,
      },
    ]);
  });

  test('PUT /v2/deployments/{id}/tags refuses bad bodies and changes nothing', async () => {
    const url = () => `/v2/deployments/${deploymentId}/tags`;
    const put = (label: string, body: unknown, status: number, loc?: (string | number)[]): Case => ({
      label: `put tags ${label}`,
      method: 'PUT',
      url,
      body,
      status,
      loc,
    });
    await run([
      ...commonCases('put tags', 'PUT', url),
      put('missing tag_value_ids', {}, 422, ['body', 'tag_value_ids']),
      put('tag_value_ids not a list', { tag_value_ids: MISSING }, 422, ['body', 'tag_value_ids']),
      put('malformed tag value id', { tag_value_ids: ['prod'] }, 422, ['body', 'tag_value_ids', 0]),
      put(
        'too many ids',
        {
          tag_value_ids: Array.from(
            { length: 101 },
            (_, i) => `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
          ),
        },
        422,
        ['body', 'tag_value_ids'],
      ),
      put('unknown tag value id', { tag_value_ids: [MISSING] }, 400),
      {
        label: 'put tags malformed deployment id',
        method: 'PUT',
        url: () => '/v2/deployments/target/tags',
        body: { tag_value_ids: [] },
        status: 422,
        loc: ['path', 'deployment_id'],
      },
      {
        label: 'put tags unknown deployment',
        method: 'PUT',
        url: () => `/v2/deployments/${MISSING}/tags`,
        body: { tag_value_ids: [] },
        status: 404,
      },
    ]);
  });
});

describe('workspaces and API keys', () => {
  test('POST /v2/workspaces and POST /v2/api-keys refuse bad bodies and change nothing', async () => {
    const workspaces = () => '/v2/workspaces';
    const keys = () => '/v2/api-keys';
    await run([
      ...commonCases('workspaces', 'POST', workspaces, 'org'),
      ...commonCases('api-keys', 'POST', keys, 'org'),
      {
        label: 'workspace missing name',
        method: 'POST',
        url: workspaces,
        body: {},
        status: 422,
        loc: ['body', 'name'],
        as: 'org',
      },
      {
        label: 'workspace name of the wrong type',
        method: 'POST',
        url: workspaces,
        body: { name: 5 },
        status: 422,
        loc: ['body', 'name'],
        as: 'org',
      },
      {
        label: 'workspace huge name',
        method: 'POST',
        url: workspaces,
        body: { name: huge },
        status: 422,
        loc: ['body', 'name'],
        as: 'org',
      },
      {
        label: 'workspace blank name',
        method: 'POST',
        url: workspaces,
        body: { name: '   ' },
        status: 422,
        loc: ['body', 'name'],
        as: 'org',
      },
      {
        label: 'workspace taken name',
        method: 'POST',
        url: workspaces,
        body: { name: 'default' },
        status: 409,
        as: 'org',
      },
      {
        label: 'api key missing name',
        method: 'POST',
        url: keys,
        body: { role: 'member' },
        status: 422,
        loc: ['body', 'name'],
        as: 'org',
      },
      {
        label: 'api key unknown role',
        method: 'POST',
        url: keys,
        body: { name: 'k', role: 'owner' },
        status: 422,
        loc: ['body', 'role'],
        as: 'org',
      },
      {
        label: 'api key malformed workspace_id',
        method: 'POST',
        url: keys,
        body: { name: 'k', workspace_id: 'default' },
        status: 422,
        loc: ['body', 'workspace_id'],
        as: 'org',
      },
      {
        label: 'api key unknown workspace_id',
        method: 'POST',
        url: keys,
        body: { name: 'k', workspace_id: MISSING },
        status: 400,
        as: 'org',
      },
      {
        label: 'api key huge name',
        method: 'POST',
        url: keys,
        body: { name: huge },
        status: 422,
        loc: ['body', 'name'],
        as: 'org',
      },
      {
        label: 'revoke malformed id',
        method: 'DELETE',
        url: () => '/v2/api-keys/abc',
        status: 422,
        loc: ['path', 'api_key_id'],
        as: 'org',
      },
      { label: 'revoke unknown id', method: 'DELETE', url: () => `/v2/api-keys/${MISSING}`, status: 404, as: 'org' },
    ]);
  });
});

describe('paths, queries and headers', () => {
  test('malformed ids in paths, bad query controls and filters are 422 pointing at them', async () => {
    const get = (url: string, status: number, loc?: (string | number)[]): Case => ({
      label: url.slice(0, 120),
      method: 'GET',
      url: () => url,
      status,
      loc,
    });
    await run([
      get('/v2/deployments/not-a-uuid', 422, ['path', 'deployment_id']),
      get(`/v2/deployments/${MISSING.slice(0, 35)}`, 422, ['path', 'deployment_id']),
      get(`/v2/deployments/${MISSING}x`, 422, ['path', 'deployment_id']),
      get('/v2/deployments/not-a-uuid/revisions', 422, ['path', 'deployment_id']),
      get(`/v2/deployments/${deploymentId}/revisions/not-a-uuid`, 422, ['path', 'revision_id']),
      get('/v2/listeners/cluster-a', 422, ['path', 'listener_id']),
      get('/v2/tags/keys/env/values', 422, ['path', 'tag_key_id']),
      get(`/v2/deployments/${MISSING}`, 404),
      get('/v2/deployments?limit=0', 422, ['query', 'limit']),
      get('/v2/deployments?limit=101', 422, ['query', 'limit']),
      get('/v2/deployments?limit=-5', 422, ['query', 'limit']),
      get('/v2/deployments?limit=ten', 422, ['query', 'limit']),
      get('/v2/deployments?limit=2.5', 422, ['query', 'limit']),
      get('/v2/deployments?offset=-1', 422, ['query', 'offset']),
      get('/v2/deployments?offset=1e20', 422, ['query', 'offset']),
      get('/v2/deployments?offset=100000000000000000000000', 422, ['query', 'offset']),
      get('/v2/deployments?status=RUNNING', 422, ['query', 'status']),
      get('/v2/deployments?status=ready', 422, ['query', 'status']),
      get('/v2/deployments?deployment_type=staging', 422, ['query', 'deployment_type']),
      get('/v2/deployments?remote_reconciled=maybe', 422, ['query', 'remote_reconciled']),
      get('/v2/deployments?deployment_ids=target', 422, ['query', 'deployment_ids']),
      get(`/v2/deployments?deployment_ids=${MISSING},nope`, 422, ['query', 'deployment_ids']),
      get('/v2/deployments?tag_value_ids=env', 422, ['query', 'tag_value_ids']),
      get(`/v2/deployments?name_contains=${'a'.repeat(64)}`, 422, ['query', 'name_contains']),
      get(`/v2/deployments?name=${'a'.repeat(500)}`, 422, ['query', 'name']),
      get('/v2/deployments?name=a%00b', 422, ['query', 'name']),
      get(`/v2/deployments/${deploymentId}/revisions?status=QUEUED,RUNNING`, 422, ['query', 'status']),
      get(`/v2/deployments/${deploymentId}/revisions?status=`, 422, ['query', 'status']),
      get(`/v2/deployments/${deploymentId}/revisions?limit=0`, 422, ['query', 'limit']),
      get(`/v2/deployments/${deploymentId}/revisions?offset=-1`, 422, ['query', 'offset']),
      get(`/v2/deployments/${deploymentId}/revisions?remote_reconciled=2`, 422, ['query', 'remote_reconciled']),
      get('/v2/listeners?limit=0', 422, ['query', 'limit']),
      get('/v2/listeners?limit=101', 422, ['query', 'limit']),
      get('/v2/listeners?offset=-1', 422, ['query', 'offset']),
      get('/v2/tags/keys?limit=101', 422, ['query', 'limit']),
      get('/v2/tracing-projects?offset=-1', 422, ['query', 'offset']),
      {
        label: 'workspaces limit=0',
        method: 'GET',
        url: () => '/v2/workspaces?limit=0',
        status: 422,
        loc: ['query', 'limit'],
        as: 'org',
      },
      {
        label: 'api-keys offset=-1',
        method: 'GET',
        url: () => '/v2/api-keys?offset=-1',
        status: 422,
        loc: ['query', 'offset'],
        as: 'org',
      },
      {
        label: 'delete deployment malformed id',
        method: 'DELETE',
        url: () => '/v2/deployments/target',
        status: 422,
        loc: ['path', 'deployment_id'],
      },
      {
        label: 'delete deployment bad flag',
        method: 'DELETE',
        url: () => `/v2/deployments/${deploymentId}?delete_tracing_project=maybe`,
        status: 422,
        loc: ['query', 'delete_tracing_project'],
      },
      {
        label: 'delete listener malformed id',
        method: 'DELETE',
        url: () => '/v2/listeners/cluster-a',
        status: 422,
        loc: ['path', 'listener_id'],
      },
      {
        label: 'malformed X-Tenant-Id',
        method: 'GET',
        url: () => '/v2/deployments',
        headers: { 'x-tenant-id': 'default' },
        status: 422,
        loc: ['header', 'x-tenant-id'],
      },
      {
        label: 'malformed X-Tenant-Id on a write',
        method: 'POST',
        url: () => '/v2/deployments',
        body: validDeployment,
        headers: { 'x-tenant-id': 'default' },
        status: 422,
        loc: ['header', 'x-tenant-id'],
      },
      get('/v2/no-such-thing', 404),
    ]);
  });

  test('unknown query parameters are ignored, as unknown body fields are (docs/api.md, "Conventions")', async () => {
    const plain = await api.get('/v2/api-keys');
    assert.equal(plain.status, 200);
    const extra = await api.get('/v2/api-keys?x-unknown=42');
    assert.equal(extra.status, 200, JSON.stringify(extra.body));
    assert.deepEqual(extra.body, plain.body);
    const deployments = await api.get(`/v2/deployments?name=target&x-unknown=42&future_filter=1`);
    assert.equal(deployments.status, 200);
    assert.deepEqual(
      deployments.body.resources.map((d: { id: string }) => d.id),
      [deploymentId],
      'the known filter applies, the unknown one is ignored',
    );
    // A parameter the operation lists is still validated.
    const bad = await api.get('/v2/api-keys?x-unknown=42&limit=0');
    assert.equal(bad.status, 422);
    assert.deepEqual(bad.body.detail[0].loc, ['query', 'limit']);
  });
});

/** mulberry32: a small seeded PRNG, so a failure can be replayed from its seed. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let x = a;
    x = Math.imul(x ^ (x >>> 15), x | 1);
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61);
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
}

const FIELDS = [
  'name',
  'source',
  'source_config',
  'source_revision_config',
  'secrets',
  'secret_references',
  'revision_source',
  'integration_id',
  'repo_url',
  'deployment_type',
  'build_on_push',
  'custom_url',
  'resource_spec',
  'listener_id',
  'listener_config',
  'k8s_namespace',
  'install_command',
  'build_command',
  'repo_ref',
  'framework_config_path',
  'image_uri',
  'source_tarball_path',
  'repo_commit_sha',
  'value',
  'secret_name',
  'secret_key',
  'min_scale',
  'max_scale',
  'cpu',
  'cpu_limit',
  'memory_mb',
  'db_storage_gi',
  'labels',
  'annotations',
  'volumes',
  'volume_mounts',
  'init_containers',
  'sidecars',
  'image_pull_secrets',
  'env',
  'constructor',
  'toString',
];
const SOURCES = [
  'codehost',
  'external_container',
  'internal_container',
  'internal_source',
  'github',
  '',
  'INTERNAL_CONTAINER',
];

function generator(random: () => number) {
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)]!;
  const strings = () => [
    '',
    'a',
    'fuzz',
    'Fuzz_Name',
    'x'.repeat(300),
    'ünïcødé 😀',
    '\u0000',
    'a\u0000b',
    '\ud800',
    '../../etc/passwd',
    '/abs/path',
    'refs/tags/v1',
    'refs/heads/main',
    'registry.example.com/x:1',
    'https://code.example.com/acme/agent',
    '********',
    'dev',
    'prod',
    'k8s',
    'agents',
    MISSING,
    listenerId,
    deploymentId,
    '00000000-0000-0000-0000-00000000000g',
    '%00',
    '\\',
    "'; drop table deployments; --",
    `fuzz-${Math.floor(random() * 1e6)}`,
  ];
  const numbers = () => [
    0,
    1,
    -1,
    0.5,
    -0.5,
    1.5,
    2 ** 31,
    2 ** 53 + 1,
    -(2 ** 63),
    1e308,
    -1e308,
    5e-324,
    63,
    100,
    101,
  ];
  function value(depth: number): unknown {
    const roll = random();
    if (depth > 4 || roll < 0.15) return pick([null, true, false]);
    if (roll < 0.35) return pick(numbers());
    if (roll < 0.6) return pick(strings());
    if (roll < 0.75) return Array.from({ length: Math.floor(random() * 4) }, () => value(depth + 1));
    const object: Record<string, unknown> = {};
    const size = Math.floor(random() * 6);
    for (let i = 0; i < size; i++) object[random() < 0.8 ? pick(FIELDS) : pick(strings())] = value(depth + 1);
    return object;
  }
  /** Mostly a deployment-shaped body with some fields wrong, sometimes anything at all. */
  function body(): unknown {
    if (random() < 0.2) return value(0);
    const out: Record<string, unknown> = {};
    if (random() < 0.9) out.name = random() < 0.6 ? `fuzz-${Math.floor(random() * 1e9).toString(36)}` : value(1);
    if (random() < 0.9) out.source = random() < 0.8 ? pick(SOURCES) : value(1);
    for (const field of ['source_config', 'source_revision_config', 'secrets', 'secret_references']) {
      if (random() < 0.5) out[field] = value(1);
    }
    if (random() < 0.3)
      out.source_config = {
        listener_id: pick([listenerId, MISSING, 'x']),
        resource_spec: value(2),
        listener_config: value(2),
      };
    if (random() < 0.3)
      out.source_revision_config = {
        image_uri: pick(strings()),
        repo_ref: random() < 0.5 ? pick(strings()) : undefined,
      };
    if (random() < 0.2) out.secrets = [{ name: pick(['TOKEN', 'A', 'bad name', '']), value: pick(strings()) }];
    return out;
  }
  return { body };
}

describe('fuzz', () => {
  test('200 generated create-deployment bodies never give a 5xx', async () => {
    const seed = Number(process.env.SLIPWAY_FUZZ_SEED ?? 20261121);
    const { body } = generator(prng(seed));
    const seen = new Map<number, number>();
    for (let i = 0; i < 200; i++) {
      const input = body();
      const res = await api.post('/v2/deployments', input);
      seen.set(res.status, (seen.get(res.status) ?? 0) + 1);
      const label = `seed ${seed} case ${i}: ${JSON.stringify(input)?.slice(0, 300)}`;
      assert.ok(res.status < 500, `${label} -> ${res.status} ${JSON.stringify(res.body)}`);
      if (res.status >= 400) assertProblem(res, res.status, undefined, label);
      else assert.equal(res.status, 201, label);
    }
    // The generator must reach past the schema, or it tests little.
    assert.ok(
      (seen.get(422) ?? 0) > 0 && (seen.get(400) ?? 0) + (seen.get(201) ?? 0) > 0,
      `statuses seen: ${JSON.stringify([...seen])}`,
    );
  });

  test('100 generated patch bodies never give a 5xx', async () => {
    const seed = Number(process.env.SLIPWAY_FUZZ_SEED ?? 20261121) + 1;
    const { body } = generator(prng(seed));
    for (let i = 0; i < 100; i++) {
      const input = body();
      if (input && typeof input === 'object' && !Array.isArray(input)) delete (input as Record<string, unknown>).name;
      const res = await api.patch(`/v2/deployments/${deploymentId}`, input);
      const label = `seed ${seed} case ${i}: ${JSON.stringify(input)?.slice(0, 300)}`;
      assert.ok(res.status < 500, `${label} -> ${res.status} ${JSON.stringify(res.body)}`);
      if (res.status >= 400) assertProblem(res, res.status, undefined, label);
    }
  });
});
