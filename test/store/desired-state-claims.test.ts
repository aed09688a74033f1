/**
 * The own worker's claims are the SQL form of the one desired-state rule (src/domain/desired-state.ts):
 * for every pair of revision statuses (an older and the latest revision), every deployment status, with
 * no, the older or the latest revision active, on both data planes, `claimRevision` takes first the
 * revision `nextWorkRevisionId` names (and nothing of a deployment it names none of), and
 * `claimRunnableDeployments` runs exactly the deployments `servingRevisionId` gives a revision to, that
 * revision. The rows are set by hand: the rule is about the rows, whichever way they got there.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { client, createTestApp, registerListener, type TestApp } from '../support/harness.ts';
import { dataPlaneOf } from '../../src/domain/deletion.ts';
import { nextWorkRevisionId, servingRevisionId } from '../../src/domain/desired-state.ts';
import {
  DEPLOYMENT_STATUSES,
  REVISION_STATUSES,
  type DeploymentStatus,
  type RevisionStatus,
} from '../../src/domain/states.ts';
import { claimRevision, claimRunnableDeployments, type LeaseOwner } from '../../src/store/work-leases.ts';

let t: TestApp;
before(async () => {
  t = await createTestApp();
});
after(() => t.close());

const statusIn = (d: Made) => (id: string) => d.revisions.find((r) => r.id === id)?.status;

const worker: LeaseOwner = { id: 'node-a/1', nodePrefix: 'node-a/' };

interface Made {
  id: string;
  status: DeploymentStatus;
  listener_id: string | null;
  active_revision_id: string | null;
  latest_revision_id: string;
  /** In the order they were made. */
  revisions: { id: string; status: RevisionStatus }[];
}

test("the own worker's claims pick what the desired-state rule says, on both planes", async () => {
  const api = client(t.app);
  const listener = await registerListener(api.post, 'desired-state-cluster', ['agents']);
  const made: Made[] = [];
  let n = 0;
  for (const listenerId of [null, listener.id]) {
    for (const older of REVISION_STATUSES) {
      for (const latest of REVISION_STATUSES) {
        // Every deployment status and every choice of active revision, spread over the pairs.
        const status = DEPLOYMENT_STATUSES[n % DEPLOYMENT_STATUSES.length]!;
        const active = (['none', 'older', 'latest'] as const)[Math.floor(n / DEPLOYMENT_STATUSES.length) % 3]!;
        n += 1;
        const created = await api.post('/v2/deployments', {
          name: `desired-${n}-${listenerId === null ? 'local' : 'listener'}`,
          ...(listenerId === null
            ? { source: 'internal_container' }
            : { source: 'external_container', source_config: { listener_id: listenerId } }),
          source_revision_config: { image_uri: 'registry.example.com/agent:1.0.0' },
        });
        assert.equal(created.status, 201, JSON.stringify(created.body));
        const deploymentId: string = created.body.id;
        const olderId: string = created.body.latest_revision_id;
        // The latest revision: a copy of the first, made a second later.
        const copy = await t.database.pool.query<{ id: string }>(
          `insert into revisions (id, deployment_id, workspace_id, number, status, source, source_revision_config, snapshot, secrets, created_at)
           select gen_random_uuid(), deployment_id, workspace_id, 2, $2, source, source_revision_config, snapshot, secrets, created_at + interval '1 second'
           from revisions where id = $1 returning id`,
          [olderId, latest],
        );
        const latestId = copy.rows[0]!.id;
        const activeId = active === 'none' ? null : active === 'older' ? olderId : latestId;
        await t.database.pool.query(`update revisions set status = $2 where id = $1`, [olderId, older]);
        await t.database.pool.query(
          'update deployments set status = $2, latest_revision_id = $3, active_revision_id = $4 where id = $1',
          [deploymentId, status, latestId, activeId],
        );
        made.push({
          id: deploymentId,
          status,
          listener_id: listenerId,
          active_revision_id: activeId,
          latest_revision_id: latestId,
          revisions: [
            { id: olderId, status: older },
            { id: latestId, status: latest },
          ],
        });
      }
    }
  }
  // Every deployment status and every active choice met every plane.
  for (const plane of ['local', 'listener'] as const) {
    const onPlane = made.filter((d) => dataPlaneOf(d) === plane);
    assert.equal(new Set(onPlane.map((d) => d.status)).size, DEPLOYMENT_STATUSES.length);
    assert.equal(new Set(onPlane.map((d) => d.active_revision_id === null)).size, 2);
  }

  // claimRevision: the first revision claimed of each deployment is its next work.
  const firstClaimed = new Map<string, string>();
  for (;;) {
    const found = await t.database.db.transaction().execute((tx) => claimRevision(tx, worker, 30));
    if (!found) break;
    if (!firstClaimed.has(found.deployment_id)) firstClaimed.set(found.deployment_id, found.id);
  }
  const wrongWork = made
    .map((d) => ({
      d,
      rule: nextWorkRevisionId(d, statusIn(d)),
      sql: firstClaimed.get(d.id) ?? null,
    }))
    .filter(({ rule, sql }) => rule !== sql)
    .map(
      ({ d, rule, sql }) =>
        `${dataPlaneOf(d)} ${d.status} [${d.revisions.map((r) => r.status).join(', ')}]: ` +
        `rule ${rule === null ? 'none' : d.revisions.findIndex((r) => r.id === rule)}, ` +
        `SQL ${sql === null ? 'none' : d.revisions.findIndex((r) => r.id === sql)}`,
    );
  assert.ok(
    made.some((d) => nextWorkRevisionId(d, statusIn(d)) !== null),
    'the rule gives the worker some work here',
  );
  assert.deepEqual(wrongWork, [], 'claimRevision must take first what nextWorkRevisionId names');

  // claimRunnableDeployments: exactly the deployments with a serving revision on the own plane.
  const claimed: { id: string; active_revision_id: string }[] = [];
  for (;;) {
    const found = await t.database.db.transaction().execute((tx) => claimRunnableDeployments(tx, worker, 30, 50));
    if (found.length === 0) break;
    claimed.push(...found);
  }
  const byRule = made
    .filter((d) => dataPlaneOf(d) === 'local' && servingRevisionId(d) !== null)
    .map((d) => `${d.id} runs ${servingRevisionId(d)}`)
    .sort();
  assert.ok(byRule.length > 0, 'the rule has the worker run some of these');
  assert.deepEqual(
    claimed
      .filter((c) => made.some((d) => d.id === c.id))
      .map((c) => `${c.id} runs ${c.active_revision_id}`)
      .sort(),
    byRule,
    'claimRunnableDeployments must run what servingRevisionId says, on the own plane only',
  );
});
