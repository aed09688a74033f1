/**
 * Pull-request previews on the own data plane, end to end (docs/codehost.md, "Pull-request previews"): a
 * signed `pull_request` webhook over real HTTP builds the head commit (fetched from a fake GitHub serving
 * real tarballs), the preview answers at `<slug>--pr-<n>` while the deployment's own URL keeps its revision,
 * the fake code host records the commit statuses pending then success with the preview's URL, a fork's
 * preview runs without the deployment's secret, database and agent credential, and the close webhook takes
 * the preview away.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before } from 'node:test';
import { signWebhookBody } from '../../src/codehost/webhook-signature.ts';
import { createLogger } from '../../src/logger.ts';
import { createCodehostIntegrationService } from '../../src/service/codehost-integrations.ts';
import { createPreviewStatusPoster, startPreviewStatusPoster } from '../../src/service/preview-statuses.ts';
import { makeRepositories, startFakeGitHub, type FakeGitHub } from '../fakes/github-server.ts';
import { eventually } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';
import { requestApp, startTestService, waitForRevision, type TestService } from './data-plane-harness.ts';

const TOKEN = 'ghp_previewtoken0123456789abcdefghijkl';
let github: FakeGitHub;
let service: TestService;
let poster: { stop(): Promise<void> };

before(async () => {
  github = await startFakeGitHub({ repositories: makeRepositories(2), tokens: { [TOKEN]: 'all' } });
  service = await startTestService({ SLIPWAY_ALLOW_INSECURE_CODEHOST: '1', SLIPWAY_CODEHOST_ALLOWED_URLS: github.url });
  // The poster main.ts runs beside the API, on this service's database and change feed.
  const integrations = createCodehostIntegrationService({
    db: service.database.db,
    secretBox: service.secretBox,
    allowInsecure: true,
    allowedApiUrls: [github.url],
    logger: createLogger('silent'),
    clientOptions: { retries: 0 },
  });
  poster = startPreviewStatusPoster({
    poster: createPreviewStatusPoster({ db: service.database.db, integrations, logger: createLogger('silent') }),
    changes: service.changes,
    logger: createLogger('silent'),
    intervalMs: 500,
  });
});
after(async () => {
  await poster?.stop();
  await service?.close();
  await github?.close();
});

/** The app tells what it runs with, never a value but the test's marker secret. */
const files = (version: string) => ({
  'package.json': JSON.stringify({ name: 'preview-app', private: true, scripts: { start: 'node server.js' } }),
  'server.js': `require('node:http').createServer((q, s) => { s.setHeader('content-type', 'application/json'); s.end(JSON.stringify({
    version: ${JSON.stringify(version)},
    secret: process.env.MY_SECRET ?? null,
    database: Boolean(process.env.DATABASE_URL),
    credential: Boolean(process.env.SLIPWAY_AGENT_CREDENTIAL),
  })); }).listen(Number(process.env.PORT), process.env.HOST);`,
  'slipway.json': JSON.stringify({ database: true }),
});

async function deliver(integrationId: string, secret: string, event: string, payload: unknown) {
  const raw = JSON.stringify(payload);
  const response = await fetch(`${service.base}/v1/integrations/forge/codehost/${integrationId}/webhooks`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      'x-github-event': event,
      'x-github-delivery': randomUUID(),
      'x-hub-signature-256': signWebhookBody(secret, raw),
    },
    body: raw,
  });
  return { status: response.status, body: (await response.json()) as Record<string, any> };
}

function prPayload(number: number, head: string, action: string, fork = false) {
  const base = `${github.webOrigin}/octo-org/repo-001`;
  const headUrl = fork ? `${github.webOrigin}/mallory/repo-001` : base;
  const repo = (url: string, owner: string) => ({
    name: 'repo-001',
    full_name: `${owner}/repo-001`,
    html_url: url,
    clone_url: `${url}.git`,
  });
  return {
    action,
    number,
    pull_request: {
      number,
      merged: false,
      head: { sha: head, ref: 'feature', repo: repo(headUrl, fork ? 'mallory' : 'octo-org') },
      base: { sha: '0'.repeat(40), ref: 'main', repo: repo(base, 'octo-org') },
    },
    repository: repo(base, 'octo-org'),
  };
}

async function json(url: string) {
  const answer = await requestApp(service, url, '/');
  return answer.status === 200 ? (JSON.parse(answer.body) as Record<string, unknown>) : { status: answer.status };
}

