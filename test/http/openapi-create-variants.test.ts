/**
 * The OpenAPI document states the per-source rules of a deployment create (issue 34, item 8): its body
 * is a oneOf by `source`, each variant requiring what that source requires. For every source and every
 * field its variant requires, a body without it is invalid by the document and refused by the service
 * with the 400 naming it; the complete body of each variant is valid by the document. Fuzzers and
 * generated clients then send what the service takes.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { SOURCES } from '../../src/domain/sources.ts';
import { client, createTestApp, type TestApp } from '../support/harness.ts';

let t: TestApp;
let doc: { components: { schemas: Record<string, unknown> } };
before(async () => {
  t = await createTestApp();
  doc = JSON.parse((await t.app.inject({ method: 'GET', url: '/openapi.json' })).body);
});
after(() => t.close());

const UUID = '0b9e1c2d-0000-4000-8000-000000000001';
/** The smallest body each source takes, by the interface's table (contract.md, "Sources"). */
const COMPLETE: Record<string, Record<string, unknown>> = {
  codehost: {
    source_config: { integration_id: UUID, repo_url: 'https://github.com/acme/agent' },
    source_revision_config: { repo_ref: 'main', framework_config_path: 'slipway.json' },
  },
  external_container: {
    source_config: { listener_id: UUID },
    source_revision_config: { image_uri: 'ghcr.io/acme/agent:1' },
  },
  internal_container: {},
  internal_source: {},
};
/** Where a required field sits: [object, field]. */
const REQUIRED: Record<string, [string, string][]> = {
  codehost: [
    ['source_config', 'integration_id'],
    ['source_config', 'repo_url'],
    ['source_revision_config', 'repo_ref'],
  ],
  external_container: [
    ['source_config', 'listener_id'],
    ['source_revision_config', 'image_uri'],
  ],
  internal_container: [],
  internal_source: [],
};

function validator() {
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  addFormats.default(ajv);
  ajv.addSchema({ $id: 'doc', components: doc.components });
  return ajv.compile({ $ref: 'doc#/components/schemas/DeploymentCreate' });
}

test('the create body is a oneOf by source in the document', () => {
  const create = doc.components.schemas.DeploymentCreate as { oneOf?: { $ref: string }[] };
  assert.ok(Array.isArray(create.oneOf), 'DeploymentCreate is a oneOf');
  assert.equal(create.oneOf.length, SOURCES.length);
  const valid = validator();
  for (const source of SOURCES) {
    const body = { name: `a-${source.replace('_', '-')}`, source, ...COMPLETE[source] };
    assert.ok(valid(body), `${source}: ${JSON.stringify(valid.errors)}`);
    assert.ok(!valid({ ...body, source: 'ftp' }), 'an unknown source matches no variant');
  }
});

test("a body without a field its source requires is invalid by the document and the service's 400 names it", async () => {
  const valid = validator();
  const api = client(t.app);
  for (const source of SOURCES) {
    for (const [object, field] of REQUIRED[source]!) {
      const body = structuredClone({ name: `missing-${field.replace(/_/g, '-')}`, source, ...COMPLETE[source] });
      delete (body[object as keyof typeof body] as unknown as Record<string, unknown>)[field];
      assert.ok(!valid(body), `${source} without ${object}.${field} is invalid by the document`);
      const answer = await api.post('/v2/deployments', body);
      assert.equal(answer.status, 400, `${source} without ${object}.${field}: ${JSON.stringify(answer.body)}`);
      assert.match(String(answer.body.detail), new RegExp(`${object}\\.${field} is required`));
    }
  }
});
