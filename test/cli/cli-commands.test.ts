/**
 * The commands around a deployment that a user runs day to day, as a child process against one real
 * service (real HTTP and PostgreSQL, the local data plane building and running the app, a fake GitHub
 * for the code-host integration): `deploy --no-wait` with `--secrets-file`, `logs` (build and app
 * output, `--follow`), `deploy --image --listener`, `interrupt`, `rollback --no-wait`, `--tenant`,
 * and `integrations get|repos|deliveries|rm`.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import path from 'node:path';
import { after, before } from 'node:test';
import { ADMIN_KEY } from '../helpers.ts';
import { requestApp, startTestService, writeApp, type TestService } from '../dataplane/data-plane-harness.ts';
import { makeRepositories, startFakeGitHub, type FakeGitHub } from '../fakes/github-server.ts';
import { newCredential } from '../../src/auth/credentials.ts';
import { signWebhookBody } from '../../src/codehost/webhook-signature.ts';
import { createApiKey } from '../../src/store/tenancy.ts';
import { cliUser, type CliUser } from './cli-runner.ts';
import { test } from '../support/limited-test.ts';

const TOKEN = 'ghp_clitesttoken0123456789abcdefghijklm';
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

let github: FakeGitHub;
let service: TestService;
let user: CliUser;
before(async () => {
  github = await startFakeGitHub({ repositories: makeRepositories(3), tokens: { [TOKEN]: 'all' } });
  service = await startTestService({
    // The fake listens on plain http on loopback, which the default allow-list refuses.
    SLIPWAY_ALLOW_INSECURE_CODEHOST: '1',
    SLIPWAY_CODEHOST_ALLOWED_URLS: github.url,
  });
  user = await cliUser({ SLIPWAY_URL: service.base, SLIPWAY_API_KEY: ADMIN_KEY });
});
after(async () => {
  await user.remove();
  await service.close();
  await github.close();
});

const json = <T = any>(text: string): T => JSON.parse(text) as T;

test('deploy --no-wait with --secrets-file, then logs --build --follow to the end, and the app output', async () => {
  const dir = await writeApp({});
  const secretsFile = path.join(dir, 'prod.env');
  await fs.writeFile(secretsFile, '# the app greets with this\nexport GREETING="hello from\\nthe file"\nKEPT=1\n');
  try {
    const queued = await user.run([
      'deploy',
      'examples/agent-app',
      '--name',
      'nowait-agent',
      '--secrets-file',
      secretsFile,
      '--secret',
      'KEPT=from-the-flag',
      '--no-wait',
    ]);
    assert.equal(queued.code, 0, queued.stderr);
    const revisionId = queued.stdout.trim();
    assert.match(revisionId, UUID, 'stdout is the new revision id only');
    assert.match(queued.stderr, /is queued\. Follow it: slipway logs nowait-agent --build --follow/);

    // Follows the build log until the revision ends, then exits by itself.
    const followed = await user.run(['logs', 'nowait-agent', '--build', '--follow']);
    assert.equal(followed.code, 0, followed.stderr);
    assert.match(followed.stdout, /Build finished/);
    assert.match(followed.stderr, /-- revision DEPLOYED/);
    // The revision has ended: what follows reads it, each command on its own (side by side, as a user's
    // terminals may).
    const [eventsRun, shownRun, appLog, appLinesRun] = await Promise.all([
      user.run(['logs', 'nowait-agent', '--build', '--follow', '--json']),
      user.run(['deployments', 'get', 'nowait-agent', '--json']),
      user.run(['logs', 'nowait-agent']),
      user.run(['logs', 'nowait-agent', '--json']),
    ]);
    const events = eventsRun.stdout
      .trim()
      .split('\n')
      .map((line) => json<{ kind: string; status?: string }>(line));
    assert.deepEqual(events.at(-1), { kind: 'end', status: 'DEPLOYED' });
    assert.ok(events.some((e) => e.kind === 'line'));

    const shown = json(shownRun.stdout);
    assert.equal(shown.latest_revision.id, revisionId);
    assert.deepEqual(shown.secrets.map((s: { name: string }) => s.name).sort(), ['GREETING', 'KEPT']);
    const url = shown.source_config.custom_url as string;
    const home = await requestApp(service, url, '/');
    assert.equal(JSON.parse(home.body).greeting, 'hello from\nthe file', 'the multi-line value from the file');

    // The app's own output (what it printed while starting), of the serving revision.
    assert.equal(appLog.code, 0, appLog.stderr);
    assert.notEqual(appLog.stdout.trim(), '', 'the app wrote something');
    assert.doesNotMatch(appLog.stdout, /Build finished/, 'the app output, not the build log');
    const appLines = appLinesRun.stdout
      .trim()
      .split('\n')
      .map((line) => json<{ kind: string; stream: string }>(line));
    assert.ok(appLines.every((line) => line.kind === 'line'));
    assert.ok(appLines.some((line) => line.stream === 'stdout' || line.stream === 'stderr'));

    const badFile = path.join(dir, 'bad.env');
    await fs.writeFile(badFile, 'OK=1\nNOT A SECRET LINE\n');
    const refused = await user.run([
      'deploy',
      'examples/agent-app',
      '--name',
      'nowait-agent',
      '--secrets-file',
      badFile,
    ]);
    assert.equal(refused.code, 2);
    assert.match(refused.stderr, /bad\.env:2: expected NAME=VALUE/);
    assert.equal(
      json((await user.run(['revisions', 'ls', 'nowait-agent', '--json'])).stdout).length,
      1,
      'nothing sent',
    );
  } finally {
    await fs.rm(dir, { recursive: true, force: true });
  }
});

test('an image on a listener: created queued on the right listener and namespace; interrupt; rollback --no-wait', async () => {
  const registered = await user.run(['listeners', 'create', 'prod-eu-1', '--namespace', 'agents', 'batch']);
  assert.equal(registered.code, 0, registered.stderr);
  const listenerId = registered.stdout.trim();

  const image = 'registry.example.com/agent:1.4';
  const queued = await user.run([
    'deploy',
    '--image',
    image,
    '--listener',
    'prod-eu-1',
    '--namespace',
    'batch',
    '--name',
    'on-cluster',
    '--no-wait',
    '--json',
  ]);
  assert.equal(queued.code, 0, queued.stderr);
  const result = json(queued.stdout);
  assert.equal(result.deployment.source, 'external_container');
  assert.equal(result.deployment.source_config.listener_id, listenerId);
  assert.deepEqual(result.deployment.source_config.listener_config, { k8s_namespace: 'batch' });
  const revisionId = result.revision_id as string;
  // No agent runs on the cluster: the revision waits for one.
  const shown = json((await user.run(['deployments', 'get', 'on-cluster', '--json'])).stdout);
  assert.equal(shown.latest_revision.id, revisionId);
  assert.equal(shown.latest_revision.status, 'QUEUED');
  assert.equal(shown.latest_revision.source_revision_config.image_uri, image);

  // interrupt by the start of the id, with --deployment.
  const interrupted = await user.run(['interrupt', revisionId.slice(0, 8), '-d', 'on-cluster']);
  assert.equal(interrupted.code, 0, interrupted.stderr);
  assert.equal(interrupted.stdout.trim(), `Revision ${revisionId} of on-cluster is INTERRUPTED.`);
  // Its log is over: --follow returns at once with the final state.
  const followed = await user.run(['logs', 'on-cluster', '--build', '--follow', '--json']);
  assert.equal(followed.code, 0, followed.stderr);
  assert.deepEqual(json(followed.stdout.trim().split('\n').at(-1)!), { kind: 'end', status: 'INTERRUPTED' });

  const rolled = await user.run(['rollback', revisionId, '--no-wait']);
  assert.equal(rolled.code, 0, rolled.stderr);
  const newRevision = rolled.stdout.trim();
  assert.match(newRevision, UUID);
  assert.notEqual(newRevision, revisionId);
  assert.match(
    rolled.stderr,
    new RegExp(`Redeploying revision ${revisionId} of on-cluster as revision ${newRevision}`),
  );
  assert.match(rolled.stderr, /Kept: 1 web instance\(s\) \(change with: slipway scale on-cluster\)/);
  // Reads and refused commands, each on its own: side by side.
  const [listed, misuse, unknownListener] = await Promise.all([
    user.run(['revisions', 'ls', 'on-cluster', '--json']),
    user.run(['deploy', '--listener', 'prod-eu-1', '--name', 'x']),
    user.run(['deploy', '--image', image, '--listener', 'nowhere', '--name', 'x']),
  ]);
  const revisions = json<{ id: string; status: string; source_revision_config: { image_uri: string } }[]>(
    listed.stdout,
  );
  assert.deepEqual(
    revisions.map((r) => [r.id, r.status, r.source_revision_config.image_uri]),
    [
      [newRevision, 'QUEUED', image],
      [revisionId, 'INTERRUPTED', image],
    ],
  );

  assert.equal(misuse.code, 2);
  assert.match(misuse.stderr, /--listener needs --image/);
  assert.equal(unknownListener.code, 4, unknownListener.stderr);
});

test('an organization key with several workspaces: a clear message, then --tenant or SLIPWAY_TENANT_ID picks one', async () => {
  // The first start's organization key (the bootstrap key is a workspace key and may not make one).
  const { workspace_id: firstWorkspace } = await service.database.db
    .selectFrom('deployments')
    .select('workspace_id')
    .where('name', '=', 'on-cluster')
    .executeTakeFirstOrThrow();
  const { organization_id: organizationId } = await service.database.db
    .selectFrom('workspaces')
    .select('organization_id')
    .where('id', '=', firstWorkspace)
    .executeTakeFirstOrThrow();
  const { value: orgKey, hash: orgKeyHash, prefix: orgKeyPrefix } = newCredential('apiKey');
  await createApiKey(service.database.db, {
    organizationId,
    workspaceId: null,
    name: 'org-admin',
    role: 'admin',
    hash: orgKeyHash,
    prefix: orgKeyPrefix,
  });
  const made = await fetch(`${service.base}/v2/workspaces`, {
    method: 'POST',
    headers: { 'x-api-key': orgKey, 'x-tenant-id': firstWorkspace, 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'staging' }),
  });
  assert.equal(made.status, 201, await made.clone().text());
  const secondWorkspace = ((await made.json()) as { id: string }).id;

  const org = { env: { SLIPWAY_API_KEY: orgKey } };
  // Three reads, each on its own: side by side.
  const [ambiguous, first, second] = await Promise.all([
    user.run(['deployments', 'ls'], org),
    user.run(['deployments', 'ls', '--tenant', firstWorkspace, '--json'], org),
    user.run(['--json', 'deployments', 'ls'], { env: { SLIPWAY_API_KEY: orgKey, SLIPWAY_TENANT_ID: secondWorkspace } }),
  ]);
  assert.equal(ambiguous.code, 2, ambiguous.stderr);
  assert.match(ambiguous.stderr, /error: this organization key has several workspaces: name one/);
  assert.match(ambiguous.stderr, /--tenant <workspace id>/);

  assert.equal(first.code, 0, first.stderr);
  assert.ok(json<{ name: string }[]>(first.stdout).some((d) => d.name === 'on-cluster'));
  assert.equal(second.code, 0, second.stderr);
  assert.deepEqual(json(second.stdout), [], 'the new workspace has no deployments');
});

test('integrations get, repos, deliveries and rm', async () => {
  const createdResponse = await fetch(`${service.base}/v1/integrations/forge/codehost`, {
    method: 'POST',
    headers: { 'x-api-key': ADMIN_KEY, 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'github-cli', api_url: github.url, token: TOKEN }),
  });
  assert.equal(createdResponse.status, 201, await createdResponse.clone().text());
  const created = (await createdResponse.json()) as { id: string; webhook_secret: string };

  // Reads, each on its own: side by side.
  const [shown, shownJson, repos, none] = await Promise.all([
    user.run(['integrations', 'get', 'github-cli']),
    user.run(['integrations', 'get', created.id, '--json']),
    user.run(['integrations', 'repos', 'github-cli']),
    user.run(['integrations', 'deliveries', 'github-cli']),
  ]);
  assert.equal(shown.code, 0, shown.stderr);
  assert.match(shown.stdout, new RegExp(`^id:\\s+${created.id}$`, 'm'));
  assert.match(shown.stdout, /^kind:\s+token$/m);
  assert.match(shown.stdout, new RegExp(`^api url:\\s+${github.url}`, 'm'));
  assert.ok(!shown.stdout.includes(TOKEN) && !shown.stdout.includes(created.webhook_secret), 'no credential shown');
  assert.equal(json(shownJson.stdout).name, 'github-cli');

  assert.equal(repos.code, 0, repos.stderr);
  const repoLines = repos.stdout.trim().split('\n');
  assert.match(repoLines[0]!, /^REPOSITORY\s+DEFAULT BRANCH\s+URL/);
  assert.deepEqual(
    repoLines
      .slice(1)
      .map((line) => line.split(/\s+/)[0])
      .sort(),
    ['octo-org/repo-001', 'octo-org/repo-002', 'octo-org/repo-003'],
  );

  assert.equal(none.code, 0, none.stderr);
  assert.match(none.stderr, /No deliveries\./);
  const body = JSON.stringify({
    ref: 'refs/heads/main',
    after: 'c0ffee'.padEnd(40, '1'),
    repository: {
      full_name: 'octo-org/repo-002',
      html_url: `${github.webOrigin}/octo-org/repo-002`,
      clone_url: `${github.webOrigin}/octo-org/repo-002.git`,
    },
  });
  const delivered = await fetch(`${service.base}/v1/integrations/forge/codehost/${created.id}/webhooks`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      'x-github-event': 'push',
      'x-github-delivery': 'delivery-from-the-cli-test',
      'x-hub-signature-256': signWebhookBody(created.webhook_secret, body),
    },
    body,
  });
  // No deployment uses that repository: the service answers so, and records the delivery all the same.
  assert.equal(delivered.status, 404, await delivered.text());
  const [deliveriesJson, table] = await Promise.all([
    user.run(['integrations', 'deliveries', 'github-cli', '--json']),
    user.run(['integrations', 'deliveries', 'github-cli']),
  ]);
  const deliveries = json<{ repository: string | null; ref: string | null }[]>(deliveriesJson.stdout);
  assert.equal(deliveries.length, 1);
  assert.match(deliveries[0]!.repository ?? '', /repo-002/);
  assert.match(table.stdout, /^RECEIVED\s+OUTCOME\s+REPOSITORY\s+REF\s+REASON/);
  assert.match(table.stdout, /repo-002/);

  const unconfirmed = await user.run(['integrations', 'rm', 'github-cli']);
  assert.equal(unconfirmed.code, 2, 'not a terminal: --yes is required');
  assert.match(unconfirmed.stderr, /not deleted \(confirm with --yes\)/);
  const removed = await user.run(['integrations', 'rm', 'github-cli', '--yes']);
  assert.equal(removed.code, 0, removed.stderr);
  assert.equal(removed.stdout.trim(), 'Deleted integration github-cli.');
  const gone = await user.run(['integrations', 'get', 'github-cli']);
  assert.equal(gone.code, 4, gone.stderr);
});
