import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { client, createTestApp, type TestApp } from './support/harness.ts';

let t: TestApp;
let api: ReturnType<typeof client>;

before(async () => {
  t = await createTestApp();
  api = client(t.app);
});
after(() => t.close());

async function create(name: string, extra: Record<string, unknown> = {}) {
  const res = await api.post('/v2/deployments', {
    name,
    source: 'internal_container',
    source_revision_config: { image_uri: 'reg.example.com/a:1' },
    ...extra,
  });
  assert.equal(res.status, 201, JSON.stringify(res.body));
  return res.body;
}

const revisionsOf = async (id: string, query = '') =>
  (await api.get(`/v2/deployments/${id}/revisions${query}`)).body.resources;

describe('patch', () => {
  test('source_revision_config makes a new revision even when unchanged; the older queued one is SKIPPED', async () => {
    const d = await create('rebuild');
    const first = d.latest_revision_id;
    const res = await api.patch(`/v2/deployments/${d.id}`, {
      source_revision_config: { image_uri: 'reg.example.com/a:1' },
    });
    assert.equal(res.status, 200);
    assert.notEqual(res.body.latest_revision_id, first);
    const revisions = await revisionsOf(d.id);
    assert.deepEqual(
      revisions.map((r: { status: string }) => r.status),
      ['QUEUED', 'SKIPPED'],
    );
    assert.equal(revisions[1].failure_reason, 'superseded');
    assert.equal(revisions[0].id, res.body.latest_revision_id);
  });

  test('source_config alone changes in place without a revision', async () => {
    const d = await create('in-place');
    const res = await api.patch(`/v2/deployments/${d.id}`, {
      source_config: { resource_spec: { min_scale: 1, max_scale: 3, cpu: 0.5 } },
    });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.equal(res.body.latest_revision_id, d.latest_revision_id);
    assert.deepEqual(res.body.source_config.resource_spec, { min_scale: 1, max_scale: 3, cpu: 0.5 });
    assert.equal((await revisionsOf(d.id)).length, 1);
  });

  test('immutable fields: the same value is fine, another is 400', async () => {
    const d = await create('fixed', { source_config: { deployment_type: 'prod' } });
    assert.equal(
      (
        await api.patch(`/v2/deployments/${d.id}`, {
          name: 'fixed',
          source: 'internal_container',
          source_config: { deployment_type: 'prod' },
        })
      ).status,
      200,
    );
    const cases: [Record<string, unknown>, string][] = [
      [{ name: 'renamed' }, 'name cannot be changed after creation'],
      [{ source: 'internal_source' }, 'source cannot be changed after creation'],
      [{ source_config: { deployment_type: 'dev' } }, 'source_config.deployment_type cannot be changed after creation'],
    ];
    for (const [body, detail] of cases) {
      const res = await api.patch(`/v2/deployments/${d.id}`, body);
      assert.equal(res.status, 400);
      assert.equal(res.body.detail, detail);
    }
    const after = (await api.get(`/v2/deployments/${d.id}`)).body;
    assert.equal(after.name, 'fixed');
    assert.equal(after.source_config.deployment_type, 'prod');
  });

  test('secrets: a list replaces the set, the mask keeps a value, a change makes a revision', async () => {
    const d = await create('secretive', {
      secrets: [
        { name: 'A', value: 'one' },
        { name: 'B', value: 'two' },
      ],
    });
    // Unchanged (mask keeps both values): no new revision.
    const same = await api.patch(`/v2/deployments/${d.id}`, {
      secrets: [
        { name: 'A', value: '********' },
        { name: 'B', value: '********' },
      ],
    });
    assert.equal(same.status, 200);
    assert.equal(same.body.latest_revision_id, d.latest_revision_id);
    // Keep A, drop B, add C: a new revision.
    const changed = await api.patch(`/v2/deployments/${d.id}`, {
      secrets: [
        { name: 'A', value: '********' },
        { name: 'C', value: 'three' },
      ],
    });
    assert.equal(changed.status, 200);
    assert.notEqual(changed.body.latest_revision_id, d.latest_revision_id);
    assert.deepEqual(changed.body.secrets, [
      { name: 'A', value: '********' },
      { name: 'C', value: '********' },
    ]);
    const stored = (
      await t.database.db.selectFrom('deployments').select('secrets').where('id', '=', d.id).executeTakeFirstOrThrow()
    ).secrets;
    assert.deepEqual(
      stored.map((s) => [s.name, t.secretBox.open(s.value)]),
      [
        ['A', 'one'],
        ['C', 'three'],
      ],
    );
    // The mask for a name that does not exist is refused, and duplicate names too.
    assert.equal(
      (await api.patch(`/v2/deployments/${d.id}`, { secrets: [{ name: 'Z', value: '********' }] })).status,
      400,
    );
    assert.equal(
      (
        await api.patch(`/v2/deployments/${d.id}`, {
          secrets: [
            { name: 'A', value: 'x' },
            { name: 'A', value: 'y' },
          ],
        })
      ).status,
      400,
    );
  });

  test('revision_source overrides the source of one revision', async () => {
    const d = await create('mixed');
    const upload = await t.app.inject({
      method: 'POST',
      url: '/v2/uploads',
      headers: { 'x-api-key': 'slw_test_admin_key_0123456789abcdef', 'content-type': 'application/gzip' },
      payload: Buffer.from([0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
    });
    assert.equal(upload.statusCode, 201, upload.body);
    const path = JSON.parse(upload.body).source_tarball_path;
    const res = await api.patch(`/v2/deployments/${d.id}`, {
      revision_source: 'internal_source',
      source_revision_config: { source_tarball_path: path, framework_config_path: 'agent.json' },
    });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.equal(res.body.source, 'internal_container');
    const [latest] = await revisionsOf(d.id);
    assert.equal(latest.source, 'internal_source');
    assert.equal(latest.source_revision_config.source_tarball_path, path);
    // An override without what that source needs is refused.
    const missing = await api.patch(`/v2/deployments/${d.id}`, {
      revision_source: 'internal_source',
      source_revision_config: { framework_config_path: 'x.json' },
    });
    assert.equal(missing.status, 200, 'inherits the tarball from the latest internal_source revision');
    const codehost = await api.patch(`/v2/deployments/${d.id}`, {
      revision_source: 'codehost',
      source_revision_config: { repo_ref: 'main', framework_config_path: 'a.json' },
    });
    assert.equal(codehost.status, 400);
  });

  test('unknown deployment is 404 with the contract message', async () => {
    const id = '7b0c8f7e-2a4c-4c47-9a55-0f1f1b1b1b1b';
    const res = await api.patch(`/v2/deployments/${id}`, { source_config: {} });
    assert.equal(res.status, 404);
    assert.equal(res.body.detail, `Deployment ID ${id} not found.`);
  });
});

describe('revision history', () => {
  test('redeploy restores exactly what an old revision ran', async () => {
    const d = await create('history', {
      secrets: [{ name: 'KEY', value: 'v1' }],
      source_config: { resource_spec: { cpu: 1 } },
    });
    const v1 = d.latest_revision_id;
    await api.patch(`/v2/deployments/${d.id}`, {
      source_revision_config: { image_uri: 'reg.example.com/a:2' },
      secrets: [{ name: 'KEY', value: 'v2' }],
      source_config: { resource_spec: { cpu: 2 } },
    });
    const res = await api.post(`/v2/deployments/${d.id}/revisions/${v1}/redeploy`);
    assert.equal(res.status, 201, JSON.stringify(res.body));
    assert.equal(res.body.source_revision_config.image_uri, 'reg.example.com/a:1');
    assert.deepEqual(res.body.source_config.resource_spec, { cpu: 1 });
    const stored = (
      await t.database.db.selectFrom('deployments').select('secrets').where('id', '=', d.id).executeTakeFirstOrThrow()
    ).secrets;
    assert.equal(t.secretBox.open(stored[0]!.value), 'v1');
    assert.equal((await revisionsOf(d.id)).length, 3);
  });

  test('interrupt ends an unfinished revision; a final one is 409', async () => {
    const d = await create('stoppable');
    const url = `/v2/deployments/${d.id}/revisions/${d.latest_revision_id}/interrupt`;
    const res = await api.post(url);
    assert.equal(res.status, 200);
    assert.equal(res.body.status, 'INTERRUPTED');
    assert.equal(res.body.failure_reason, 'interrupted_by_user');
    assert.equal((await api.post(url)).status, 409);
  });

  test('every transition is an event, listed oldest first', async () => {
    const d = await create('audited');
    const listed = await api.get(`/v2/deployments/${d.id}/events`);
    assert.equal(listed.status, 200);
    assert.deepEqual(
      listed.body.resources.map((e: { type: string; to_status: string | null }) => `${e.type}:${e.to_status}`),
      ['deployment.created:AWAITING_DATABASE', 'revision.created:CREATING', 'revision.status_changed:QUEUED'],
    );
    const events = await t.database.db
      .selectFrom('events')
      .select(['type', 'from_status', 'to_status'])
      .where('deployment_id', '=', d.id)
      .orderBy('id')
      .execute();
    assert.deepEqual(
      events.map((e) => `${e.type}:${e.from_status ?? ''}->${e.to_status ?? ''}`),
      [
        'deployment.created:->AWAITING_DATABASE',
        'revision.created:->CREATING',
        'revision.status_changed:CREATING->QUEUED',
      ],
    );

    // Newest first, paged: what happened lately, as the dashboard shows it.
    const newest = await api.get(`/v2/deployments/${d.id}/events?order=desc&limit=2`);
    assert.equal(newest.status, 200);
    assert.deepEqual(
      newest.body.resources.map((e: { type: string }) => e.type),
      ['revision.status_changed', 'revision.created'],
    );
    const older = await api.get(`/v2/deployments/${d.id}/events?order=desc&limit=2&offset=${newest.body.offset}`);
    assert.deepEqual(
      older.body.resources.map((e: { type: string }) => e.type),
      ['deployment.created'],
    );
    assert.equal((await api.get(`/v2/deployments/${d.id}/events?order=newest`)).status, 422);
  });

  test('get one revision; a revision of another deployment is 404', async () => {
    const a = await create('rev-a');
    const b = await create('rev-b');
    const ok = await api.get(`/v2/deployments/${a.id}/revisions/${a.latest_revision_id}`);
    assert.equal(ok.status, 200);
    assert.equal(ok.body.deployment_id, a.id);
    const wrong = await api.get(`/v2/deployments/${a.id}/revisions/${b.latest_revision_id}`);
    assert.equal(wrong.status, 404);
  });
});

describe('delete', () => {
  test('delete interrupts open revisions, keeps the tracing project, and the name can be reused with it', async () => {
    const d = await create('short-lived');
    assert.equal((await api.delete(`/v2/deployments/${d.id}`)).status, 204);
    assert.equal((await api.get(`/v2/deployments/${d.id}`)).status, 404);
    const events = await t.database.db
      .selectFrom('events')
      .select(['type', 'to_status'])
      .where('deployment_id', '=', d.id)
      .orderBy('id')
      .execute();
    assert.ok(events.some((e) => e.type === 'revision.status_changed' && e.to_status === 'INTERRUPTED'));
    assert.ok(events.some((e) => e.type === 'deployment.status_changed' && e.to_status === 'AWAITING_DELETE'));
    const again = await create('short-lived');
    assert.equal(again.tracing_project_id, d.tracing_project_id);
    assert.equal((await api.delete(`/v2/deployments/${again.id}?delete_tracing_project=true`)).status, 204);
    const projects = (await api.get('/v2/tracing-projects?limit=100')).body.resources;
    assert.ok(!projects.some((p: { name: string }) => p.name === 'short-lived'));
  });
});

describe('deadlines', () => {
  test('a revision past its state deadline moves to that state failure, once', async () => {
    const { expireOverdueRevisions } = await import('../src/pipeline/deadlines.ts');
    const d = await create('overdue');
    // Nothing is overdue now.
    assert.equal(await expireOverdueRevisions(t.database.db, new Date()), 0);
    const revision = (await api.get(`/v2/deployments/${d.id}/revisions/${d.latest_revision_id}`)).body;
    assert.equal(revision.status, 'QUEUED');
    // A day and an hour later, the queued revision has been waiting too long.
    const later = new Date(Date.now() + 25 * 3600 * 1000);
    assert.ok((await expireOverdueRevisions(t.database.db, later)) >= 1);
    const after = (await api.get(`/v2/deployments/${d.id}/revisions/${d.latest_revision_id}`)).body;
    assert.equal(after.status, 'UNKNOWN');
    assert.equal(after.failure_reason, 'deadline_exceeded');
    assert.equal(await expireOverdueRevisions(t.database.db, later), 0);
  });
});
