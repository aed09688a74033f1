/**
 * Push webhooks with real HMAC signatures: a signed push to a tracked branch creates exactly one
 * revision; redeliveries, forgeries and pushes that build nothing change nothing but the delivery log.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { DELIVERIES_KEPT, REJECTED_DELIVERIES_KEPT } from '../../src/store/webhook-deliveries.ts';
import { client } from '../support/harness.ts';
import {
  createCodehostDeployment,
  createTokenIntegration,
  deliver,
  otherWorkspace,
  pushPayload,
  revisionsOf,
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

const BASE = '/v1/integrations/forge/codehost';
const sha = (digit: string): string => digit.repeat(40);

async function deliveries(integrationId = integration.id) {
  const res = await f.api.get(`${BASE}/${integrationId}/deliveries?limit=100`);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body.resources as {
    delivery_id: string;
    outcome: string;
    reason: string;
    message: string;
    revision_ids: string[];
    commit_sha: string | null;
    ref: string | null;
    repository: string | null;
  }[];
}

async function revisionCount(): Promise<number> {
  const row = await f.t.database.db
    .selectFrom('revisions')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

describe('a signed push', () => {
  test('to the tracked branch creates exactly one revision recording the pushed commit', async () => {
    const deployment = await createCodehostDeployment(f, integration.id, 'push-main', { repo: 'repo-010' });
    const res = await deliver(f, integration.id, pushPayload(f, { repo: 'repo-010', after: sha('a') }), {
      secret,
      deliveryId: 'delivery-push-1',
    });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.equal(res.body.outcome, 'revision_created');
    assert.equal(res.body.reason, 'push');
    assert.equal(res.body.delivery_id, 'delivery-push-1');
    assert.equal(res.body.commit_sha, sha('a'));
    assert.equal(res.body.revision_ids.length, 1);

    const revisions = await revisionsOf(f, deployment.id);
    assert.equal(revisions.length, 2);
    const newest = revisions[0]!;
    assert.equal(newest.id, res.body.revision_ids[0]);
    assert.equal(newest.source_revision_config.repo_commit_sha, sha('a'));
    assert.equal(newest.source_revision_config.repo_ref, 'main');
    assert.equal(newest.source_revision_config.framework_config_path, 'agent.json');
    const read = await f.api.get(`/v2/deployments/${deployment.id}`);
    assert.equal(read.body.latest_revision_id, newest.id);
    assert.equal(read.body.source_revision_config.repo_commit_sha, sha('a'));

    // The revision's event names the push that caused it.
    const created = await f.t.database.db
      .selectFrom('events')
      .select('data')
      .where('subject_id', '=', newest.id)
      .where('type', '=', 'revision.created')
      .executeTakeFirstOrThrow();
    assert.deepEqual(created.data, {
      cause: 'push',
      integration_id: integration.id,
      delivery_id: 'delivery-push-1',
      ref: 'refs/heads/main',
      commit_sha: sha('a'),
    });
  });

  test('a redelivery of the same delivery id creates nothing new and is recorded as a duplicate', async () => {
    const deployment = await createCodehostDeployment(f, integration.id, 'redelivered', { repo: 'repo-011' });
    const payload = pushPayload(f, { repo: 'repo-011', after: sha('b') });
    const first = await deliver(f, integration.id, payload, { secret, deliveryId: 'delivery-redeliver' });
    assert.equal(first.body.outcome, 'revision_created');
    const count = await revisionCount();

    const again = await deliver(f, integration.id, payload, { secret, deliveryId: 'delivery-redeliver' });
    assert.equal(again.status, 200);
    assert.equal(again.body.outcome, 'duplicate');
    assert.equal(again.body.reason, 'redelivery');
    assert.deepEqual(again.body.revision_ids, first.body.revision_ids);
    assert.equal(await revisionCount(), count);
    assert.equal((await revisionsOf(f, deployment.id)).length, 2);
  });

  test('concurrent redeliveries of one delivery create one revision', async () => {
    const deployment = await createCodehostDeployment(f, integration.id, 'concurrent', { repo: 'repo-012' });
    const payload = pushPayload(f, { repo: 'repo-012', after: sha('c') });
    const results = await Promise.all(
      Array.from({ length: 5 }, () =>
        deliver(f, integration.id, payload, { secret, deliveryId: 'delivery-concurrent' }),
      ),
    );
    assert.deepEqual(
      results.map((r) => r.status),
      [200, 200, 200, 200, 200],
    );
    assert.deepEqual(results.map((r) => r.body.outcome).sort(), [
      'duplicate',
      'duplicate',
      'duplicate',
      'duplicate',
      'revision_created',
    ]);
    assert.equal((await revisionsOf(f, deployment.id)).length, 2);
  });

  test('builds every build_on_push deployment that tracks the branch, and only those', async () => {
    const a = await createCodehostDeployment(f, integration.id, 'shared-a', { repo: 'repo-013' });
    const b = await createCodehostDeployment(f, integration.id, 'shared-b', {
      repo: 'repo-013',
      ref: 'refs/heads/main',
    });
    const staging = await createCodehostDeployment(f, integration.id, 'shared-staging', {
      repo: 'repo-013',
      ref: 'staging',
    });
    const manual = await createCodehostDeployment(f, integration.id, 'shared-manual', {
      repo: 'repo-013',
      buildOnPush: false,
    });
    const res = await deliver(f, integration.id, pushPayload(f, { repo: 'repo-013', after: sha('d') }), { secret });
    assert.equal(res.body.outcome, 'revision_created');
    assert.equal(res.body.revision_ids.length, 2);
    assert.equal((await revisionsOf(f, a.id)).length, 2);
    assert.equal((await revisionsOf(f, b.id)).length, 2);
    assert.equal((await revisionsOf(f, b.id))[0]!.source_revision_config.repo_ref, 'refs/heads/main');
    assert.equal((await revisionsOf(f, staging.id)).length, 1);
    assert.equal((await revisionsOf(f, manual.id)).length, 1);
  });

  test('a captured push replayed under another delivery id builds nothing, and cannot roll back', async () => {
    const deployment = await createCodehostDeployment(f, integration.id, 'replayed', { repo: 'repo-015' });
    const older = pushPayload(f, { repo: 'repo-015', after: sha('3') });
    assert.equal((await deliver(f, integration.id, older, { secret })).body.outcome, 'revision_created');
    assert.equal(
      (await deliver(f, integration.id, pushPayload(f, { repo: 'repo-015', after: sha('4') }), { secret })).body
        .outcome,
      'revision_created',
    );

    const replay = await deliver(f, integration.id, older, { secret, deliveryId: 'a-fresh-delivery-id' });
    assert.equal(replay.status, 200);
    assert.equal(replay.body.outcome, 'ignored');
    assert.equal(replay.body.reason, 'commit_already_built');
    assert.match(replay.body.message, /redeploy that revision/);
    const revisions = await revisionsOf(f, deployment.id);
    assert.equal(revisions.length, 3);
    assert.equal(revisions[0]!.source_revision_config.repo_commit_sha, sha('4'));
  });

  test('one push sent by two webhooks at once (repository and organization) builds once', async () => {
    const deployment = await createCodehostDeployment(f, integration.id, 'two-webhooks', { repo: 'repo-016' });
    const payload = pushPayload(f, { repo: 'repo-016', after: sha('5') });
    const [a, b] = await Promise.all([
      deliver(f, integration.id, payload, { secret }),
      deliver(f, integration.id, payload, { secret }),
    ]);
    assert.deepEqual([a.body.outcome, b.body.outcome].sort(), ['ignored', 'revision_created']);
    assert.equal((await revisionsOf(f, deployment.id)).length, 2);
  });

  test('a forged delivery does not block the real delivery of the same id', async () => {
    const deployment = await createCodehostDeployment(f, integration.id, 'forged-first', { repo: 'repo-014' });
    const payload = pushPayload(f, { repo: 'repo-014', after: sha('7') });
    const forged = await deliver(f, integration.id, payload, { secret: 'forger', deliveryId: 'delivery-forged' });
    assert.equal(forged.status, 401);
    assert.equal((await revisionsOf(f, deployment.id)).length, 1);
    const real = await deliver(f, integration.id, payload, { secret, deliveryId: 'delivery-forged' });
    assert.equal(real.body.outcome, 'revision_created');
    assert.equal((await revisionsOf(f, deployment.id)).length, 2);
  });
});

describe('pushes that build nothing are recorded as ignored', () => {
  test('a push to another branch', async () => {
    const deployment = await createCodehostDeployment(f, integration.id, 'ignores-feature', { repo: 'repo-020' });
    const res = await deliver(f, integration.id, pushPayload(f, { repo: 'repo-020', ref: 'refs/heads/feature/x' }), {
      secret,
    });
    assert.equal(res.status, 200);
    assert.equal(res.body.outcome, 'ignored');
    assert.equal(res.body.reason, 'branch_not_tracked');
    assert.match(res.body.message, /tracks branch feature\/x \('ignores-feature' tracks main\)/);
    assert.equal((await revisionsOf(f, deployment.id)).length, 1);
  });

  test('a tag push', async () => {
    const deployment = await createCodehostDeployment(f, integration.id, 'ignores-tag', { repo: 'repo-021' });
    const res = await deliver(f, integration.id, pushPayload(f, { repo: 'repo-021', ref: 'refs/tags/v1.0.0' }), {
      secret,
    });
    assert.equal(res.body.outcome, 'ignored');
    assert.equal(res.body.reason, 'tag');
    assert.equal((await revisionsOf(f, deployment.id)).length, 1);
  });

  test('a deleted branch', async () => {
    const deployment = await createCodehostDeployment(f, integration.id, 'ignores-delete', { repo: 'repo-022' });
    const res = await deliver(
      f,
      integration.id,
      pushPayload(f, { repo: 'repo-022', after: '0'.repeat(40), deleted: true }),
      { secret },
    );
    assert.equal(res.body.outcome, 'ignored');
    assert.equal(res.body.reason, 'branch_deleted');
    assert.equal((await revisionsOf(f, deployment.id)).length, 1);
  });

  test('a push to a repository whose deployments do not build on push', async () => {
    const deployment = await createCodehostDeployment(f, integration.id, 'no-build-on-push', {
      repo: 'repo-023',
      buildOnPush: false,
    });
    const res = await deliver(f, integration.id, pushPayload(f, { repo: 'repo-023' }), { secret });
    assert.equal(res.body.outcome, 'ignored');
    assert.equal(res.body.reason, 'build_on_push_off');
    assert.equal((await revisionsOf(f, deployment.id)).length, 1);
  });

  test('an ignored delivery redelivered after the deployment was fixed builds', async () => {
    const deployment = await createCodehostDeployment(f, integration.id, 'fixed-later', {
      repo: 'repo-024',
      buildOnPush: false,
    });
    const payload = pushPayload(f, { repo: 'repo-024', after: sha('e') });
    assert.equal(
      (await deliver(f, integration.id, payload, { secret, deliveryId: 'delivery-fixed' })).body.outcome,
      'ignored',
    );
    assert.equal(
      (await f.api.patch(`/v2/deployments/${deployment.id}`, { source_config: { build_on_push: true } })).status,
      200,
    );
    const again = await deliver(f, integration.id, payload, { secret, deliveryId: 'delivery-fixed' });
    assert.equal(again.body.outcome, 'revision_created');
    assert.equal((await revisionsOf(f, deployment.id))[0]!.source_revision_config.repo_commit_sha, sha('e'));
  });

  test('a ping, and events other than push', async () => {
    const ping = await deliver(
      f,
      integration.id,
      { zen: 'Keep it logically awesome.', hook_id: 1 },
      { secret, event: 'ping' },
    );
    assert.equal(ping.status, 200);
    assert.equal(ping.body.outcome, 'ignored');
    assert.equal(ping.body.reason, 'ping');
    const issue = await deliver(f, integration.id, { action: 'opened' }, { secret, event: 'issues' });
    assert.equal(issue.status, 200);
    assert.equal(issue.body.reason, 'event_not_handled');
  });
});

describe('refused deliveries change nothing', () => {
  let deploymentId: string;
  const payload = () => pushPayload(f, { repo: 'repo-030', after: sha('f') });

  before(async () => {
    deploymentId = (await createCodehostDeployment(f, integration.id, 'guarded', { repo: 'repo-030' })).id;
  });

  async function assertRefused(
    res: Awaited<ReturnType<typeof deliver>>,
    status: number,
    reason: string,
  ): Promise<void> {
    assert.equal(res.status, status, JSON.stringify(res.body));
    assert.equal((await revisionsOf(f, deploymentId)).length, 1);
    const latest = (await deliveries())[0]!;
    assert.equal(latest.outcome, 'rejected');
    assert.equal(latest.reason, reason);
  }

  test('a tampered body', async () => {
    const signed = JSON.stringify(payload());
    const tampered = signed.replace(sha('f'), sha('9'));
    const res = await deliver(f, integration.id, tampered, { secret, signedBody: signed });
    await assertRefused(res, 401, 'signature_mismatch');
    assert.equal(res.body.code, 'webhook_signature_invalid');
  });

  test('a body signed with another secret', async () => {
    await assertRefused(
      await deliver(f, integration.id, payload(), { secret: 'not-the-webhook-secret' }),
      401,
      'signature_mismatch',
    );
  });

  test('an unsigned body', async () => {
    const res = await deliver(f, integration.id, payload(), { secret: null });
    await assertRefused(res, 401, 'signature_missing');
    assert.match(res.body.detail, /X-Hub-Signature-256 header is missing/);
  });

  test('a malformed signature header', async () => {
    await assertRefused(
      await deliver(f, integration.id, payload(), { secret: null, headers: { 'x-hub-signature-256': 'sha1=abc' } }),
      401,
      'signature_malformed',
    );
  });

  test('a body that is not JSON', async () => {
    const res = await deliver(f, integration.id, '{"ref": "refs/heads/main"', { secret });
    await assertRefused(res, 400, 'malformed_payload');
  });

  test('a push payload without the fields a push has', async () => {
    const res = await deliver(
      f,
      integration.id,
      { ref: 'refs/heads/main', repository: { full_name: 'octo-org/repo-030' } },
      { secret },
    );
    await assertRefused(res, 400, 'malformed_payload');
    assert.match(res.body.detail, /after is required/);
  });

  test('a push payload with a NUL character in a ref', async () => {
    await assertRefused(
      await deliver(f, integration.id, pushPayload(f, { repo: 'repo-030', ref: 'refs/heads/ma\u0000in' }), { secret }),
      400,
      'malformed_payload',
    );
  });

  test('a push without X-GitHub-Event or X-GitHub-Delivery', async () => {
    await assertRefused(await deliver(f, integration.id, payload(), { secret, event: null }), 400, 'missing_event');
    await assertRefused(
      await deliver(f, integration.id, payload(), { secret, headers: { 'x-github-delivery': '' } }),
      400,
      'missing_delivery_id',
    );
  });

  test('a push for a repository no deployment of the integration uses', async () => {
    const res = await deliver(f, integration.id, pushPayload(f, { repo: 'repo-099' }), { secret });
    await assertRefused(res, 404, 'unknown_repository');
    assert.match(res.body.detail, /No codehost deployment of this integration uses the repository octo-org\/repo-099/);
  });

  test('a push naming a tracked repository on another host', async () => {
    const forged = payload();
    forged.repository = {
      full_name: 'octo-org/repo-030',
      html_url: 'https://github.com/octo-org/repo-030',
      clone_url: 'https://github.com/octo-org/repo-030.git',
    };
    await assertRefused(await deliver(f, integration.id, forged, { secret }), 404, 'unknown_repository');
  });

  test('a delivery for an unknown integration: 404, nothing recorded', async () => {
    const before = await revisionCount();
    const res = await deliver(f, '00000000-0000-4000-8000-000000000000', payload(), { secret });
    assert.equal(res.status, 404);
    assert.equal(await revisionCount(), before);
    const malformed = await deliver(f, 'not-a-uuid', payload(), { secret });
    assert.equal(malformed.status, 422);
  });

  test("another integration's secret does not sign for this one", async () => {
    const other = await createTokenIntegration(f, 'second');
    await assertRefused(
      await deliver(f, integration.id, payload(), { secret: other.webhook_secret }),
      401,
      'signature_mismatch',
    );
  });

  test('a body that is not JSON-typed is 415 before anything else', async () => {
    const res = await f.t.app.inject({
      method: 'POST',
      url: `${BASE}/${integration.id}/webhooks`,
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      payload: 'payload=%7B%7D',
    });
    assert.equal(res.statusCode, 415);
  });
});

describe('deliveries', () => {
  test("are listed newest first with outcome and reason, in the caller's workspace only", async () => {
    const own = await createTokenIntegration(f, 'deliveries-list');
    await createCodehostDeployment(f, own.id, 'listed-deliveries', { repo: 'repo-040' });
    await deliver(f, own.id, pushPayload(f, { repo: 'repo-040', after: sha('1') }), {
      secret: own.webhook_secret,
      deliveryId: 'd-built',
    });
    await deliver(f, own.id, pushPayload(f, { repo: 'repo-040', ref: 'refs/tags/v2' }), {
      secret: own.webhook_secret,
      deliveryId: 'd-tag',
    });
    await deliver(f, own.id, pushPayload(f, { repo: 'repo-040' }), { secret: 'wrong-secret', deliveryId: 'd-forged' });
    await deliver(f, own.id, pushPayload(f, { repo: 'repo-040', after: sha('1') }), {
      secret: own.webhook_secret,
      deliveryId: 'd-built',
    });

    const list = await deliveries(own.id);
    assert.deepEqual(
      list.map((d) => [d.delivery_id, d.outcome, d.reason]),
      [
        ['d-built', 'duplicate', 'redelivery'],
        ['d-forged', 'rejected', 'signature_mismatch'],
        ['d-tag', 'ignored', 'tag'],
        ['d-built', 'revision_created', 'push'],
      ],
    );
    assert.equal(list[3]!.repository, 'octo-org/repo-040');
    assert.equal(list[3]!.commit_sha, sha('1'));
    assert.equal(list[3]!.revision_ids.length, 1);
    const page = await f.api.get(`${BASE}/${own.id}/deliveries?limit=1&offset=1`);
    assert.equal(page.body.resources[0].delivery_id, 'd-forged');
    assert.equal(page.body.offset, 2);
    assert.equal(JSON.stringify(list).includes(own.webhook_secret), false);

    const other = await otherWorkspace(f, 'nosy');
    assert.equal((await other.api.get(`${BASE}/${own.id}/deliveries`)).status, 404);
    assert.equal((await client(f.t.app, null).get(`${BASE}/${own.id}/deliveries`)).status, 401);
  });

  test('a flood of forged deliveries cannot push real ones out of the history', async () => {
    const own = await createTokenIntegration(f, 'flooded');
    await createCodehostDeployment(f, own.id, 'flooded-app', { repo: 'repo-041' });
    const real = await deliver(f, own.id, pushPayload(f, { repo: 'repo-041', after: sha('7') }), {
      secret: own.webhook_secret,
      deliveryId: 'd-real',
    });
    assert.equal(real.body.outcome, 'revision_created');
    const ping = await deliver(
      f,
      own.id,
      { zen: 'hi' },
      { event: 'ping', secret: own.webhook_secret, deliveryId: 'd-ping' },
    );
    assert.equal(ping.body.outcome, 'ignored');

    // Anyone who knows the webhook URL can send these: more of them than the whole history holds.
    const forged = DELIVERIES_KEPT + 20;
    for (let sent = 0; sent < forged; sent += 20) {
      const batch = await Promise.all(
        Array.from({ length: 20 }, (_, i) =>
          deliver(f, own.id, pushPayload(f, { repo: 'repo-041', after: sha('8') }), {
            secret: null,
            deliveryId: `forged-${sent + i}`,
          }),
        ),
      );
      for (const res of batch) assert.equal(res.status, 401);
    }

    const kept: { delivery_id: string; outcome: string }[] = [];
    for (let offset = 0; ; offset += 100) {
      const page = await f.api.get(`${BASE}/${own.id}/deliveries?limit=100&offset=${offset}`);
      kept.push(...page.body.resources);
      if (page.body.resources.length < 100) break;
    }
    const ids = kept.filter((d) => d.outcome !== 'rejected').map((d) => d.delivery_id);
    assert.deepEqual(ids, ['d-ping', 'd-real'], 'the real deliveries are still listed');
    const rejected = kept.filter((d) => d.outcome === 'rejected');
    assert.equal(rejected.length, REJECTED_DELIVERIES_KEPT, 'rejected deliveries are kept under their own cap');
    assert.ok(
      Number(rejected[0]!.delivery_id.replace('forged-', '')) >= forged - 20,
      'the newest rejected ones are kept',
    );
  });
});
