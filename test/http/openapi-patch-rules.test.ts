/**
 * The OpenAPI document says what a PATCH of a deployment takes by the stored deployment's source
 * (issue 34, item 8), which a schema cannot: a table in the operation's description. The service keeps
 * to it: for each source, every field of source_config and source_revision_config the table does not
 * list, sent with a value its schema takes, is 400 `field_not_allowed`, and no field it lists is.
 * (codehost deployments need a code host; their row is made by the same code as the others'.)
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { REVISION_FIELDS, SOURCE_CONFIG_FIELDS } from '../../src/domain/sources.ts';
import { client, createTestApp, registerListener, type TestApp } from '../support/harness.ts';

let t: TestApp;
let api: ReturnType<typeof client>;
/** Rows of the table: source -> [source_config fields, source_revision_config fields]. */
let table: Map<string, [string[], string[]]>;
const deployments = new Map<string, string>();

/** A value each field's schema takes. */
const VALUES: Record<string, unknown> = {
  integration_id: '0b9e1c2d-0000-4000-8000-000000000001',
  repo_url: 'https://github.com/acme/agent',
  deployment_type: 'dev',
  build_on_push: true,
  custom_url: 'https://agent.example.com',
  resource_spec: { min_scale: 1 },
  listener_id: '0b9e1c2d-0000-4000-8000-000000000002',
  listener_config: { k8s_namespace: 'agents' },
  install_command: 'npm ci',
  build_command: 'npm run build',
  repo_ref: 'main',
  framework_config_path: 'slipway.json',
  image_uri: 'registry.example.com/agent:2',
  source_tarball_path: 'uploads/agent.tar.gz',
};

before(async () => {
  t = await createTestApp();
  api = client(t.app);
  const doc = (await api.get('/openapi.json')).body;
  const description: string = doc.paths['/v2/deployments/{deployment_id}'].patch.description;
  table = new Map(
    [...description.matchAll(/^\| (\w+) \| ([^|]+) \| ([^|]+) \| (yes|no) \|$/gm)].map(
      ([, source, config, revision]) => [source!, [config!.trim().split(', '), revision!.trim().split(', ')]],
    ),
  );
  const listener = await registerListener((url, body) => api.post(url, body), 'patch-rules', ['agents']);
  const made = [
    {
      name: 'rules-container',
      source: 'internal_container',
      source_revision_config: { image_uri: 'r.example.com/a:1' },
    },
    { name: 'rules-source', source: 'internal_source' },
    {
      name: 'rules-external',
      source: 'external_container',
      source_config: { listener_id: listener.id, listener_config: { k8s_namespace: 'agents' } },
      source_revision_config: { image_uri: 'r.example.com/a:1' },
    },
  ];
  for (const body of made) {
    const answer = await api.post('/v2/deployments', body);
    assert.equal(answer.status, 201, JSON.stringify(answer.body));
    deployments.set(body.source, answer.body.id);
  }
  VALUES.listener_id = listener.id;
});
after(() => t.close());

test('the patch description has a row per source', () => {
  assert.deepEqual([...table.keys()].sort(), [
    'codehost',
    'external_container',
    'internal_container',
    'internal_source',
  ]);
});

test("a patch with a field the table does not list for the deployment's source is 400 field_not_allowed; one it lists is not", async () => {
  for (const [source, id] of deployments) {
    const [config, revision] = table.get(source)!;
    const cases: [string, Record<string, unknown>, boolean][] = [
      ...SOURCE_CONFIG_FIELDS.map((f): [string, Record<string, unknown>, boolean] => [
        `source_config.${f}`,
        { source_config: { [f]: VALUES[f] } },
        config.includes(f),
      ]),
      ...REVISION_FIELDS.map((f): [string, Record<string, unknown>, boolean] => [
        `source_revision_config.${f}`,
        { source_revision_config: { [f]: VALUES[f] } },
        revision.includes(f),
      ]),
    ];
    for (const [field, body, listed] of cases) {
      const answer = await api.patch(`/v2/deployments/${id}`, body);
      if (listed)
        assert.notEqual(answer.body?.code, 'field_not_allowed', `${source} ${field}: ${JSON.stringify(answer.body)}`);
      else {
        assert.equal(answer.status, 400, `${source} ${field}: ${JSON.stringify(answer.body)}`);
        assert.equal(answer.body.code, 'field_not_allowed', `${source} ${field}`);
        assert.match(answer.body.detail, new RegExp(field.replace('.', '\\.')));
      }
    }
  }
});
