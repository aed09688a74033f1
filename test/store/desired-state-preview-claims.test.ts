/**
 * Pull-request previews and the own worker's claims (beside test/store/desired-state-claims.test.ts): for
 * every pair of statuses of a deployment's latest revision and of an open pull request's preview revision,
 * with an older commit's preview revision and a closed pull request's revision left on their way, over every
 * deployment status and both planes, `claimRevision` takes exactly what the desired-state rule names,
 * `nextWorkRevisionId` and `previewWorkRevisionIds` together. Then the reports: a preview's is not refused
 * for not being the latest, and neither the preview's first step nor the deployment's own ends the other's
 * revision; a newer commit's preview supersedes the older one only. The rows are set by hand.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { client, createTestApp, registerListener, type TestApp } from '../support/harness.ts';
import { dataPlaneOf } from '../../src/domain/deletion.ts';
import { nextWorkRevisionId, previewWorkRevisionIds } from '../../src/domain/desired-state.ts';
import {
  DEPLOYMENT_STATUSES,
  REVISION_STATUSES,
  type DeploymentStatus,
  type RevisionStatus,
} from '../../src/domain/states.ts';
import { createOwnPlaneReports } from '../../src/service/lifecycle-reports.ts';
import { claimRevision, type LeaseOwner } from '../../src/store/work-leases.ts';

let t: TestApp;
before(async () => {
  t = await createTestApp();
});
after(() => t.close());

const worker: LeaseOwner = { id: 'node-p/1', nodePrefix: 'node-p/' };
const sha = (c: string) => c.repeat(40);

interface Made {
  id: string;
  status: DeploymentStatus;
  listener_id: string | null;
  latest_revision_id: string;
  /** The open pull request's preview names this one. */
  openPreviewId: string;
  revisions: { id: string; status: RevisionStatus; label: string }[];
}

