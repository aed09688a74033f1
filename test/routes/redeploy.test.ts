/**
 * A redeploy shows what it runs: redeploying an old revision puts that revision's install and build
 * commands and resource spec back on the deployment (and removes those it was built without), so a later
 * secrets-only patch keeps the rollback. The instance counts (the `*_scale` fields) are the deployment's,
 * not the revision's: a rollback keeps how many instances run. Commands patched alone run only from the
 * next revision on (docs/lifecycle.md, "Which patch makes a revision", "What a redeploy restores").
 */
import assert from 'node:assert/strict';
import { gzipSync } from 'node:zlib';
import { after, before, test } from 'node:test';
import { ADMIN_KEY, client, createTestApp, type TestApp } from '../support/harness.ts';

let t: TestApp;
before(async () => {
  t = await createTestApp();
});
after(() => t.close());

async function upload(): Promise<string> {
  const response = await t.app.inject({
    method: 'POST',
    url: '/v2/uploads',
    headers: { 'x-api-key': ADMIN_KEY, 'content-type': 'application/gzip' },
    payload: gzipSync(Buffer.from('source')),
  });
  assert.equal(response.statusCode, 201, response.body);
  return JSON.parse(response.body).source_tarball_path;
}

test('redeploying revision 1 restores its commands and resources but keeps the scale; a secrets patch afterwards keeps them', async () => {
  const api = client(t.app);
  const tarball = await upload();
  const created = await api.post('/v2/deployments', {
    name: 'rollback-me',
    source: 'internal_source',
    source_config: {
      install_command: 'npm ci',
      build_command: 'npm run build',
      resource_spec: { min_scale: 1, memory_mb: 512 },
    },
    source_revision_config: { source_tarball_path: tarball, framework_config_path: 'slipway.json' },
    secrets: [{ name: 'TOKEN', value: 'one' }],
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const id = created.body.id;
  const first = created.body.latest_revision_id;

  const changed = await api.patch(`/v2/deployments/${id}`, {
    source_config: { install_command: 'make deps', resource_spec: { min_scale: 2, memory_mb: 1024 } },
    source_revision_config: { source_tarball_path: tarball },
  });
  assert.equal(changed.status, 200);
  assert.equal(changed.body.source_config.install_command, 'make deps');

  const rolled = await api.post(`/v2/deployments/${id}/revisions/${first}/redeploy`);
  assert.equal(rolled.status, 201, JSON.stringify(rolled.body));
  assert.equal(rolled.body.source_config.install_command, 'npm ci');
  assert.equal(rolled.body.source_config.build_command, 'npm run build');
  // The revision's memory comes back; the two web instances the deployment runs now stay.
  assert.deepEqual(rolled.body.source_config.resource_spec, { min_scale: 2, memory_mb: 512 });

  const secrets = await api.patch(`/v2/deployments/${id}`, { secrets: [{ name: 'TOKEN', value: 'two' }] });
  assert.equal(secrets.status, 200);
  assert.notEqual(secrets.body.latest_revision_id, rolled.body.latest_revision_id);
  const snapshot = (
    await t.database.db
      .selectFrom('revisions')
      .select('snapshot')
      .where('id', '=', secrets.body.latest_revision_id)
      .executeTakeFirstOrThrow()
  ).snapshot;
  assert.equal(snapshot.install_command, 'npm ci');
  assert.deepEqual(snapshot.resource_spec, { min_scale: 2, memory_mb: 512 });
  assert.equal(secrets.body.source_config.install_command, 'npm ci');
});

test('after scaling in place, a rollback runs as many instances as before it, and says so in its event', async () => {
  const api = client(t.app);
  const tarball = await upload();
  const created = await api.post('/v2/deployments', {
    name: 'scaled-then-rolled',
    source: 'internal_source',
    source_revision_config: { source_tarball_path: tarball, framework_config_path: 'slipway.json' },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const id = created.body.id;
  const first = created.body.latest_revision_id;
  const second = await api.patch(`/v2/deployments/${id}`, { source_revision_config: { source_tarball_path: tarball } });
  assert.equal(second.status, 200);

  // `slipway scale --web 2 --workers 3`: in place, no revision.
  const scaled = await api.patch(`/v2/deployments/${id}`, {
    source_config: { resource_spec: { min_scale: 2, max_scale: 4, queue_min_scale: 3 } },
  });
  assert.equal(scaled.body.latest_revision_id, second.body.latest_revision_id);

  const rolled = await api.post(`/v2/deployments/${id}/revisions/${first}/redeploy`);
  assert.equal(rolled.status, 201, JSON.stringify(rolled.body));
  assert.deepEqual(rolled.body.source_config.resource_spec, { min_scale: 2, max_scale: 4, queue_min_scale: 3 });
  const snapshot = (
    await t.database.db
      .selectFrom('revisions')
      .select('snapshot')
      .where('id', '=', rolled.body.latest_revision_id)
      .executeTakeFirstOrThrow()
  ).snapshot;
  // The new revision records what it runs with: the kept counts.
  assert.deepEqual(snapshot.resource_spec, { min_scale: 2, max_scale: 4, queue_min_scale: 3 });

  const events = await api.get(`/v2/deployments/${id}/events?order=desc&limit=100`);
  const updated = events.body.resources.find(
    (e: { type: string; data: Record<string, unknown> }) =>
      e.type === 'deployment.updated' && e.data.restored_from_revision === first,
  );
  assert.ok(updated, JSON.stringify(events.body.resources.map((e: { type: string }) => e.type)));
  assert.deepEqual(updated.data.kept_scale, { min_scale: 2, max_scale: 4, queue_min_scale: 3 });
});

test('commands patched alone wait for the next revision; redeploying a revision built without them removes them', async () => {
  const api = client(t.app);
  const tarball = await upload();
  const created = await api.post('/v2/deployments', {
    name: 'commands-later',
    source: 'internal_source',
    source_revision_config: { source_tarball_path: tarball, framework_config_path: 'slipway.json' },
    secrets: [{ name: 'TOKEN', value: 'one' }],
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const id = created.body.id;
  const first = created.body.latest_revision_id;
  const snapshotOf = async (revisionId: string) =>
    (
      await t.database.db
        .selectFrom('revisions')
        .select('snapshot')
        .where('id', '=', revisionId)
        .executeTakeFirstOrThrow()
    ).snapshot;

  const patched = await api.patch(`/v2/deployments/${id}`, {
    source_config: { install_command: 'make deps', build_command: 'make' },
  });
  assert.equal(patched.status, 200, JSON.stringify(patched.body));
  assert.equal(patched.body.latest_revision_id, first, 'a source_config-only patch makes no revision');
  assert.equal(patched.body.source_config.install_command, 'make deps');
  assert.equal((await snapshotOf(first)).install_command, null, 'the latest revision keeps what it was built with');

  const secrets = await api.patch(`/v2/deployments/${id}`, { secrets: [{ name: 'TOKEN', value: 'two' }] });
  assert.equal(secrets.status, 200);
  const second = secrets.body.latest_revision_id;
  assert.notEqual(second, first);
  const taken = await snapshotOf(second);
  assert.equal(taken.install_command, 'make deps', 'the next revision builds with the patched commands');
  assert.equal(taken.build_command, 'make');

  const rolled = await api.post(`/v2/deployments/${id}/revisions/${first}/redeploy`);
  assert.equal(rolled.status, 201, JSON.stringify(rolled.body));
  assert.equal(rolled.body.source_config.install_command ?? null, null, 'revision 1 was built without commands');
  assert.equal(rolled.body.source_config.build_command ?? null, null);
  const restored = await snapshotOf(rolled.body.latest_revision_id);
  assert.equal(restored.install_command, null);
  assert.equal(restored.build_command, null);
});
