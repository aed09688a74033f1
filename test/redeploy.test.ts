/**
 * A redeploy shows what it runs: redeploying an old revision puts that revision's install and build
 * commands and resource spec back on the deployment, so a later secrets-only patch keeps the rollback.
 */
import assert from 'node:assert/strict';
import { gzipSync } from 'node:zlib';
import { after, before, test } from 'node:test';
import { ADMIN_KEY, client, createTestApp, type TestApp } from './helpers.ts';

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

test('redeploying revision 1 restores its commands and resource spec; a secrets patch afterwards keeps them', async () => {
  const api = client(t.app);
  const tarball = await upload();
  const created = await api.post('/v2/deployments', {
    name: 'rollback-me',
    source: 'internal_source',
    source_config: { install_command: 'npm ci', build_command: 'npm run build', resource_spec: { min_scale: 1 } },
    source_revision_config: { source_tarball_path: tarball, framework_config_path: 'slipway.json' },
    secrets: [{ name: 'TOKEN', value: 'one' }],
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const id = created.body.id;
  const first = created.body.latest_revision_id;

  const changed = await api.patch(`/v2/deployments/${id}`, {
    source_config: { install_command: 'make deps', resource_spec: { min_scale: 2 } },
    source_revision_config: { source_tarball_path: tarball },
  });
  assert.equal(changed.status, 200);
  assert.equal(changed.body.source_config.install_command, 'make deps');

  const rolled = await api.post(`/v2/deployments/${id}/revisions/${first}/redeploy`);
  assert.equal(rolled.status, 201, JSON.stringify(rolled.body));
  assert.equal(rolled.body.source_config.install_command, 'npm ci');
  assert.equal(rolled.body.source_config.build_command, 'npm run build');
  assert.deepEqual(rolled.body.source_config.resource_spec, { min_scale: 1 });

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
  assert.deepEqual(snapshot.resource_spec, { min_scale: 1 });
  assert.equal(secrets.body.source_config.install_command, 'npm ci');
});
