/**
 * Smaller rules of deployment writes: custom_url on a listener's deployment, secret_references sent
 * unchanged, and tags set on a deployment that a delete removes at the same time.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { client, createTestApp, type TestApp } from '../support/harness.ts';

let t: TestApp;
let api: ReturnType<typeof client>;
let listenerId: string;

before(async () => {
  t = await createTestApp();
  api = client(t.app);
  listenerId = (
    await api.post('/v2/listeners', {
      compute_type: 'k8s',
      compute_id: 'edge-1',
      compute_config: { k8s_namespaces: ['agents'] },
    })
  ).body.id;
});
after(() => t.close());

const events = async (id: string) =>
  (await api.get(`/v2/deployments/${id}/events?limit=100`)).body.resources as { type: string }[];

test("custom_url: the user sets it on a listener's deployment (http(s) only); the own data plane's is the service's", async () => {
  const created = await api.post('/v2/deployments', {
    name: 'edge-agent',
    source: 'external_container',
    source_config: { listener_id: listenerId, custom_url: 'https://agent.acme.example' },
    source_revision_config: { image_uri: 'ghcr.io/acme/agent:1' },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  assert.equal(created.body.source_config.custom_url, 'https://agent.acme.example');
  const patched = await api.patch(`/v2/deployments/${created.body.id}`, {
    source_config: { custom_url: 'https://agents.acme.example/support' },
  });
  assert.equal(patched.status, 200);
  assert.equal(patched.body.source_config.custom_url, 'https://agents.acme.example/support');
  for (const bad of ['ftp://agent.acme.example', 'not a url', 'https://user:pw@agent.acme.example']) {
    const refused = await api.patch(`/v2/deployments/${created.body.id}`, { source_config: { custom_url: bad } });
    assert.equal(refused.status, 400, bad);
    assert.match(refused.body.detail, /custom_url/);
  }
  assert.equal(
    (await api.get(`/v2/deployments/${created.body.id}`)).body.source_config.custom_url,
    'https://agents.acme.example/support',
  );

  const own = await api.post('/v2/deployments', {
    name: 'own-plane',
    source: 'internal_container',
    source_config: { custom_url: 'https://x.example' },
    source_revision_config: { image_uri: 'a:1' },
  });
  assert.equal(own.status, 400);
});

test('secret_references sent unchanged write nothing; changed ones are an update with its event', async () => {
  const references = [{ name: 'OPENAI_API_KEY', secret_name: 'llm', secret_key: 'openai' }];
  const created = await api.post('/v2/deployments', {
    name: 'refs',
    source: 'external_container',
    source_config: { listener_id: listenerId },
    source_revision_config: { image_uri: 'ghcr.io/acme/agent:1' },
    secret_references: references,
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const before = await events(created.body.id);
  const same = await api.patch(`/v2/deployments/${created.body.id}`, { secret_references: references });
  assert.equal(same.status, 200);
  assert.equal(same.body.updated_at, created.body.updated_at);
  assert.equal((await events(created.body.id)).length, before.length);
  const changed = await api.patch(`/v2/deployments/${created.body.id}`, {
    secret_references: [{ ...references[0], secret_key: 'openai-2' }],
  });
  assert.equal(changed.status, 200);
  assert.ok((await events(created.body.id)).some((e) => e.type === 'deployment.updated'));
});

test('tags set while the deployment is deleted: 404, never 500', async () => {
  const key = (await api.post('/v2/tags/keys', { key: 'team' })).body;
  const value = (await api.post(`/v2/tags/keys/${key.id}/values`, { value: 'support' })).body;
  for (let round = 0; round < 10; round++) {
    const created = await api.post('/v2/deployments', {
      name: `doomed-${round}`,
      source: 'external_container',
      source_config: { listener_id: listenerId },
      source_revision_config: { image_uri: 'a:1' },
    });
    const [tagged, removed] = await Promise.all([
      api.put(`/v2/deployments/${created.body.id}/tags`, { tag_value_ids: [value.id] }),
      api.delete(`/v2/deployments/${created.body.id}`),
    ]);
    assert.equal(removed.status, 204);
    assert.ok(
      tagged.status === 200 || tagged.status === 404,
      `tags answered ${tagged.status}: ${JSON.stringify(tagged.body)}`,
    );
  }
});