test('a preview appears for a pull request, answers at its URL with statuses pending then success, and goes on close', async () => {
  github.setRepositoryFiles('octo-org', 'repo-001', files('main'), { branch: 'main' });
  const integration = await service.api('POST', '/v1/integrations/forge/codehost', {
    name: 'github',
    api_url: github.url,
    token: TOKEN,
  });
  assert.equal(integration.status, 201, JSON.stringify(integration.body));
  const secret: string = integration.body.webhook_secret;
  const created = await service.api('POST', '/v2/deployments', {
    name: 'reviewed-agent',
    source: 'codehost',
    source_config: {
      integration_id: integration.body.id,
      repo_url: `${github.webOrigin}/octo-org/repo-001`,
      build_on_push: true,
    },
    source_revision_config: { repo_ref: 'main', framework_config_path: 'slipway.json' },
    secrets: [{ name: 'MY_SECRET', value: 'production-only' }],
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const id: string = created.body.id;
  const main = await waitForRevision(service, id, created.body.latest_revision_id);
  assert.equal(main.status, 'DEPLOYED', JSON.stringify(main));
  const stableUrl: string = (await service.api('GET', `/v2/deployments/${id}`)).body.source_config.custom_url;
  assert.deepEqual(await json(stableUrl), {
    version: 'main',
    secret: 'production-only',
    database: true,
    credential: true,
  });

  // The pull request's head commit (GitHub serves a pull request's commits from the base repository too).
  const head = github.setRepositoryFiles('octo-org', 'repo-001', files('feature'), { branch: 'feature' });
  const opened = await deliver(integration.body.id, secret, 'pull_request', prPayload(12, head, 'opened'));
  assert.equal(opened.status, 200, JSON.stringify(opened.body));
  assert.equal(opened.body.outcome, 'revision_created', JSON.stringify(opened.body));
  const previewId: string = opened.body.revision_ids[0];
  const built = await waitForRevision(service, id, previewId);
  assert.equal(built.status, 'DEPLOYED', JSON.stringify(built));

  const preview = await eventually('the preview to be served at pr-12', async () => {
    const got = await service.api('GET', `/v2/deployments/${id}/endpoints/pr-12`);
    return got.status === 200 && got.body.served_revision_id === previewId && got.body;
  });
  assert.match(preview.url, /--pr-12\./);
  assert.deepEqual(await json(preview.url), {
    version: 'feature',
    secret: 'production-only',
    database: true,
    credential: true,
  });
  // The deployment's own URL and active revision stay where they were.
  assert.equal((await json(stableUrl)).version, 'main');
  const deployment = (await service.api('GET', `/v2/deployments/${id}`)).body;
  assert.equal(deployment.active_revision_id, main.id);
  assert.equal(deployment.latest_revision_id, main.id);

  const statuses = await eventually('pending then success on the head commit', () => {
    const mine = github.statuses.filter((s) => s.sha === head);
    return mine.some((s) => s.state === 'success') && mine;
  });
  assert.deepEqual(
    statuses.map((s) => s.state),
    ['pending', 'success'],
  );
  assert.equal(statuses[1]!.target_url, preview.url);
  assert.equal(statuses[1]!.context, 'slipway/reviewed-agent');
  assert.equal(statuses[1]!.repo, 'repo-001');

  // A fork's pull request: its code runs without the secret, the database and the agent credential.
  const forkHead = github.setRepositoryFiles('octo-org', 'repo-001', files('from-fork'), { branch: 'pull/13/head' });
  const forked = await deliver(integration.body.id, secret, 'pull_request', prPayload(13, forkHead, 'opened', true));
  assert.equal(forked.body.outcome, 'revision_created', JSON.stringify(forked.body));
  const forkRevision = await waitForRevision(service, id, forked.body.revision_ids[0]);
  assert.equal(forkRevision.status, 'DEPLOYED', JSON.stringify(forkRevision));
  const forkEndpoint = await eventually('the fork preview to be served', async () => {
    const got = await service.api('GET', `/v2/deployments/${id}/endpoints/pr-13`);
    return got.status === 200 && got.body.served_revision_id === forkRevision.id && got.body;
  });
  assert.deepEqual(await json(forkEndpoint.url), {
    version: 'from-fork',
    secret: null,
    database: false,
    credential: false,
  });

  // Closed: the endpoint and its instances go; the deployment keeps serving.
  for (const [number, sha] of [
    [12, head],
    [13, forkHead],
  ] as const) {
    const closed = await deliver(integration.body.id, secret, 'pull_request', prPayload(number, sha, 'closed'));
    assert.equal(closed.body.reason, 'preview_removed', JSON.stringify(closed.body));
  }
  assert.equal((await service.api('GET', `/v2/deployments/${id}/endpoints/pr-12`)).status, 404);
  await eventually('the preview URL to stop answering', async () => (await json(preview.url)).status !== undefined);
  await eventually(
    'the fork preview URL to stop answering',
    async () => (await json(forkEndpoint.url)).status !== undefined,
  );
  assert.equal((await json(stableUrl)).version, 'main');
});
