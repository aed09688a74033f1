/**
 * A field or query parameter the service does not know is still accepted (clients send extra fields:
 * LangChain's CLI does), but never in silence: each answer names every one in a `Warning` header, with
 * the field a typo probably meant, as Kubernetes does with `fieldValidation`; `X-Field-Validation:
 * Strict` refuses them instead (422, nothing changed), `Ignore` says nothing. Found by a new user:
 * `"secretz"` made a deployment without secrets with a 201, `"min_scal"` changed nothing with a 200.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { client, createTestApp, type TestApp } from '../support/harness.ts';

let t: TestApp;
let api: ReturnType<typeof client>;

before(async () => {
  t = await createTestApp();
  api = client(t.app);
});
after(() => t.close());

const warnings = (headers: Record<string, unknown>): string[] => {
  const value = headers.warning as string | string[] | undefined;
  return value === undefined ? [] : Array.isArray(value) ? value : [value];
};

const deploymentBody = (name: string, extra: Record<string, unknown> = {}) => ({
  name,
  source: 'internal_container',
  source_revision_config: { image_uri: 'registry.example.com/agent:1' },
  ...extra,
});

describe('unknown fields', () => {
  test('a typo in a body is accepted and named, with what it probably meant', async () => {
    const made = await api.post(
      '/v2/deployments',
      deploymentBody('typo-secrets', { secretz: [{ name: 'A', value: 'b' }] }),
    );
    assert.equal(made.status, 201, JSON.stringify(made.body));
    assert.deepEqual(warnings(made.headers), ['299 - "unknown field \\"secretz\\"; did you mean \\"secrets\\"?"']);

    const patched = await api.patch(`/v2/deployments/${made.body.id}`, { source_config: { min_scal: 2 } });
    assert.equal(patched.status, 200, JSON.stringify(patched.body));
    assert.deepEqual(warnings(patched.headers), [
      '299 - "unknown field \\"source_config.min_scal\\"; did you mean \\"source_config.resource_spec.min_scale\\"?"',
    ]);
  });

  test('every unknown field is named, nested and in lists too; known fields give no warning', async () => {
    const made = await api.post(
      '/v2/deployments',
      deploymentBody('typo-many', {
        colour: 'blue',
        secrets: [{ name: 'A', valeu: 'b', value: 'c' }],
        source_config: { resource_spec: { cpus: 1 } },
      }),
    );
    assert.equal(made.status, 201, JSON.stringify(made.body));
    const said = warnings(made.headers);
    assert.equal(said.length, 3, said.join('\n'));
    assert.ok(said.some((w) => w.includes('unknown field \\"colour\\"')));
    assert.ok(said.some((w) => w.includes('unknown field \\"secrets[0].valeu\\"')));
    assert.ok(
      said.some((w) =>
        w.includes(
          'unknown field \\"source_config.resource_spec.cpus\\"; did you mean \\"source_config.resource_spec.cpu\\"?',
        ),
      ),
    );

    const clean = await api.post('/v2/deployments', deploymentBody('no-typo'));
    assert.equal(clean.status, 201);
    assert.deepEqual(warnings(clean.headers), []);
  });

  test('an unknown query parameter is named too', async () => {
    const listed = await api.get('/v2/deployments?x-unknown=42&limit=5&nme=a');
    assert.equal(listed.status, 200);
    assert.deepEqual(warnings(listed.headers), [
      '299 - "unknown query parameter \\"x-unknown\\""',
      '299 - "unknown query parameter \\"nme\\"; did you mean \\"name\\"?"',
    ]);
    assert.deepEqual(warnings((await api.get('/v2/deployments?limit=5')).headers), []);
  });

  test('X-Field-Validation: Strict refuses them with a 422 at each, and changes nothing', async () => {
    const refused = await api.post(
      '/v2/deployments',
      deploymentBody('strict-typo', { secretz: [{ name: 'A', value: 'hunter2' }] }),
      { 'x-field-validation': 'Strict' },
    );
    assert.equal(refused.status, 422, JSON.stringify(refused.body));
    assert.deepEqual(
      refused.body.detail.map((i: { type: string; loc: unknown[] }) => [i.type, i.loc]),
      [['extra_forbidden', ['body', 'secretz']]],
    );
    assert.match(refused.body.detail[0].msg, /did you mean "secrets"/);
    assert.ok(!JSON.stringify(refused.body).includes('hunter2'), 'the value is not echoed');
    assert.equal((await api.get('/v2/deployments?name=strict-typo')).body.resources.length, 0, 'nothing made');

    const query = await api.get('/v2/deployments?x-unknown=42', { 'x-field-validation': 'strict' });
    assert.equal(query.status, 422);
    assert.deepEqual(query.body.detail[0].loc, ['query', 'x-unknown']);

    const fine = await api.post('/v2/deployments', deploymentBody('strict-clean'), { 'x-field-validation': 'Strict' });
    assert.equal(fine.status, 201, JSON.stringify(fine.body));
  });

  test('X-Field-Validation: Ignore says nothing; another value is a 422 at the header', async () => {
    const quiet = await api.get('/v2/deployments?x-unknown=42', { 'x-field-validation': 'Ignore' });
    assert.equal(quiet.status, 200);
    assert.deepEqual(warnings(quiet.headers), []);
    const wrong = await api.get('/v2/deployments', { 'x-field-validation': 'sometimes' });
    assert.equal(wrong.status, 422);
    assert.deepEqual(wrong.body.detail[0].loc, ['header', 'x-field-validation']);
  });

  test('hostile names cannot break the answer: control characters, non-ASCII, quotes, thousands of fields', async () => {
    const many = Object.fromEntries(Array.from({ length: 5000 }, (_, i) => [`f${i}`, i]));
    const made = await api.post(
      '/v2/deployments',
      deploymentBody('hostile-names', { 'é"\\\r\nX-Injected: 1': 1, ['k'.repeat(10_000)]: 1, ...many }),
    );
    assert.equal(made.status, 201, JSON.stringify(made.body));
    const said = warnings(made.headers);
    assert.ok(said.length <= 21, `${said.length} warnings at most 20 and a summary`);
    assert.match(said.at(-1)!, /and \d+ more unknown fields/);
    assert.equal(made.headers['x-injected'], undefined);
    for (const w of said) {
      assert.ok(/^[\x20-\x7e]*$/.test(w), `printable ASCII only: ${w.slice(0, 100)}`);
      assert.ok(w.length < 400, 'a long name is cut short');
    }
  });

  test('the OpenAPI document describes X-Field-Validation and the Warning header', async () => {
    const doc = (await api.get('/openapi.json')).body;
    const op = doc.paths['/v2/deployments'].post;
    const parameter =
      op.parameters.find((p: { name: string; $ref?: string }) => p.name === 'X-Field-Validation') ??
      op.parameters.find((p: { $ref?: string }) => p.$ref?.endsWith('FieldValidation'));
    assert.ok(parameter, 'POST /v2/deployments takes X-Field-Validation');
    const created = op.responses['201'];
    assert.ok(created.headers?.Warning, 'its 201 may carry Warning');
  });
});
