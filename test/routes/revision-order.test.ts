/**
 * Revision order under concurrent patches: the list (newest first) always agrees with the revision
 * numbers and with the deployment's latest_revision_id, however many patches run at once.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { client, createTestApp, type TestApp } from '../support/harness.ts';

let t: TestApp;
before(async () => {
  t = await createTestApp();
});
after(() => t.close());

test('20 simultaneous patches: the first listed revision is latest_revision_id and the order follows the numbers', async () => {
  const api = client(t.app);
  const created = await api.post('/v2/deployments', {
    name: 'busy',
    source: 'internal_container',
    source_revision_config: { image_uri: 'ghcr.io/acme/a:0' },
  });
  assert.equal(created.status, 201);
  const id = created.body.id;
  for (let round = 0; round < 3; round++) {
    const answers = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        api.patch(`/v2/deployments/${id}`, { source_revision_config: { image_uri: `ghcr.io/acme/a:${round}-${i}` } }),
      ),
    );
    assert.ok(answers.every((a) => a.status === 200));
    const deployment = (await api.get(`/v2/deployments/${id}`)).body;
    const listed = (await api.get(`/v2/deployments/${id}/revisions?limit=100`)).body.resources as { id: string }[];
    assert.equal(
      listed[0]!.id,
      deployment.latest_revision_id,
      `round ${round}: the newest listed is the latest revision`,
    );
    const numbers = await t.database.db
      .selectFrom('revisions')
      .select(['id', 'number'])
      .where('deployment_id', '=', id)
      .execute();
    const numberOf = new Map(numbers.map((r) => [r.id, r.number]));
    const inListOrder = listed.map((r) => numberOf.get(r.id)!);
    assert.deepEqual(
      inListOrder,
      [...inListOrder].sort((a, b) => b - a),
      `round ${round}: listed newest first by number`,
    );
  }
});
