/**
 * Lists (docs/api.md, "Lists and pagination"): every filter of list deployments and list revisions,
 * newest-first order, and paging that reaches every item exactly once.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { client, createTestApp, type TestApp, newWorkspace } from '../support/harness.ts';

let t: TestApp;
let api: ReturnType<typeof client>;
const ids: Record<string, string> = {};
let listenerId: string;

type Listed = { body: { resources: { name: string; id: string; remote_reconciled?: boolean }[]; offset: number } };
const names = (res: Listed) => res.body.resources.map((d) => d.name);
const sorted = (res: Listed) => names(res).sort();

before(async () => {
  t = await createTestApp();
  api = client(t.app);
  const listener = await api.post('/v2/listeners', { compute_type: 'k8s', compute_id: 'lists-cluster' });
  assert.equal(listener.status, 201);
  listenerId = listener.body.id;
  const bodies: Record<string, unknown>[] = [
    {
      name: 'alpha-one',
      source: 'internal_container',
      source_revision_config: { image_uri: 'registry.example.com/alpha:1.0.0' },
    },
    {
      name: 'alpha-two',
      source: 'internal_container',
      source_config: { deployment_type: 'prod' },
      source_revision_config: { image_uri: 'registry.example.com/alpha:2.0.0' },
    },
    {
      name: 'gamma',
      source: 'external_container',
      source_config: { listener_id: listenerId },
      source_revision_config: { image_uri: 'ghcr.io/acme/gamma@sha256:abc' },
    },
    { name: 'delta', source: 'internal_source', source_config: { deployment_type: 'dev_free' } },
    {
      name: 'alp-ha',
      source: 'internal_container',
      source_revision_config: { image_uri: 'registry.example.com/alp:1.0.0' },
    },
  ];
  for (const body of bodies) {
    const res = await api.post('/v2/deployments', body);
    assert.equal(res.status, 201, JSON.stringify(res.body));
    ids[body.name as string] = res.body.id;
  }
  // No data plane runs in tests; it is the one that would mark a deployment READY.
  await t.database.pool.query("update deployments set status = 'READY' where id = $1", [ids['alpha-two']]);
});
after(() => t.close());

describe('list deployments', () => {
  test('newest first, with the envelope', async () => {
    const res = await api.get('/v2/deployments');
    assert.equal(res.status, 200);
    assert.deepEqual(names(res), ['alp-ha', 'delta', 'gamma', 'alpha-two', 'alpha-one']);
    assert.equal(res.body.offset, 5);
    const times = res.body.resources.map((d: { created_at: string }) => d.created_at);
    assert.deepEqual(times, [...times].sort().reverse());
  });

  test('name is exact', async () => {
    assert.deepEqual(names(await api.get('/v2/deployments?name=alpha-one')), ['alpha-one']);
    assert.deepEqual(names(await api.get('/v2/deployments?name=alpha')), []);
    assert.deepEqual(names(await api.get('/v2/deployments?name=ALPHA-ONE')), []);
  });

  test('name_contains is a case-insensitive substring with % and _ taken literally', async () => {
    assert.deepEqual(sorted(await api.get('/v2/deployments?name_contains=alpha')), ['alpha-one', 'alpha-two']);
    assert.deepEqual(sorted(await api.get('/v2/deployments?name_contains=LPH')), ['alpha-one', 'alpha-two']);
    assert.deepEqual(sorted(await api.get('/v2/deployments?name_contains=-t')), ['alpha-two']);
    assert.deepEqual(sorted(await api.get('/v2/deployments?name_contains=alp')), ['alp-ha', 'alpha-one', 'alpha-two']);
    // As LIKE patterns these would match: `_` any one character, `%` anything.
    assert.deepEqual(names(await api.get('/v2/deployments?name_contains=alp_a')), []);
    assert.deepEqual(names(await api.get('/v2/deployments?name_contains=_')), []);
    assert.deepEqual(names(await api.get('/v2/deployments?name_contains=%25')), []);
    assert.deepEqual(names(await api.get('/v2/deployments?name_contains=a%25o')), []);
    assert.deepEqual(names(await api.get('/v2/deployments?name_contains=%5C')), [], 'a backslash is literal too');
  });

  test('an empty name_contains (what `langgraph deploy list` sends without a filter) lists every deployment', async () => {
    assert.deepEqual(sorted(await api.get('/v2/deployments?name_contains=')), sorted(await api.get('/v2/deployments')));
    assert.ok(names(await api.get('/v2/deployments?name_contains=')).length >= 3);
  });

  test('status', async () => {
    assert.deepEqual(names(await api.get('/v2/deployments?status=READY')), ['alpha-two']);
    assert.deepEqual(sorted(await api.get('/v2/deployments?status=AWAITING_DATABASE')), [
      'alp-ha',
      'alpha-one',
      'delta',
      'gamma',
    ]);
    assert.deepEqual(names(await api.get('/v2/deployments?status=UNUSED')), []);
  });

  test('remote_reconciled', async () => {
    const remote = await api.get('/v2/deployments?remote_reconciled=true');
    assert.deepEqual(names(remote), ['gamma']);
    assert.equal(remote.body.resources[0]?.remote_reconciled, true);
    assert.deepEqual(sorted(await api.get('/v2/deployments?remote_reconciled=false')), [
      'alp-ha',
      'alpha-one',
      'alpha-two',
      'delta',
    ]);
  });

  test('image_version', async () => {
    assert.deepEqual(sorted(await api.get('/v2/deployments?image_version=1.0.0')), ['alp-ha', 'alpha-one']);
    assert.deepEqual(names(await api.get('/v2/deployments?image_version=2.0.0')), ['alpha-two']);
    assert.deepEqual(names(await api.get('/v2/deployments?image_version=sha256:abc')), ['gamma']);
    assert.deepEqual(names(await api.get('/v2/deployments?image_version=9.9.9')), []);
  });

  test('deployment_type', async () => {
    assert.deepEqual(names(await api.get('/v2/deployments?deployment_type=prod')), ['alpha-two']);
    assert.deepEqual(names(await api.get('/v2/deployments?deployment_type=dev_free')), ['delta']);
    assert.deepEqual(sorted(await api.get('/v2/deployments?deployment_type=dev')), ['alp-ha', 'alpha-one', 'gamma']);
  });

  test('deployment_ids, in any letter case, unknown ids matching nothing', async () => {
    assert.deepEqual(sorted(await api.get(`/v2/deployments?deployment_ids=${ids['alpha-one']},${ids.gamma}`)), [
      'alpha-one',
      'gamma',
    ]);
    assert.deepEqual(names(await api.get(`/v2/deployments?deployment_ids=${ids.delta!.toUpperCase()}`)), ['delta']);
    assert.deepEqual(
      names(await api.get(`/v2/deployments?deployment_ids=${ids.delta},00000000-0000-4000-8000-000000000000`)),
      ['delta'],
    );
    assert.deepEqual(names(await api.get(`/v2/deployments?deployment_ids=${ids.delta},${ids.delta}`)), ['delta']);
  });

  test('filters combine with AND', async () => {
    assert.deepEqual(sorted(await api.get('/v2/deployments?deployment_type=dev&remote_reconciled=false')), [
      'alp-ha',
      'alpha-one',
    ]);
    assert.deepEqual(names(await api.get('/v2/deployments?name_contains=alpha&status=READY')), ['alpha-two']);
    assert.deepEqual(names(await api.get('/v2/deployments?name_contains=alpha&deployment_type=dev_free')), []);
    assert.deepEqual(
      names(
        await api.get(`/v2/deployments?deployment_ids=${ids['alpha-one']},${ids['alpha-two']}&image_version=2.0.0`),
      ),
      ['alpha-two'],
    );
  });

  test('a deleted deployment leaves every list', async () => {
    const res = await api.post('/v2/deployments', { name: 'soon-gone', source: 'internal_container' });
    assert.equal(res.status, 201);
    assert.deepEqual(names(await api.get('/v2/deployments?name_contains=soon')), ['soon-gone']);
    assert.equal((await api.delete(`/v2/deployments/${res.body.id}`)).status, 204);
    assert.deepEqual(names(await api.get('/v2/deployments?name_contains=soon')), []);
    assert.deepEqual(names(await api.get(`/v2/deployments?deployment_ids=${res.body.id}`)), []);
  });
});

describe('paging', () => {
  test('paging through all pages reaches every deployment exactly once, newest first', async () => {
    const ws = await newWorkspace(t, 'paging');
    const p = ws.api;
    const made: string[] = [];
    for (let i = 0; i < 23; i++) {
      const res = await p.post('/v2/deployments', {
        name: `page-${String(i).padStart(2, '0')}`,
        source: 'internal_container',
      });
      assert.equal(res.status, 201);
      made.push(res.body.id);
    }
    const seen: string[] = [];
    let offset = 0;
    let pages = 0;
    for (;;) {
      const res = await p.get(`/v2/deployments?limit=5&offset=${offset}`);
      assert.equal(res.status, 200);
      assert.ok(res.body.resources.length <= 5);
      assert.equal(res.body.offset, offset + res.body.resources.length);
      if (res.body.resources.length === 0) break;
      seen.push(...res.body.resources.map((d: { id: string }) => d.id));
      offset = res.body.offset;
      pages += 1;
      assert.ok(pages <= 10, 'paging ends');
    }
    assert.equal(pages, 5);
    assert.equal(new Set(seen).size, seen.length, 'no deployment twice');
    assert.deepEqual(seen, [...made].reverse(), 'every deployment, newest first');

    const defaultPage = await p.get('/v2/deployments');
    assert.equal(defaultPage.body.resources.length, 20, 'the default page size is 20');
    const max = await p.get('/v2/deployments?limit=100');
    assert.equal(max.body.resources.length, 23);
    const filteredPage = await p.get('/v2/deployments?name_contains=page-1&limit=4&offset=4');
    assert.deepEqual(names(filteredPage), ['page-15', 'page-14', 'page-13', 'page-12']);
    assert.equal(filteredPage.body.offset, 8);
  });
});

describe('list revisions', () => {
  let deploymentId: string;
  const rev: string[] = [];

  before(async () => {
    const created = await api.post('/v2/deployments', {
      name: 'many-revisions',
      source: 'internal_container',
      source_revision_config: { image_uri: 'registry.example.com/r:1' },
    });
    assert.equal(created.status, 201);
    deploymentId = created.body.id;
    rev.push(created.body.latest_revision_id);
    for (const tag of ['2', '3']) {
      const patched = await api.patch(`/v2/deployments/${deploymentId}`, {
        source_revision_config: { image_uri: `registry.example.com/r:${tag}` },
      });
      assert.equal(patched.status, 200);
      rev.push(patched.body.latest_revision_id);
    }
    const interrupted = await api.post(`/v2/deployments/${deploymentId}/revisions/${rev[2]}/interrupt`);
    assert.equal(interrupted.status, 200);
    assert.equal(interrupted.body.status, 'INTERRUPTED');
    const last = await api.patch(`/v2/deployments/${deploymentId}`, {
      source_revision_config: { image_uri: 'registry.example.com/r:4' },
    });
    assert.equal(last.status, 200);
    rev.push(last.body.latest_revision_id);
  });

  const url = (query = '') => `/v2/deployments/${deploymentId}/revisions${query}`;
  const revisionIds = (res: { body: { resources: { id: string }[] } }) => res.body.resources.map((r) => r.id);

  test('newest first; a queued revision superseded by a newer one is SKIPPED', async () => {
    const res = await api.get(url());
    assert.equal(res.status, 200);
    assert.deepEqual(revisionIds(res), [rev[3], rev[2], rev[1], rev[0]]);
    assert.deepEqual(
      res.body.resources.map((r: { status: string }) => r.status),
      ['QUEUED', 'INTERRUPTED', 'SKIPPED', 'SKIPPED'],
    );
    assert.equal(res.body.offset, 4);
  });

  test('status takes one status or a comma-separated list', async () => {
    assert.deepEqual(revisionIds(await api.get(url('?status=QUEUED'))), [rev[3]]);
    assert.deepEqual(revisionIds(await api.get(url('?status=SKIPPED'))), [rev[1], rev[0]]);
    assert.deepEqual(revisionIds(await api.get(url('?status=QUEUED,SKIPPED'))), [rev[3], rev[1], rev[0]]);
    assert.deepEqual(revisionIds(await api.get(url('?status=INTERRUPTED,QUEUED'))), [rev[3], rev[2]]);
    assert.deepEqual(revisionIds(await api.get(url('?status=DEPLOYED'))), []);
    assert.deepEqual(revisionIds(await api.get(url('?status=DEPLOYED,BUILD_FAILED'))), []);
  });

  test('status combines with paging', async () => {
    const first = await api.get(url('?status=QUEUED,SKIPPED&limit=2'));
    assert.deepEqual(revisionIds(first), [rev[3], rev[1]]);
    assert.equal(first.body.offset, 2);
    const second = await api.get(url(`?status=QUEUED,SKIPPED&limit=2&offset=${first.body.offset}`));
    assert.deepEqual(revisionIds(second), [rev[0]]);
    assert.equal(second.body.offset, 3);
    const all = await api.get(url('?limit=3&offset=1'));
    assert.deepEqual(revisionIds(all), [rev[2], rev[1], rev[0]]);
    assert.equal(all.body.offset, 4);
  });

  test('remote_reconciled selects revisions of deployments reconciled by a listener', async () => {
    assert.deepEqual(revisionIds(await api.get(url('?remote_reconciled=true'))), []);
    assert.equal((await api.get(url('?remote_reconciled=false'))).body.resources.length, 4);
    const gamma = `/v2/deployments/${ids.gamma}/revisions`;
    const remote = await api.get(`${gamma}?remote_reconciled=true`);
    assert.equal(remote.body.resources.length, 1);
    assert.equal(remote.body.resources[0].remote_reconciled, true);
    assert.deepEqual((await api.get(`${gamma}?remote_reconciled=false`)).body.resources, []);
    assert.equal((await api.get(`${gamma}?remote_reconciled=true&status=QUEUED`)).body.resources.length, 1);
  });

  test('a deployment without revisions lists none; an unknown deployment is 404', async () => {
    const empty = await api.get(`/v2/deployments/${ids.delta}/revisions`);
    assert.equal(empty.status, 200);
    assert.deepEqual(empty.body, { resources: [], offset: 0 });
    const missing = await api.get('/v2/deployments/00000000-0000-4000-8000-000000000000/revisions');
    assert.equal(missing.status, 404);
    assert.equal(missing.body.detail, 'Deployment ID 00000000-0000-4000-8000-000000000000 not found.');
  });
});
