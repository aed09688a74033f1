import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { client, createTestApp, type TestApp } from '../support/harness.ts';

let t: TestApp;
let api: ReturnType<typeof client>;
let listenerId: string;

before(async () => {
  t = await createTestApp();
  api = client(t.app);
  const listener = await api.post('/v2/listeners', {
    compute_type: 'k8s',
    compute_id: 'cluster-a',
    compute_config: { k8s_namespaces: ['agents', 'batch'] },
  });
  assert.equal(listener.status, 201);
  listenerId = listener.body.id;
});
after(() => t.close());

const container = (name: string, extra: Record<string, unknown> = {}) => ({
  name,
  source: 'internal_container',
  source_revision_config: { image_uri: 'registry.example.com/agent:1.0.0' },
  ...extra,
});

describe('create', () => {
  test('an internal_container deployment gets revision 1, QUEUED, a tracing project, masked secrets', async () => {
    const res = await api.post(
      '/v2/deployments',
      container('alpha', { secrets: [{ name: 'OPENAI_API_KEY', value: 'sk-secret-value' }] }),
    );
    assert.equal(res.status, 201);
    const d = res.body;
    assert.equal(d.name, 'alpha');
    assert.equal(d.source, 'internal_container');
    assert.equal(d.status, 'AWAITING_DATABASE');
    assert.equal(d.tenant_id, t.workspaceId);
    assert.equal(d.source_config.deployment_type, 'dev');
    assert.equal(d.source_revision_config.image_uri, 'registry.example.com/agent:1.0.0');
    assert.equal(d.image_version, '1.0.0');
    assert.deepEqual(d.secrets, [{ name: 'OPENAI_API_KEY', value: '********' }]);
    assert.equal(d.active_revision_id, null);
    assert.match(d.created_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    assert.ok(!JSON.stringify(d).includes('sk-secret-value'));

    const revisions = await api.get(`/v2/deployments/${d.id}/revisions`);
    assert.equal(revisions.status, 200);
    assert.equal(revisions.body.resources.length, 1);
    assert.equal(revisions.body.resources[0].id, d.latest_revision_id);
    assert.equal(revisions.body.resources[0].status, 'QUEUED');
    assert.equal(revisions.body.offset, 1);

    const projects = await api.get('/v2/tracing-projects');
    assert.ok(
      projects.body.resources.some(
        (p: { name: string; id: string }) => p.name === 'alpha' && p.id === d.tracing_project_id,
      ),
    );
  });

  test('secrets are encrypted at rest', async () => {
    const res = await api.post(
      '/v2/deployments',
      container('at-rest', { secrets: [{ name: 'TOKEN', value: 'plain-text-canary' }] }),
    );
    assert.equal(res.status, 201);
    const rows = await t.database.pool.query(
      "select d.secrets::text as d, r.secrets::text as r from deployments d join revisions r on r.deployment_id = d.id where d.name = 'at-rest'",
    );
    assert.ok(!rows.rows[0].d.includes('plain-text-canary'));
    assert.ok(!rows.rows[0].r.includes('plain-text-canary'));
  });

  test('an external_container deployment runs on a listener namespace and is remote_reconciled', async () => {
    const res = await api.post('/v2/deployments', {
      name: 'on-cluster',
      source: 'external_container',
      source_config: { listener_id: listenerId, listener_config: { k8s_namespace: 'batch' } },
      source_revision_config: { image_uri: 'ghcr.io/acme/agent@sha256:abc' },
      secret_references: [{ name: 'DB_PASSWORD', secret_name: 'db', secret_key: 'password' }],
    });
    assert.equal(res.status, 201, JSON.stringify(res.body));
    assert.equal(res.body.remote_reconciled, true);
    assert.equal(res.body.source_config.listener_config.k8s_namespace, 'batch');
    assert.deepEqual(res.body.secret_references, [{ name: 'DB_PASSWORD', secret_name: 'db', secret_key: 'password' }]);
    assert.equal(res.body.image_version, 'sha256:abc');
  });

  test('per-source rules answer 400 naming the field', async () => {
    const cases: [Record<string, unknown>, string][] = [
      [
        { name: 'c1', source: 'external_container', source_revision_config: { image_uri: 'x/y:1' } },
        'source_config.listener_id is required for source external_container',
      ],
      [
        { name: 'c2', source: 'external_container', source_config: { listener_id: listenerId } },
        'source_revision_config.image_uri is required for source external_container',
      ],
      [
        {
          name: 'c3',
          source: 'internal_container',
          source_config: { listener_id: listenerId },
          source_revision_config: { image_uri: 'x/y:1' },
        },
        'source_config.listener_id is not allowed for source internal_container',
      ],
      [
        { name: 'c4', source: 'internal_container', source_revision_config: { image_uri: 'x/y:1', repo_ref: 'main' } },
        'source_revision_config.repo_ref is not allowed for source internal_container',
      ],
      [
        {
          name: 'c5',
          source: 'internal_container',
          source_revision_config: { image_uri: 'x/y:1' },
          secret_references: [{ name: 'A', secret_name: 'a', secret_key: 'k' }],
        },
        'secret_references is not allowed for source internal_container',
      ],
      [
        { name: 'c6', source: 'codehost', source_config: { integration_id: '00000000-0000-4000-8000-000000000000' } },
        'source_config.repo_url is required for source codehost',
      ],
      [
        { name: 'c7', source: 'internal_container', source_config: { custom_url: 'https://x.example' } },
        'source_config.custom_url is set by the service and cannot be given.',
      ],
      [
        {
          name: 'c8',
          source: 'external_container',
          source_config: { listener_id: listenerId, listener_config: { k8s_namespace: 'other' } },
          source_revision_config: { image_uri: 'x/y:1' },
        },
        "source_config.listener_config.k8s_namespace 'other' is not one of the listener's namespaces (agents, batch)",
      ],
      [
        {
          name: 'c9',
          source: 'external_container',
          source_config: { listener_id: '00000000-0000-4000-8000-000000000000' },
          source_revision_config: { image_uri: 'x/y:1' },
        },
        'source_config.listener_id: Listener ID 00000000-0000-4000-8000-000000000000 not found.',
      ],
      [
        {
          name: 'c10',
          source: 'internal_source',
          source_revision_config: { source_tarball_path: '/etc/passwd', framework_config_path: 'agent.json' },
        },
        "source_revision_config.source_tarball_path '/etc/passwd' is not an upload of this workspace",
      ],
      [
        { name: 'c11', source: 'internal_container', source_config: { resource_spec: { min_scale: 3, max_scale: 1 } } },
        'source_config.resource_spec.min_scale (3) must not exceed max_scale (1)',
      ],
    ];
    for (const [body, message] of cases) {
      const res = await api.post('/v2/deployments', body);
      assert.equal(res.status, 400, `${JSON.stringify(body)} -> ${JSON.stringify(res.body)}`);
      assert.ok(res.body.detail.startsWith(message), `${res.body.detail} should start with ${message}`);
    }
    const names = (await api.get('/v2/deployments?limit=100')).body.resources.map((d: { name: string }) => d.name);
    assert.ok(!names.some((n: string) => /^c\d+$/.test(n)), 'refused creates left no deployment');
  });

  test('internal_source and internal_container may be created without a revision', async () => {
    for (const source of ['internal_source', 'internal_container']) {
      const res = await api.post('/v2/deployments', {
        name: `empty-${source.replace('_', '-')}`,
        source,
        source_config: { deployment_type: 'prod' },
      });
      assert.equal(res.status, 201, JSON.stringify(res.body));
      assert.equal(res.body.latest_revision_id, null);
      assert.equal(res.body.source_config.deployment_type, 'prod');
      const revisions = await api.get(`/v2/deployments/${res.body.id}/revisions`);
      assert.deepEqual(revisions.body.resources, []);
    }
  });

  test('a taken name is 409 and concurrent creates of one name give exactly one 201', async () => {
    assert.equal((await api.post('/v2/deployments', container('taken'))).status, 201);
    const again = await api.post('/v2/deployments', container('taken'));
    assert.equal(again.status, 409);
    assert.equal(again.body.detail, "A deployment named 'taken' already exists.");

    const results = await Promise.all(
      Array.from({ length: 8 }, () => api.post('/v2/deployments', container('racing'))),
    );
    const statuses = results.map((r) => r.status).sort();
    assert.deepEqual(statuses, [201, 409, 409, 409, 409, 409, 409, 409]);
    const listed = await api.get('/v2/deployments?name=racing');
    assert.equal(listed.body.resources.length, 1);
  });
});
