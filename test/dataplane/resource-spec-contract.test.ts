/**
 * The own data plane's resource_spec fields against the schema (src/domain/resource-spec.ts), as
 * test/listener-agent/resource-spec-contract.test.ts holds the listener agent's: every field a user can
 * set is honoured (it changes the instances, the limits or the database storage the data plane gives
 * the app) or ignored (it changes none of them), and docs/data-plane.md says which. A field added to the
 * schema later fails here (and the type check of src/dataplane/resource-spec-fields.ts) until the own
 * data plane and its documentation say what becomes of it, instead of being dropped without a word.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, test } from 'node:test';
import { queueResourceSpec } from '../../src/dataplane/app-host-access.ts';
import { scaleOf } from '../../src/dataplane/app-scaling.ts';
import { limitsFromResourceSpec, type DefaultLimits } from '../../src/dataplane/resource-limits.ts';
import { LOCAL_RESOURCE_SPEC_FIELDS } from '../../src/dataplane/resource-spec-fields.ts';
import type { AppConfig } from '../../src/domain/app-config.ts';
import { databaseStorageOf } from '../../src/domain/resource-maxima.ts';
import { RESOURCE_SPEC_FIELDS, type ResourceSpec, type ResourceSpecField } from '../../src/domain/resource-spec.ts';

const MIB = 1024 * 1024;
const DOCS = readFileSync(new URL('../../docs/data-plane.md', import.meta.url), 'utf8');

/** An app with a worker, so that the worker's fields have something to act on. */
const app: AppConfig = {
  runtime: 'node',
  install: null,
  build: null,
  start: 'node server.js',
  worker: 'node worker.js',
  healthCheckPath: '/ok',
  env: {},
  database: true,
};
const limits: DefaultLimits = { memoryBytes: 512 * MIB, cpu: 1, pids: 512 };
const storage = { databaseStorageGi: 1, maxDatabaseStorageGi: 10 };

/** Everything the own data plane derives from a spec for the app it runs. */
function whatRuns(spec: ResourceSpec): string {
  return JSON.stringify({
    scale: scaleOf(spec, app),
    web: limitsFromResourceSpec(spec, limits),
    worker: limitsFromResourceSpec(queueResourceSpec(spec), limits),
    databaseStorageGi: databaseStorageOf(spec, storage),
  });
}

/** A valid value of the field, unlike its default, so that an honoured field must show. */
function sample(field: ResourceSpecField): ResourceSpec {
  switch (field) {
    case 'labels':
      return { labels: { team: 'billing' } };
    case 'annotations':
      return { annotations: { 'prometheus.io/scrape': 'true' } };
    case 'service_account_name':
      return { service_account_name: 'agent-runner' };
    case 'image_pull_secrets':
      return { image_pull_secrets: [{ name: 'registry' }] };
    case 'volumes':
      return { volumes: [{ name: 'scratch', emptyDir: {} }] };
    case 'volume_mounts':
      return { volume_mounts: [{ name: 'scratch', mountPath: '/scratch' }] };
    case 'init_containers':
    case 'sidecars':
      return { [field]: [{ name: 'helper', image: 'busybox:1' }] };
    default:
      return { [field]: 3 };
  }
}

const fields = (use: 'honoured' | 'ignored') =>
  RESOURCE_SPEC_FIELDS.filter((f) => LOCAL_RESOURCE_SPEC_FIELDS[f] === use);

describe("the own data plane's resource_spec fields and the schema", () => {
  test('every field of the schema is honoured or ignored, and the table names no field the schema lacks', () => {
    assert.deepEqual(
      RESOURCE_SPEC_FIELDS.filter((f) => !['honoured', 'ignored'].includes(LOCAL_RESOURCE_SPEC_FIELDS[f])),
      [],
      'place them in src/dataplane/resource-spec-fields.ts',
    );
    assert.deepEqual(Object.keys(LOCAL_RESOURCE_SPEC_FIELDS).sort(), [...RESOURCE_SPEC_FIELDS].sort());
  });

  test('each honoured field changes what runs; each ignored one changes nothing', () => {
    const plain = whatRuns({});
    for (const field of fields('honoured'))
      assert.notEqual(whatRuns(sample(field)), plain, `${field} is honoured, but changes nothing`);
    for (const field of fields('ignored'))
      assert.equal(whatRuns(sample(field)), plain, `${field} is ignored, but changes what runs`);
  });

  test("every field is in docs/data-plane.md's resource_spec table, as honoured or ignored", () => {
    const start = DOCS.indexOf('### What the own data plane makes of resource_spec');
    assert.ok(start >= 0, 'docs/data-plane.md has the section');
    const table = DOCS.slice(start, DOCS.indexOf('\n## ', start));
    const rows = table.split('\n').filter((l) => l.startsWith('| `'));
    const useOf = new Map<string, string>();
    const unexplained: string[] = [];
    for (const row of rows) {
      const [names, use] = row.split('|').slice(1, 3);
      for (const m of names!.matchAll(/`([a-z_*]+)`/g)) useOf.set(m[1]!, use!.trim().split(/[ :]/)[0]!);
      // Each use says why, or how: "ignored: <the reason>", "honoured: <what it changes>".
      if (!/^(honoured|ignored): \S/.test(use!.trim())) unexplained.push(names!.trim());
    }
    assert.deepEqual(unexplained, [], 'each row says why a field is ignored, or what it changes');
    const documented = (field: string) =>
      useOf.get(field) ?? [...useOf].find(([name]) => name.endsWith('*') && field.startsWith(name.slice(0, -1)))?.[1];
    assert.deepEqual(
      RESOURCE_SPEC_FIELDS.filter((f) => documented(f) !== LOCAL_RESOURCE_SPEC_FIELDS[f]),
      [],
      'each field in a row of the table, with its use first in the second column',
    );
  });
});
