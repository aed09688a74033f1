/**
 * The revision table is the queue (src/store/work-leases.ts): a QUEUED revision claimed by one worker is
 * not claimed by another while that worker lives, even before it has reported the revision's first
 * step (the claim and that report are two transactions); once its lease runs out, another takes it.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { client, createTestApp, type TestApp } from '../support/harness.ts';
import { claimRevision, type LeaseOwner } from '../../src/store/work-leases.ts';

let t: TestApp;
before(async () => {
  t = await createTestApp();
});
after(() => t.close());

const workerA: LeaseOwner = { id: 'node-a/1', nodePrefix: 'node-a/' };
const workerB: LeaseOwner = { id: 'node-b/1', nodePrefix: 'node-b/' };

test('a claimed QUEUED revision is not claimed again by another live worker; an expired claim is', async () => {
  const created = await client(t.app).post('/v2/deployments', {
    name: 'queued-once',
    source: 'internal_container',
    source_revision_config: { image_uri: 'registry.example.com/agent:1.0.0' },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const revisionId = created.body.latest_revision_id;
  const claim = (owner: LeaseOwner) => t.database.db.transaction().execute((tx) => claimRevision(tx, owner, 30));

  const first = await claim(workerA);
  assert.equal(first?.id, revisionId);
  assert.equal(first?.status, 'QUEUED', 'claimed, its first step not reported yet');
  assert.equal(await claim(workerB), undefined, "another worker does not take a live worker's claim");

  await t.database.pool.query(`update revisions set lease_expires_at = now() - interval '1 second' where id = $1`, [
    revisionId,
  ]);
  const second = await claim(workerB);
  assert.equal(second?.id, revisionId, 'a lapsed claim is taken over');
  assert.equal(second?.attempts, 2);
});
