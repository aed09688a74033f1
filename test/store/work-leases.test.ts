/**
 * The revision table is the queue (src/store/work-leases.ts): a QUEUED revision claimed by one worker is
 * not claimed by another while that worker lives, even before it has reported the revision's first
 * step (the claim and that report are two transactions); once its lease runs out, another takes it.
 * The claim of a deletion to tear down is the SQL form of the one deletion rule (src/domain/deletion.ts).
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { client, createTestApp, registerListener, type TestApp } from '../support/harness.ts';
import { pendingDeletionFinisher } from '../../src/domain/deletion.ts';
import { DEPLOYMENT_STATUSES, type DeploymentStatus } from '../../src/domain/states.ts';
import { claimDeploymentToDelete, claimRevision, type LeaseOwner } from '../../src/store/work-leases.ts';
import { createOwnPlaneReports } from '../../src/service/lifecycle-reports.ts';
import { createTestClock } from '../support/clock.ts';

let t: TestApp;
before(async () => {
  t = await createTestApp();
});
after(() => t.close());

// Both workers read one clock the test moves: a lease runs out when it passes the lease's 30 seconds.
const clock = createTestClock();
const workerA: LeaseOwner = { id: 'node-a/1', nodePrefix: 'node-a/', clock: clock.now };
const workerB: LeaseOwner = { id: 'node-b/1', nodePrefix: 'node-b/', clock: clock.now };

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

  clock.advance(29_000);
  assert.equal(await claim(workerB), undefined, 'a claim with time left on its lease is still not taken');
  clock.advance(2_000);
  const second = await claim(workerB);
  assert.equal(second?.id, revisionId, 'a lapsed claim is taken over');
  assert.equal(second?.attempts, 2);
});

test('the own worker claims to tear down exactly the deployments whose deletion the one rule gives it', async () => {
  const api = client(t.app);
  const listener = await registerListener(api.post, 'deletion-rule-cluster', ['agents']);
  const made: { id: string; status: DeploymentStatus; listener_id: string | null }[] = [];
  for (const status of DEPLOYMENT_STATUSES) {
    for (const listenerId of [null, listener.id]) {
      const created = await api.post('/v2/deployments', {
        name: `deletion-rule-${status.toLowerCase().replace(/_/g, '-')}-${listenerId === null ? 'local' : 'listener'}`,
        ...(listenerId === null
          ? { source: 'internal_container' }
          : { source: 'external_container', source_config: { listener_id: listenerId } }),
        source_revision_config: { image_uri: 'registry.example.com/agent:1.0.0' },
      });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      // The status by hand: the rule is about the row, whichever way it got there.
      await t.database.pool.query('update deployments set status = $2 where id = $1', [created.body.id, status]);
      made.push({ id: created.body.id, status, listener_id: listenerId });
    }
  }
  const claimed: string[] = [];
  for (;;) {
    const found = await t.database.db.transaction().execute((tx) => claimDeploymentToDelete(tx, workerA, claimed));
    if (!found) break;
    claimed.push(found.id);
  }
  const byRule = made.filter((d) => pendingDeletionFinisher(d) === 'local').map((d) => d.id);
  assert.equal(byRule.length, 1, 'the rule gives the own worker one of these');
  assert.deepEqual(
    claimed.filter((id) => made.some((d) => d.id === id)).sort(),
    byRule.sort(),
    "claimDeploymentToDelete must select what pendingDeletionFinisher says is the own worker's",
  );
});

test('two workers never work one deployment at once: a newer QUEUED revision beside a claimed one is the target, and the older one is ended', async () => {
  const created = await client(t.app).post('/v2/deployments', {
    name: 'two-queued',
    source: 'internal_container',
    source_revision_config: { image_uri: 'registry.example.com/agent:1.0.0' },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const olderId: string = created.body.latest_revision_id;
  // The first claim of this deployment's revisions (others of this file's deployments are claimed on the way).
  const claim = async (owner: LeaseOwner) => {
    for (;;) {
      const found = await t.database.db.transaction().execute((tx) => claimRevision(tx, owner, 30));
      if (found === undefined || found.deployment_id === created.body.id) return found;
    }
  };
  assert.equal((await claim(workerA))?.id, olderId, 'worker A claims the only revision');
  // A second QUEUED revision beside the claimed one, its first step not reported yet (rows by hand: a
  // new revision through the API would have skipped the older one).
  const copy = await t.database.pool.query<{ id: string }>(
    `insert into revisions (id, deployment_id, workspace_id, number, status, source, source_revision_config, snapshot, secrets, created_at)
     select gen_random_uuid(), deployment_id, workspace_id, 2, 'QUEUED', source, source_revision_config, snapshot, secrets, created_at + interval '1 second'
     from revisions where id = $1 returning id`,
    [olderId],
  );
  const newerId = copy.rows[0]!.id;
  await t.database.pool.query('update deployments set latest_revision_id = $2 where id = $1', [
    created.body.id,
    newerId,
  ]);

  assert.equal((await claim(workerB))?.id, newerId, 'worker B takes the target, the latest revision');
  const reportsOf = (owner: LeaseOwner) => createOwnPlaneReports(t.database.db, { owner, leaseSeconds: 30 });
  const stale = await reportsOf(workerA).reportRevision({ revisionId: olderId, status: 'AWAITING_DEPLOY' });
  assert.deepEqual(stale, { applied: false, status: 'QUEUED', notAppliedReason: 'superseded' });
  const started = await reportsOf(workerB).reportRevision({ revisionId: newerId, status: 'AWAITING_DEPLOY' });
  assert.equal(started.applied, true);
  const older = await t.database.pool.query<{ status: string; failure_reason: string }>(
    'select status, failure_reason from revisions where id = $1',
    [olderId],
  );
  assert.deepEqual(older.rows[0], { status: 'SKIPPED', failure_reason: 'superseded' });
});
