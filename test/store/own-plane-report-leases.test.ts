/**
 * The own data plane's reports rest on its leases (src/service/lifecycle-reports.ts), as a listener's
 * rest on its assignment: a worker whose lease another worker took over (it was thought dead, say, and
 * is still finishing what it started) changes nothing by reporting about that revision or deployment,
 * whatever it reports; the worker that holds the lease does.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { createOwnPlaneReports } from '../../src/service/lifecycle-reports.ts';
import { claimRevision, type LeaseOwner } from '../../src/store/work-leases.ts';
import { createTestClock } from '../support/clock.ts';
import { client, createTestApp, type TestApp } from '../support/harness.ts';

let t: TestApp;
before(async () => {
  t = await createTestApp();
});
after(() => t.close());

// Both workers read one clock the test moves past the stale worker's 30-second lease.
const clock = createTestClock();
const stale: LeaseOwner = { id: 'node-stale/1', nodePrefix: 'node-stale/', clock: clock.now };
const holder: LeaseOwner = { id: 'node-holder/1', nodePrefix: 'node-holder/', clock: clock.now };
const reportsOf = (owner: LeaseOwner) => createOwnPlaneReports(t.database.db, { owner, leaseSeconds: 30 });

async function snapshot(deploymentId: string, revisionId: string) {
  const deployment = await t.database.pool.query<{ status: string }>('select status from deployments where id = $1', [
    deploymentId,
  ]);
  const revision = await t.database.pool.query<{ status: string; repo_commit_sha: string | null }>(
    "select status, source_revision_config->>'repo_commit_sha' as repo_commit_sha from revisions where id = $1",
    [revisionId],
  );
  const events = await t.database.pool.query<{ type: string }>(
    'select type from events where deployment_id = $1 order by id',
    [deploymentId],
  );
  return {
    deployment: deployment.rows[0]?.status ?? 'gone',
    revision: revision.rows[0] ?? 'gone',
    events: events.rows.map((e) => e.type),
  };
}

test("a stale worker's reports after its lease was taken over change nothing; the holder's do", async () => {
  const created = await client(t.app).post('/v2/deployments', {
    name: 'stale-reports',
    source: 'internal_container',
    source_revision_config: { image_uri: 'registry.example.com/agent:1.0.0' },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const deploymentId: string = created.body.id;
  const revisionId: string = created.body.latest_revision_id;
  const workspaceId = t.workspaceId;

  // The stale worker claimed the revision and started it; its lease ran out and the holder took it
  // over; the holder also runs the deployment (its runner lease), which serves and is READY.
  const claim = (owner: LeaseOwner) => t.database.db.transaction().execute((tx) => claimRevision(tx, owner, 30));
  assert.equal((await claim(stale))?.id, revisionId);
  assert.equal((await reportsOf(stale).reportRevision({ revisionId, status: 'AWAITING_DEPLOY' })).applied, true);
  clock.advance(31_000);
  assert.equal((await claim(holder))?.id, revisionId, 'the holder takes the revision over');
  await t.database.pool.query(`update deployments set status = 'READY', runner_owner = $2 where id = $1`, [
    deploymentId,
    holder.id,
  ]);

  const before = await snapshot(deploymentId, revisionId);
  const old = reportsOf(stale);
  const revision = await old.reportRevision({ revisionId, status: 'DEPLOYING' });
  assert.deepEqual(revision, { applied: false, status: 'AWAITING_DEPLOY', notAppliedReason: 'superseded' });
  await old.reportCondition({ deploymentId, condition: 'crash_loop', data: { message: 'stale' } });
  await old.reportFact({ deploymentId, workspaceId, type: 'deployment.app_exited', data: { instance: 'web-0' } });
  await old.reportEndpoint({
    deploymentId,
    endpoint: 'preview',
    revisionId,
    recordedRevisionId: null,
    served: false,
    message: 'stale',
  });
  await old.reportCommit(revisionId, 'f'.repeat(40));
  assert.deepEqual(await snapshot(deploymentId, revisionId), before, 'nothing changed');

  // The holder's word counts.
  const current = reportsOf(holder);
  assert.equal((await current.reportRevision({ revisionId, status: 'DEPLOYING' })).applied, true);
  await current.reportCondition({ deploymentId, condition: 'crash_loop', data: { message: 'crashing' } });
  await current.reportFact({ deploymentId, workspaceId, type: 'deployment.app_exited', data: { instance: 'web-0' } });
  await current.reportCommit(revisionId, 'a'.repeat(40));
  const after = await snapshot(deploymentId, revisionId);
  assert.equal(after.deployment, 'UNKNOWN');
  assert.deepEqual(after.revision, { status: 'DEPLOYING', repo_commit_sha: 'a'.repeat(40) });
  assert.ok(after.events.includes('deployment.app_exited'));

  // Deleted: only the worker that holds it confirms the deletion.
  await t.database.pool.query(`update deployments set status = 'AWAITING_DELETE' where id = $1`, [deploymentId]);
  assert.deepEqual(await old.confirmDeletion(deploymentId), { deleted: false, orphanedUploads: [] });
  assert.equal((await snapshot(deploymentId, revisionId)).deployment, 'AWAITING_DELETE');
  assert.equal((await current.confirmDeletion(deploymentId)).deleted, true);
  assert.equal((await snapshot(deploymentId, revisionId)).deployment, 'gone');
});
