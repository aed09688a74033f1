/**
 * Pull-request previews through signed `pull_request` webhooks (docs/codehost.md, "Pull-request previews"),
 * without a data plane: what a delivery writes (a preview revision that never becomes the deployment's
 * latest or active one, the preview, the endpoint once the revision is DEPLOYED), the attacker's cases first
 * (a fork gets no secrets, a bad signature changes nothing, another workspace sees nothing), the limit, and
 * the commit statuses the fake code host receives.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { createLogger } from '../../src/logger.ts';
import { createCodehostIntegrationService } from '../../src/service/codehost-integrations.ts';
import { createOwnPlaneReports } from '../../src/service/lifecycle-reports.ts';
import { createPreviewStatusPoster } from '../../src/service/preview-statuses.ts';
import { client } from '../support/harness.ts';
import {
  createCodehostDeployment,
  createTokenIntegration,
  deliver,
  otherWorkspace,
  startCodehostFixture,
  type CodehostFixture,
  type CreatedIntegration,
} from './codehost-fixture.ts';

let f: CodehostFixture;
let integration: CreatedIntegration;
let secret: string;

before(async () => {
  f = await startCodehostFixture();
  integration = await createTokenIntegration(f, 'github');
  secret = integration.webhook_secret;
});
after(() => f.close());

const sha = (digit: string): string => digit.repeat(40);

/** A `pull_request` payload as GitHub sends it; `fork` puts the head in another owner's copy. */
function prPayload(options: {
  repo: string;
  number: number;
  head: string;
  action?: string;
  fork?: boolean;
  merged?: boolean;
}): Record<string, unknown> {
  const base = `${f.github.webOrigin}/octo-org/${options.repo}`;
  const headOwner = options.fork ? 'mallory' : 'octo-org';
  const head = `${f.github.webOrigin}/${headOwner}/${options.repo}`;
  const repo = (owner: string, url: string) => ({
    name: options.repo,
    full_name: `${owner}/${options.repo}`,
    html_url: url,
    clone_url: `${url}.git`,
    fork: owner !== 'octo-org',
  });
  return {
    action: options.action ?? 'opened',
    number: options.number,
    pull_request: {
      number: options.number,
      state: options.action === 'closed' ? 'closed' : 'open',
      merged: options.merged ?? false,
      head: { ref: 'feature', sha: options.head, repo: repo(headOwner, head) },
      base: { ref: 'main', sha: sha('0'), repo: repo('octo-org', base) },
    },
    repository: repo('octo-org', base),
    sender: { login: headOwner },
  };
}

const sendPr = (payload: Record<string, unknown>, key: string | null = secret) =>
  deliver(f, integration.id, payload, { event: 'pull_request', secret: key });

async function revisionRows(deploymentId: string) {
  return f.t.database.db
    .selectFrom('revisions')
    .selectAll()
    .where('deployment_id', '=', deploymentId)
    .orderBy('number')
    .execute();
}

/** A deployment with a secret whose repository is `repo`. */
async function deploymentWithSecret(name: string, repo: string) {
  const deployment = await createCodehostDeployment(f, integration.id, name, { repo });
  const patched = await f.api.patch(`/v2/deployments/${deployment.id}`, {
    secrets: [{ name: 'API_TOKEN', value: 'production-s3cret' }],
  });
  assert.equal(patched.status, 200, JSON.stringify(patched.body));
  return patched.body as { id: string; latest_revision_id: string; active_revision_id: string | null };
}

/** Walks a revision to DEPLOYED as the own worker does, through the lifecycle's reports. */
async function deployAsWorker(revisionId: string): Promise<void> {
  const owner = { id: 'node-test/1', nodePrefix: 'node-test/' };
  await f.t.database.db
    .updateTable('revisions')
    .set({ status: 'DEPLOYING', lease_owner: owner.id, lease_expires_at: new Date(Date.now() + 60_000) })
    .where('id', '=', revisionId)
    .execute();
  const reports = createOwnPlaneReports(f.t.database.db, { owner, leaseSeconds: 30 });
  const outcome = await reports.reportRevision({ revisionId, status: 'DEPLOYED' });
  assert.equal(outcome.applied, true, JSON.stringify(outcome));
}

