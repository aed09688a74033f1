/**
 * The agent's resource_spec fields against the service's ResourceSpec schema: every property a user
 * can set is either mapped to the manifests (and changes them) or listed as ignored, and both are in
 * docs/listener.md's mapping table. A field added to the schema later fails here until the agent and
 * its documentation say what becomes of it, instead of being dropped without a word.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, test } from 'node:test';
import { buildManifests, type BuildContext } from '@slipway/listener/manifest-builder';
import { MAPPED_FIELDS, UNSUPPORTED_FIELDS, readResourceSpec } from '@slipway/listener/resource-spec';
import { RESOURCE_SPEC_FIELDS } from '../../src/domain/resource-spec.ts';

const SCHEMA_FIELDS: readonly string[] = RESOURCE_SPEC_FIELDS;
const IGNORED: readonly string[] = UNSUPPORTED_FIELDS;
const DOCS = readFileSync(new URL('../../docs/listener.md', import.meta.url), 'utf8');

const ctx: BuildContext = {
  listenerId: 'listener-1',
  appPort: 8080,
  progressDeadlineSeconds: 600,
  postgresImage: 'postgres:17-alpine',
  redisImage: 'redis:7-alpine',
};

/** A value of the field unlike its default, so that a mapped field must show in the manifests. */
function sample(field: string): unknown {
  switch (field) {
    case 'labels':
      return { team: 'billing' };
    case 'annotations':
      return { 'prometheus.io/scrape': 'true' };
    case 'service_account_name':
      return 'agent-runner';
    case 'image_pull_secrets':
      return [{ name: 'registry' }];
    case 'volumes':
      return [{ name: 'scratch', emptyDir: {} }];
    case 'volume_mounts':
      return [{ name: 'scratch', mountPath: '/scratch' }];
    case 'init_containers':
    case 'sidecars':
      return [{ name: 'helper', image: 'busybox:1' }];
    default:
      return 3;
  }
}

function manifests(resourceSpec: Record<string, unknown>): string {
  const read = readResourceSpec(resourceSpec);
  assert.deepEqual(read.problems, [], JSON.stringify(resourceSpec));
  const built = buildManifests(
    {
      deployment: {
        deployment_id: '0b9e1c2d-0000-4000-8000-000000000001',
        name: 'support-agent',
        namespace: 'agents',
        delete: false,
        custom_url: null,
        revision: null,
      },
      revision: {
        id: 'rev-1',
        number: 1,
        status: 'QUEUED',
        secrets: [],
        secret_references: null,
        resource_spec: resourceSpec,
        image_uri: 'ghcr.io/acme/app:1',
      },
      namespace: 'agents',
      spec: read.spec,
      dbPassword: 'pw',
      existingDbStorage: null,
    },
    ctx,
  );
  return JSON.stringify(built);
}

describe("the agent's resource_spec fields and the service's schema", () => {
  test('every field of the schema is mapped or ignored, never both; the agent knows no field the schema lacks', () => {
    const unaccounted = SCHEMA_FIELDS.filter((f) => !MAPPED_FIELDS.includes(f) && !IGNORED.includes(f));
    assert.deepEqual(unaccounted, [], 'add them to MAPPED_FIELDS or UNSUPPORTED_FIELDS of listener/resource-spec.ts');
    assert.deepEqual(
      MAPPED_FIELDS.filter((f) => IGNORED.includes(f)),
      [],
    );
    assert.deepEqual(
      [...MAPPED_FIELDS, ...IGNORED].filter((f) => !SCHEMA_FIELDS.includes(f)),
      [],
    );
  });

  test('each mapped field changes the manifests; each ignored one changes nothing and is reported ignored', () => {
    const plain = manifests({});
    for (const field of MAPPED_FIELDS) {
      // volume_mounts need the volume they mount (else the API server refuses the Deployment).
      const base = field === 'volume_mounts' ? { volumes: sample('volumes') } : {};
      assert.notEqual(manifests({ ...base, [field]: sample(field) }), manifests(base), `${field} is dropped`);
    }
    for (const field of IGNORED) {
      assert.equal(manifests({ [field]: sample(field) }), plain, `${field} is ignored`);
      assert.deepEqual(readResourceSpec({ [field]: sample(field) }).ignored, [field]);
    }
  });

  test("every field is in docs/listener.md's mapping table", () => {
    const table = DOCS.slice(DOCS.indexOf('### The resource_spec mapping'), DOCS.indexOf('## Statuses'));
    const cells = new Set([...table.matchAll(/`([a-z_*]+)`/g)].map((m) => m[1]!));
    const documented = (field: string) =>
      cells.has(field) || [...cells].some((c) => c.endsWith('*') && field.startsWith(c.slice(0, -1)));
    assert.deepEqual(
      SCHEMA_FIELDS.filter((f) => !documented(f)),
      [],
    );
  });
});