async function deployment(name: string, listenerId: string | null) {
  const created = await client(t.app).post('/v2/deployments', {
    name,
    ...(listenerId === null
      ? { source: 'internal_container' }
      : { source: 'external_container', source_config: { listener_id: listenerId } }),
    source_revision_config: { image_uri: 'registry.example.com/agent:1.0.0' },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  return { id: created.body.id as string, latestId: created.body.latest_revision_id as string };
}

/** A revision of the deployment like `like`, made `seconds` later, a preview of `pr` when given. */
async function copyRevision(like: string, number: number, status: RevisionStatus, pr: number | null, seconds: number) {
  const copy = await t.database.pool.query<{ id: string }>(
    `insert into revisions (id, deployment_id, workspace_id, number, status, source, source_revision_config, snapshot, secrets, created_at, preview_pull_request)
     select gen_random_uuid(), deployment_id, workspace_id, $2, $3, source, source_revision_config, snapshot, secrets,
            created_at + make_interval(secs => $4), $5
     from revisions where id = $1 returning id`,
    [like, number, status, seconds, pr],
  );
  return copy.rows[0]!.id;
}

async function openPreview(deploymentId: string, pr: number, revisionId: string) {
  await t.database.pool.query(
    `insert into pull_request_previews (deployment_id, pull_request, repository, head_sha, head_repository, from_fork, revision_id)
     values ($1, $2, 'octo-org/repo', $3, 'someone/repo', true, $4)
     on conflict (deployment_id, pull_request) do update set revision_id = excluded.revision_id`,
    [deploymentId, pr, sha('a'), revisionId],
  );
}

test("the own worker's claims of previews pick what the desired-state rule says", async () => {
  const listener = await registerListener(client(t.app).post, 'preview-claims-cluster', ['agents']);
  const made: Made[] = [];
  let n = 0;
  for (const latest of REVISION_STATUSES) {
    for (const preview of REVISION_STATUSES) {
      const status = DEPLOYMENT_STATUSES[n % DEPLOYMENT_STATUSES.length]!;
      // One in seven on a listener's plane: previews are the own plane's only.
      const listenerId = n % 7 === 3 ? listener.id : null;
      n += 1;
      const d = await deployment(`preview-claims-${n}`, listenerId);
      const olderPreview = await copyRevision(d.latestId, 2, 'BUILDING', 5, 1);
      const openId = await copyRevision(d.latestId, 3, preview, 5, 2);
      const closedPr = await copyRevision(d.latestId, 4, 'QUEUED', 6, 3);
      await openPreview(d.id, 5, openId);
      await t.database.pool.query(`update revisions set status = $2 where id = $1`, [d.latestId, latest]);
      await t.database.pool.query('update deployments set status = $2 where id = $1', [d.id, status]);
      made.push({
        id: d.id,
        status,
        listener_id: listenerId,
        latest_revision_id: d.latestId,
        openPreviewId: openId,
        revisions: [
          { id: d.latestId, status: latest, label: 'latest' },
          { id: olderPreview, status: 'BUILDING', label: 'older preview' },
          { id: openId, status: preview, label: 'preview' },
          { id: closedPr, status: 'QUEUED', label: 'closed preview' },
        ],
      });
    }
  }
  const claimed = new Map<string, Set<string>>();
  for (;;) {
    const found = await t.database.db.transaction().execute((tx) => claimRevision(tx, worker, 30));
    if (!found) break;
    if (!made.some((d) => d.id === found.deployment_id)) continue;
    claimed.set(found.deployment_id, (claimed.get(found.deployment_id) ?? new Set()).add(found.id));
  }
  const label = (d: Made, ids: Iterable<string>) =>
    [...ids].map((id) => d.revisions.find((r) => r.id === id)!.label).sort();
  const disagree: string[] = [];
  let previewWork = 0;
  for (const d of made) {
    const statusOf = (id: string) => d.revisions.find((r) => r.id === id)?.status;
    const isPreview = (id: string) => id !== d.latest_revision_id;
    const own = nextWorkRevisionId(d, statusOf, isPreview);
    const previews = previewWorkRevisionIds(d, [d.openPreviewId], statusOf);
    previewWork += previews.length;
    const rule = label(d, [...(own === null ? [] : [own]), ...previews]);
    const sql = label(d, claimed.get(d.id) ?? []);
    if (rule.join() !== sql.join())
      disagree.push(
        `${dataPlaneOf(d)} ${d.status} [${d.revisions.map((r) => r.status).join(', ')}]: rule ${rule.join()}, SQL ${sql.join()}`,
      );
  }
  assert.ok(previewWork > 0, 'the rule gives the worker some preview work here');
  assert.ok(
    made.some((d) => claimed.get(d.id)?.size === 2),
    'a preview and the deployment’s own are worked on at once',
  );
  assert.deepEqual(disagree, [], 'claimRevision must take what nextWorkRevisionId and previewWorkRevisionIds name');
});

test("a preview's reports apply beside the deployment's own, and neither ends the other", async () => {
  const d = await deployment('preview-reports', null);
  const reports = createOwnPlaneReports(t.database.db, { owner: worker, leaseSeconds: 30 });
  const lease = async (id: string) =>
    t.database.pool.query(
      `update revisions set lease_owner = $2, lease_expires_at = now() + interval '1 minute' where id = $1`,
      [id, worker.id],
    );
  const statusOf = async (id: string) =>
    (await t.database.pool.query<{ status: string }>('select status from revisions where id = $1', [id])).rows[0]!
      .status;
  // The deployment's own revision is QUEUED; a preview of pull request 9 is queued after it.
  await t.database.pool.query(`update revisions set status = 'QUEUED' where id = $1`, [d.latestId]);
  const preview = await copyRevision(d.latestId, 2, 'QUEUED', 9, 1);
  await openPreview(d.id, 9, preview);
  await lease(preview);
  const first = await reports.reportRevision({ revisionId: preview, status: 'AWAITING_DEPLOY' });
  assert.equal(first.applied, true, `a preview is not superseded for not being latest: ${JSON.stringify(first)}`);
  assert.equal(await statusOf(d.latestId), 'QUEUED', "the preview's first step leaves the deployment's own");

  await lease(d.latestId);
  const own = await reports.reportRevision({ revisionId: d.latestId, status: 'AWAITING_DEPLOY' });
  assert.equal(own.applied, true, JSON.stringify(own));
  assert.equal(await statusOf(preview), 'AWAITING_DEPLOY', "the deployment's first step leaves the preview");
  const deploying = await reports.reportRevision({ revisionId: preview, status: 'DEPLOYING' });
  assert.equal(deploying.applied, true, JSON.stringify(deploying));

  // A newer commit of the pull request: its preview names the newer revision, whose first step ends the older.
  const newer = await copyRevision(d.latestId, 3, 'QUEUED', 9, 2);
  await openPreview(d.id, 9, newer);
  const stale = await reports.reportRevision({ revisionId: preview, status: 'DEPLOYED' });
  assert.deepEqual([stale.applied, stale.notAppliedReason], [false, 'superseded']);
  await lease(newer);
  const next = await reports.reportRevision({ revisionId: newer, status: 'AWAITING_DEPLOY' });
  assert.equal(next.applied, true, JSON.stringify(next));
  assert.equal(await statusOf(preview), 'INTERRUPTED', 'the older commit’s preview is ended');
  assert.equal(await statusOf(d.latestId), 'AWAITING_DEPLOY', "the deployment's own goes on");
});
