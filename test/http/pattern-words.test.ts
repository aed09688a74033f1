/**
 * A value refused for its form is told the rule in words, as the dashboard says it, never as a
 * regular expression: `Not_Valid` as a deployment name answered `Input must match pattern
 * "^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$"`, which a new user cannot read.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { client, createTestApp, type TestApp } from '../support/harness.ts';

let t: TestApp;
let api: ReturnType<typeof client>;

before(async () => {
  t = await createTestApp();
  api = client(t.app);
});
after(() => t.close());

test('a bad deployment name is told the rule in words', async () => {
  for (const name of ['Not_Valid', '9lives', 'ends-with-dash-']) {
    const res = await api.post('/v2/deployments', {
      name,
      source: 'internal_container',
      source_revision_config: { image_uri: 'registry.example.com/agent:1' },
    });
    assert.equal(res.status, 422, JSON.stringify(res.body));
    const item = res.body.detail.find((i: { loc: unknown[] }) => i.loc.join() === 'body,name');
    assert.ok(item, JSON.stringify(res.body));
    assert.equal(item.type, 'string_pattern_mismatch', 'the type stays machine-readable');
    assert.doesNotMatch(item.msg, /\^|\[a-z\]|pattern/, `no regular expression: ${item.msg}`);
    assert.match(item.msg, /lowercase letters, digits and -/);
    assert.match(item.msg, /start with a letter/);
  }
});

test('a bad secret name is told the rule in words too', async () => {
  const res = await api.post('/v2/deployments', {
    name: 'secret-words',
    source: 'internal_container',
    source_revision_config: { image_uri: 'registry.example.com/agent:1' },
    secrets: [{ name: 'MY-SECRET', value: 'x' }],
  });
  assert.equal(res.status, 422, JSON.stringify(res.body));
  const item = res.body.detail.find((i: { loc: unknown[] }) => i.loc.join() === 'body,secrets,0,name');
  assert.ok(item, JSON.stringify(res.body));
  assert.doesNotMatch(item.msg, /\^|\[A-Z/, item.msg);
  assert.match(item.msg, /letters, digits and _/);
});