describe('attacks', () => {
  test("a pull request from a fork gets none of the deployment's secrets unless the deployment allows it", async () => {
    const deployment = await deploymentWithSecret('fork-secrets', 'repo-020');
    const res = await sendPr(prPayload({ repo: 'repo-020', number: 7, head: sha('a'), fork: true }));
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.equal(res.body.outcome, 'revision_created', JSON.stringify(res.body));
    const preview = (await revisionRows(deployment.id)).find((r) => r.preview_pull_request === 7)!;
    assert.deepEqual(preview.secrets, [], 'no sealed secret travels with a fork preview');
    assert.equal(preview.snapshot.preview?.secrets, false);
    assert.equal(preview.snapshot.preview?.from_fork, true);
    const listed = await f.api.get(`/v2/deployments/${deployment.id}/previews`);
    assert.equal(listed.status, 200, JSON.stringify(listed.body));
    assert.equal(listed.body.resources[0].from_fork, true);
    assert.equal(listed.body.resources[0].secrets, false);
    assert.equal(listed.body.resources[0].head_repository, 'mallory/repo-020');

    // A member key cannot switch it on: giving forks the secrets is an admin's decision.
    const member = await f.api.post('/v2/api-keys', { name: 'a member', role: 'member' });
    assert.equal(member.status, 201, JSON.stringify(member.body));
    const asMember = client(f.t.app, member.body.key);
    const refused = await asMember.patch(`/v2/deployments/${deployment.id}/preview-settings`, { fork_secrets: true });
    assert.equal(refused.status, 403, JSON.stringify(refused.body));
    assert.equal((await f.api.get(`/v2/deployments/${deployment.id}/preview-settings`)).body.fork_secrets, false);

    // A push to the fork's branch still builds without them.
    await sendPr(prPayload({ repo: 'repo-020', number: 7, head: sha('b'), fork: true, action: 'synchronize' }));
    const second = (await revisionRows(deployment.id)).filter((r) => r.preview_pull_request === 7);
    assert.equal(second.length, 2);
    assert.deepEqual(second[1]!.secrets, []);

    // Allowed by an admin, the next commit of the fork gets them (the usual CI switch).
    const allowed = await f.api.patch(`/v2/deployments/${deployment.id}/preview-settings`, { fork_secrets: true });
    assert.equal(allowed.status, 200, JSON.stringify(allowed.body));
    assert.equal(allowed.body.fork_secrets, true);
    await sendPr(prPayload({ repo: 'repo-020', number: 7, head: sha('c'), fork: true, action: 'synchronize' }));
    const third = (await revisionRows(deployment.id)).filter((r) => r.preview_pull_request === 7)[2]!;
    assert.equal(third.secrets.length, 1);
    assert.equal(f.t.secretBox.open(third.secrets[0]!.value), 'production-s3cret');
    assert.equal(third.snapshot.preview?.secrets, true);
  });

  test("a pull request from a branch of the repository itself runs with the deployment's secrets", async () => {
    const deployment = await deploymentWithSecret('same-repo-secrets', 'repo-021');
    await sendPr(prPayload({ repo: 'repo-021', number: 3, head: sha('d') }));
    const preview = (await revisionRows(deployment.id)).find((r) => r.preview_pull_request === 3)!;
    assert.equal(preview.secrets.length, 1);
    assert.equal(preview.snapshot.preview?.from_fork, false);
  });

  test('a pull_request delivery with a bad signature changes nothing', async () => {
    const deployment = await deploymentWithSecret('bad-signature', 'repo-022');
    const before = await revisionRows(deployment.id);
    for (const key of ['not-the-secret', null]) {
      const res = await sendPr(prPayload({ repo: 'repo-022', number: 9, head: sha('e') }), key);
      assert.equal(res.status, 401, JSON.stringify(res.body));
      assert.equal(res.body.code ?? 'webhook_signature_invalid', 'webhook_signature_invalid');
    }
    assert.equal((await revisionRows(deployment.id)).length, before.length);
    assert.deepEqual((await f.api.get(`/v2/deployments/${deployment.id}/previews`)).body.resources, []);
    assert.deepEqual((await f.api.get(`/v2/deployments/${deployment.id}/endpoints`)).body.resources, []);

    // Nor does a forged close remove a preview that exists.
    await sendPr(prPayload({ repo: 'repo-022', number: 9, head: sha('e') }));
    const forged = await sendPr(prPayload({ repo: 'repo-022', number: 9, head: sha('e'), action: 'closed' }), 'wrong');
    assert.equal(forged.status, 401);
    assert.equal((await f.api.get(`/v2/deployments/${deployment.id}/previews`)).body.resources.length, 1);
  });

  test("another workspace's member can neither read nor move a preview or its endpoint", async () => {
    const deployment = await deploymentWithSecret('other-workspace', 'repo-023');
    await sendPr(prPayload({ repo: 'repo-023', number: 11, head: sha('f') }));
    const revision = (await revisionRows(deployment.id)).find((r) => r.preview_pull_request === 11)!;
    await deployAsWorker(revision.id);
    const mine = await f.api.get(`/v2/deployments/${deployment.id}/endpoints/pr-11`);
    assert.equal(mine.status, 200, JSON.stringify(mine.body));

    const other = await otherWorkspace(f, 'intruders');
    const member = await other.api.post('/v2/api-keys', { name: 'intruder', role: 'member' });
    assert.equal(member.status, 201, JSON.stringify(member.body));
    const intruder = client(f.t.app, member.body.key);
    for (const url of [
      `/v2/deployments/${deployment.id}/endpoints/pr-11`,
      `/v2/deployments/${deployment.id}/endpoints`,
      `/v2/deployments/${deployment.id}/previews`,
      `/v2/deployments/${deployment.id}/preview-settings`,
    ]) {
      const res = await intruder.get(url);
      assert.equal(res.status, 404, `${url}: ${JSON.stringify(res.body)}`);
      assert.doesNotMatch(JSON.stringify(res.body), /pr-11|repo-023/);
    }
    const moved = await intruder.put(`/v2/deployments/${deployment.id}/endpoints/pr-11`, {
      revision_id: deployment.latest_revision_id,
    });
    assert.equal(moved.status, 404, JSON.stringify(moved.body));
    assert.equal((await intruder.delete(`/v2/deployments/${deployment.id}/endpoints/pr-11`)).status, 404);
    // A member may change no settings anywhere (403); the other workspace's admin does not see the deployment.
    assert.equal(
      (await intruder.patch(`/v2/deployments/${deployment.id}/preview-settings`, { fork_secrets: true })).status,
      403,
    );
    assert.equal(
      (await other.api.patch(`/v2/deployments/${deployment.id}/preview-settings`, { fork_secrets: true })).status,
      404,
    );
    assert.equal(
      (await other.api.put(`/v2/deployments/${deployment.id}/endpoints/pr-11`, { revision_id: revision.id })).status,
      404,
    );
    const after = await f.api.get(`/v2/deployments/${deployment.id}/endpoints/pr-11`);
    assert.equal(after.body.revision_id, revision.id);
    assert.equal((await f.api.get(`/v2/deployments/${deployment.id}/preview-settings`)).body.fork_secrets, false);
  });
  test("a preview's endpoint is its pull request's: deleting or splitting it by hand is refused, and it stays", async () => {
    const deployment = await deploymentWithSecret('preview-owned', 'repo-024');
    await deployAsWorker(deployment.latest_revision_id);
    await sendPr(prPayload({ repo: 'repo-024', number: 12, head: sha('1') }));
    const revision = (await revisionRows(deployment.id)).find((r) => r.preview_pull_request === 12)!;
    await deployAsWorker(revision.id);
    const url = `/v2/deployments/${deployment.id}/endpoints/pr-12`;
    const deleted = await f.api.delete(url);
    assert.equal(deleted.status, 400, JSON.stringify(deleted.body));
    assert.equal(deleted.body.code, 'endpoint_name_reserved');
    assert.match(deleted.body.detail, /pull request #12/);
    const split = await f.api.put(`${url}/split`, { revision_id: deployment.latest_revision_id, weight: 50 });
    assert.equal(split.status, 400, JSON.stringify(split.body));
    assert.equal(split.body.code, 'endpoint_name_reserved');
    // A name past any pull request number is no preview's: the split service answers it as any other.
    const huge = await f.api.put(`/v2/deployments/${deployment.id}/endpoints/pr-99999999999/split`, {
      revision_id: deployment.latest_revision_id,
      weight: 50,
    });
    assert.equal(huge.status, 404, JSON.stringify(huge.body));
    const still = await f.api.get(url);
    assert.equal(still.status, 200, JSON.stringify(still.body));
    assert.equal(still.body.revision_id, revision.id);
    assert.equal(still.body.split, null);
    const events = (await f.api.get(`/v2/deployments/${deployment.id}/events?limit=100`)).body.resources as {
      type: string;
    }[];
    assert.ok(!events.some((e) => e.type === 'deployment.endpoint_deleted'));
    // Its pull request removes it.
    await sendPr(prPayload({ repo: 'repo-024', number: 12, head: sha('1'), action: 'closed' }));
    assert.equal((await f.api.get(url)).status, 404);
  });

  test("a preview's revision is never put at one of the deployment's own endpoints, split in, or redeployed", async () => {
    const deployment = await deploymentWithSecret('preview-promoted', 'repo-025');
    await deployAsWorker(deployment.latest_revision_id);
    await sendPr(prPayload({ repo: 'repo-025', number: 13, head: sha('2'), fork: true }));
    const revision = (await revisionRows(deployment.id)).find((r) => r.preview_pull_request === 13)!;
    await deployAsWorker(revision.id);
    const endpoints = `/v2/deployments/${deployment.id}/endpoints`;
    const promoted = await f.api.put(`${endpoints}/production`, { revision_id: revision.id });
    assert.equal(promoted.status, 400, JSON.stringify(promoted.body));
    assert.equal(promoted.body.code, 'preview_revision_reserved');
    assert.match(promoted.body.detail, /pull request #13/);
    assert.equal((await f.api.get(`${endpoints}/production`)).status, 404);

    const own = await f.api.put(`${endpoints}/staging`, { revision_id: deployment.latest_revision_id });
    assert.equal(own.status, 201, JSON.stringify(own.body));
    const split = await f.api.put(`${endpoints}/staging/split`, { revision_id: revision.id, weight: 10 });
    assert.equal(split.status, 400, JSON.stringify(split.body));
    assert.equal(split.body.code, 'preview_revision_reserved');
    assert.equal((await f.api.get(`${endpoints}/staging`)).body.split, null);

    const before = await revisionRows(deployment.id);
    const redeployed = await f.api.post(`/v2/deployments/${deployment.id}/revisions/${revision.id}/redeploy`, {});
    assert.equal(redeployed.status, 400, JSON.stringify(redeployed.body));
    assert.equal(redeployed.body.code, 'preview_revision_reserved');
    assert.equal((await revisionRows(deployment.id)).length, before.length);
    const read = (await f.api.get(`/v2/deployments/${deployment.id}`)).body;
    assert.equal(read.latest_revision_id, deployment.latest_revision_id);
  });
});

describe('a preview', () => {
  test("is built without becoming the deployment's latest or active revision, served at pr-<n>, gone on close", async () => {
    const deployment = await deploymentWithSecret('preview-life', 'repo-030');
    const main = deployment.latest_revision_id;
    await deployAsWorker(main);
    const res = await sendPr(prPayload({ repo: 'repo-030', number: 42, head: sha('1') }));
    assert.equal(res.body.outcome, 'revision_created', JSON.stringify(res.body));
    assert.equal(res.body.reason, 'pull_request');
    const previewId: string = res.body.revision_ids[0];
    const read = (await f.api.get(`/v2/deployments/${deployment.id}`)).body;
    assert.equal(read.latest_revision_id, main, 'a preview is never the latest revision');
    assert.equal(read.active_revision_id, main);
    const revision = (await f.api.get(`/v2/deployments/${deployment.id}/revisions/${previewId}`)).body;
    assert.equal(revision.status, 'QUEUED');
    assert.equal(revision.source_revision_config.repo_ref, sha('1'));
    assert.equal(revision.source_revision_config.repo_commit_sha, sha('1'));

    // A push to main supersedes queued revisions of its own, not the preview.
    await deliver(
      f,
      integration.id,
      {
        ref: 'refs/heads/main',
        after: sha('2'),
        deleted: false,
        repository: {
          full_name: 'octo-org/repo-030',
          html_url: `${f.github.webOrigin}/octo-org/repo-030`,
          clone_url: `${f.github.webOrigin}/octo-org/repo-030.git`,
        },
      },
      { secret },
    );
    assert.equal((await f.api.get(`/v2/deployments/${deployment.id}/revisions/${previewId}`)).body.status, 'QUEUED');

    // Replayed under a new delivery id, the same commit builds nothing again.
    const replay = await sendPr(prPayload({ repo: 'repo-030', number: 42, head: sha('1'), action: 'reopened' }));
    assert.equal(replay.body.outcome, 'ignored');
    assert.equal(replay.body.reason, 'commit_already_built');

    await deployAsWorker(previewId);
    const after = (await f.api.get(`/v2/deployments/${deployment.id}`)).body;
    assert.equal(after.active_revision_id, main, 'a DEPLOYED preview does not serve the deployment');
    const endpoint = (await f.api.get(`/v2/deployments/${deployment.id}/endpoints/pr-42`)).body;
    assert.equal(endpoint.revision_id, previewId);

    const closed = await sendPr(
      prPayload({ repo: 'repo-030', number: 42, head: sha('1'), action: 'closed', merged: true }),
    );
    assert.equal(closed.status, 200, JSON.stringify(closed.body));
    assert.equal(closed.body.reason, 'preview_removed');
    assert.equal((await f.api.get(`/v2/deployments/${deployment.id}/endpoints/pr-42`)).status, 404);
    assert.deepEqual((await f.api.get(`/v2/deployments/${deployment.id}/previews`)).body.resources, []);
    const events = (await f.api.get(`/v2/deployments/${deployment.id}/events?limit=100`)).body.resources as {
      type: string;
      data: Record<string, unknown>;
    }[];
    assert.ok(events.some((e) => e.type === 'deployment.preview_built' && e.data.pull_request === 42));
    assert.ok(events.some((e) => e.type === 'deployment.preview_removed' && e.data.merged === true));
  });

  test('closing a pull request interrupts its preview still being built', async () => {
    const deployment = await deploymentWithSecret('preview-close-early', 'repo-031');
    const res = await sendPr(prPayload({ repo: 'repo-031', number: 5, head: sha('3') }));
    const previewId: string = res.body.revision_ids[0];
    await sendPr(prPayload({ repo: 'repo-031', number: 5, head: sha('3'), action: 'closed' }));
    const revision = (await f.api.get(`/v2/deployments/${deployment.id}/revisions/${previewId}`)).body;
    assert.equal(revision.status, 'INTERRUPTED');
    assert.equal(revision.failure_reason, 'pull_request_closed');
  });

  test('over the limit the new pull request is refused with a failure status; the open previews stay', async () => {
    const deployment = await deploymentWithSecret('preview-limit', 'repo-032');
    const limited = await f.api.patch(`/v2/deployments/${deployment.id}/preview-settings`, { max_previews: 1 });
    assert.equal(limited.status, 200, JSON.stringify(limited.body));
    assert.equal(limited.body.effective_max_previews, 1);
    const first = await sendPr(prPayload({ repo: 'repo-032', number: 1, head: sha('4') }));
    assert.equal(first.body.outcome, 'revision_created');
    const second = await sendPr(prPayload({ repo: 'repo-032', number: 2, head: sha('5') }));
    assert.equal(second.body.outcome, 'ignored');
    assert.equal(second.body.reason, 'preview_refused');
    assert.match(second.body.message, /at most 1 previews.*#1/);
    const previews = (await f.api.get(`/v2/deployments/${deployment.id}/previews`)).body.resources;
    assert.deepEqual(
      previews.map((p: { pull_request: number; revision_id: string | null }) => [
        p.pull_request,
        p.revision_id !== null,
      ]),
      [
        [1, true],
        [2, false],
      ],
    );
    // Once #1 closes, #2's next push builds.
    await sendPr(prPayload({ repo: 'repo-032', number: 1, head: sha('4'), action: 'closed' }));
    const again = await sendPr(prPayload({ repo: 'repo-032', number: 2, head: sha('6'), action: 'synchronize' }));
    assert.equal(again.body.outcome, 'revision_created', JSON.stringify(again.body));
    // Out of range is 422 and changes nothing.
    const bad = await f.api.patch(`/v2/deployments/${deployment.id}/preview-settings`, { max_previews: 11 });
    assert.equal(bad.status, 422);
    assert.equal((await f.api.get(`/v2/deployments/${deployment.id}/preview-settings`)).body.max_previews, 1);
  });
  test("over the workspace's quota a new preview is refused with a failure status and an event; an open one still takes new commits", async () => {
    const deployment = await deploymentWithSecret('preview-quota', 'repo-034');
    const org = client(f.t.app, f.t.orgKey);
    const quotaUrl = `/v2/workspaces/${f.t.workspaceId}/quota`;
    const head1 = f.github.setRepositoryFiles('octo-org', 'repo-034', { 'a.txt': '1' }, { branch: 'pr-1' });
    const head2 = f.github.setRepositoryFiles('octo-org', 'repo-034', { 'a.txt': '2' }, { branch: 'pr-2' });
    try {
      // Room for exactly one more copy of the deployment's instance.
      const used = (await f.api.get(`/v2/workspaces/${f.t.workspaceId}`)).body.usage.instances as number;
      const set = await org.patch(quotaUrl, { instances: used + 1 });
      assert.equal(set.status, 200, JSON.stringify(set.body));
      const first = await sendPr(prPayload({ repo: 'repo-034', number: 1, head: head1 }));
      assert.equal(first.body.outcome, 'revision_created', JSON.stringify(first.body));
      // The first preview holds its copy while it builds: the second would go over.
      const second = await sendPr(prPayload({ repo: 'repo-034', number: 2, head: head2 }));
      assert.equal(second.status, 200, JSON.stringify(second.body));
      assert.equal(second.body.outcome, 'ignored', JSON.stringify(second.body));
      assert.equal(second.body.reason, 'preview_refused');
      assert.match(second.body.message, /quota allows \d+ instances/);
      const rows = await revisionRows(deployment.id);
      assert.equal(rows.filter((r) => r.preview_pull_request === 2).length, 0, 'nothing is built for it');
      const previews = (await f.api.get(`/v2/deployments/${deployment.id}/previews`)).body.resources;
      const refused = previews.find((p: { pull_request: number }) => p.pull_request === 2);
      assert.equal(refused.revision_id, null);
      assert.match(refused.refused_message, /quota/);
      const events = (await f.api.get(`/v2/deployments/${deployment.id}/events?limit=100`)).body.resources as {
        type: string;
        data: Record<string, unknown>;
      }[];
      assert.ok(
        events.some(
          (e) =>
            e.type === 'deployment.preview_refused' && e.data.pull_request === 2 && e.data.reason === 'quota_exceeded',
        ),
        JSON.stringify(events.map((e) => [e.type, e.data.reason])),
      );
      const integrations = createCodehostIntegrationService({
        db: f.t.database.db,
        secretBox: f.t.secretBox,
        allowInsecure: true,
        allowedApiUrls: [f.github.url],
        logger: createLogger('silent'),
        clientOptions: { retries: 0 },
      });
      const poster = createPreviewStatusPoster({ db: f.t.database.db, integrations, logger: createLogger('silent') });
      await poster.postDue();
      const status = f.github.statuses.find((s) => s.repo === 'repo-034' && s.sha === head2);
      assert.equal(status?.state, 'failure');
      assert.match(status?.description ?? '', /quota/);

      // The building preview is counted as the deployment's endpoint: scaling the deployment scales it too.
      const scaled = await f.api.patch(`/v2/deployments/${deployment.id}`, {
        source_config: { resource_spec: { min_scale: 2 } },
      });
      assert.equal(scaled.status, 422, JSON.stringify(scaled.body));
      assert.match(scaled.body.detail[0].msg, /this deployment and its 1 endpoint\b/, scaled.body.detail[0].msg);

      // A new commit of the open preview replaces its instances: nothing more, so it builds.
      const head3 = f.github.setRepositoryFiles('octo-org', 'repo-034', { 'a.txt': '3' }, { branch: 'pr-1' });
      const next = await sendPr(prPayload({ repo: 'repo-034', number: 1, head: head3, action: 'synchronize' }));
      assert.equal(next.body.outcome, 'revision_created', JSON.stringify(next.body));
    } finally {
      await org.patch(quotaUrl, { instances: null });
      await sendPr(prPayload({ repo: 'repo-034', number: 1, head: head1, action: 'closed' }));
      await sendPr(prPayload({ repo: 'repo-034', number: 2, head: head2, action: 'closed' }));
    }
  });
});

describe('commit statuses', () => {
  test('go to the pull request as GitHub takes them: pending, then failure for a refusal, each once', async () => {
    const deployment = await deploymentWithSecret('preview-statuses', 'repo-033');
    await f.api.patch(`/v2/deployments/${deployment.id}/preview-settings`, { max_previews: 1 });
    const head1 = f.github.setRepositoryFiles('octo-org', 'repo-033', { 'a.txt': '1' }, { branch: 'pr-1' });
    const head2 = f.github.setRepositoryFiles('octo-org', 'repo-033', { 'a.txt': '2' }, { branch: 'pr-2' });
    await sendPr(prPayload({ repo: 'repo-033', number: 1, head: head1 }));
    await sendPr(prPayload({ repo: 'repo-033', number: 2, head: head2 }));
    const integrations = createCodehostIntegrationService({
      db: f.t.database.db,
      secretBox: f.t.secretBox,
      allowInsecure: true,
      allowedApiUrls: [f.github.url],
      logger: createLogger('silent'),
      clientOptions: { retries: 0 },
    });
    const poster = createPreviewStatusPoster({ db: f.t.database.db, integrations, logger: createLogger('silent') });
    // Only this test's commits exist on the fake: the other tests' previews are refused there (422) and wait.
    const mine = () => f.github.statuses.filter((s) => s.repo === 'repo-033');
    await poster.postDue();
    assert.equal(mine().length, 2);
    await poster.postDue();
    assert.equal(mine().length, 2, 'a state is posted once');
    const of = (sha: string) => mine().find((s) => s.sha === sha)!;
    assert.equal(of(head1).state, 'pending');
    assert.equal(of(head1).context, 'slipway/preview-statuses');
    assert.equal(of(head2).state, 'failure');
    assert.match(of(head2).description ?? '', /at most 1 previews/);
    assert.ok((of(head2).description ?? '').length <= 140);

    // A host that refuses (a token without the statuses permission) is tried again later, not lost.
    await sendPr(prPayload({ repo: 'repo-033', number: 1, head: head1, action: 'closed' }));
    const head3 = f.github.setRepositoryFiles('octo-org', 'repo-033', { 'a.txt': '3' }, { branch: 'pr-2' });
    await sendPr(prPayload({ repo: 'repo-033', number: 2, head: head3, action: 'synchronize' }));
    f.github.failWith({
      status: 403,
      message: 'Resource not accessible by personal access token',
      path: '/repos/octo-org/repo-033/statuses',
      times: 1,
    });
    await poster.postDue();
    assert.equal(mine().length, 2);
    const row = await f.t.database.db
      .selectFrom('pull_request_previews')
      .selectAll()
      .where('deployment_id', '=', deployment.id)
      .where('pull_request', '=', 2)
      .executeTakeFirstOrThrow();
    assert.equal(row.status_attempts, 1);
    assert.ok(row.status_retry_at !== null);
    await f.t.database.db
      .updateTable('pull_request_previews')
      .set({ status_retry_at: new Date(0) })
      .where('deployment_id', '=', deployment.id)
      .execute();
    await poster.postDue();
    assert.equal(mine().length, 3);
    assert.equal(mine().at(-1)!.sha, head3);
    assert.equal(mine().at(-1)!.state, 'pending');
  });

  test('the fake code host answers a bad status as GitHub does', async () => {
    const res = await fetch(`${f.github.url}/repos/octo-org/repo-001/statuses/${sha('9')}`, {
      method: 'POST',
      headers: { authorization: 'token ghp_fixturetoken0123456789abcdefghijkl', 'content-type': 'application/json' },
      body: JSON.stringify({ state: 'done' }),
    });
    assert.equal(res.status, 422);
    const body = (await res.json()) as { message: string; errors: { field: string }[] };
    assert.equal(body.message, 'Validation Failed');
    assert.equal(body.errors[0]!.field, 'state');
    const unknown = await fetch(`${f.github.url}/repos/octo-org/repo-001/statuses/${sha('9')}`, {
      method: 'POST',
      headers: { authorization: 'token ghp_fixturetoken0123456789abcdefghijkl' },
      body: JSON.stringify({ state: 'success' }),
    });
    assert.equal(unknown.status, 422);
    assert.match(((await unknown.json()) as { message: string }).message, /No commit found for SHA/);
  });
});
