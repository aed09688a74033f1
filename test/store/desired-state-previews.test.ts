/**
 * A pull request's preview revision (revisions.preview_pull_request, made by a signed pull_request webhook)
 * never becomes what the desired-state rule (src/domain/desired-state.ts) makes a deployment run: the webhook
 * does not make it the latest revision, and were a row ever to name it latest, the rule, fed the column,
 * still keeps the active revision as the target.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { desiredDeploymentState, targetRevisionId } from '../../src/domain/desired-state.ts';
import type { RevisionStatus } from '../../src/domain/states.ts';
import {
  createCodehostDeployment,
  createTokenIntegration,
  deliver,
  startCodehostFixture,
  type CodehostFixture,
} from '../codehost/codehost-fixture.ts';

let f: CodehostFixture;
before(async () => {
  f = await startCodehostFixture();
});
after(() => f.close());

test("a preview revision is never the deployment's target revision", async () => {
  const integration = await createTokenIntegration(f, 'github');
  const deployment = await createCodehostDeployment(f, integration.id, 'target-rule', { repo: 'repo-040' });
  const main = deployment.latest_revision_id;
  const db = f.t.database.db;
  await db.updateTable('revisions').set({ status: 'DEPLOYED' }).where('id', '=', main).execute();
  await db
    .updateTable('deployments')
    .set({ active_revision_id: main, status: 'READY' })
    .where('id', '=', deployment.id)
    .execute();
  const base = `${f.github.webOrigin}/octo-org/repo-040`;
  const repo = { name: 'repo-040', full_name: 'octo-org/repo-040', html_url: base, clone_url: `${base}.git` };
  const res = await deliver(
    f,
    integration.id,
    {
      action: 'opened',
      number: 4,
      pull_request: { number: 4, head: { sha: 'e'.repeat(40), repo }, base: { sha: '0'.repeat(40), repo } },
      repository: repo,
    },
    { event: 'pull_request', secret: integration.webhook_secret },
  );
  assert.equal(res.body.outcome, 'revision_created', JSON.stringify(res.body));
  const preview: string = res.body.revision_ids[0];

  const rows = await db
    .selectFrom('revisions')
    .select(['id', 'status', 'preview_pull_request'])
    .where('deployment_id', '=', deployment.id)
    .execute();
  const statusOf = (id: string): RevisionStatus | undefined => rows.find((r) => r.id === id)?.status;
  const isPreview = (id: string) => rows.find((r) => r.id === id)?.preview_pull_request != null;
  assert.ok(isPreview(preview) && !isPreview(main), 'the preview revision is marked, the deployment’s own is not');

  const row = await db.selectFrom('deployments').selectAll().where('id', '=', deployment.id).executeTakeFirstOrThrow();
  assert.equal(row.latest_revision_id, main, 'the webhook does not make the preview the latest revision');
  assert.equal(targetRevisionId(row, statusOf, isPreview), main);

  // Every status the preview may reach, with the row naming it latest by hand: the rule keeps the active one.
  for (const status of ['QUEUED', 'BUILDING', 'DEPLOYING', 'DEPLOYED'] as const) {
    const forced = { ...row, latest_revision_id: preview };
    const statuses = (id: string) => (id === preview ? status : statusOf(id));
    assert.equal(targetRevisionId(forced, statuses, isPreview), main, status);
    assert.equal(desiredDeploymentState(forced, statuses, isPreview).targetRevisionId, main, status);
    // Without the mark it would have been taken: the column is what keeps it out.
    assert.equal(targetRevisionId(forced, statuses), preview, status);
  }
});
