/**
 * A preview's data (docs/codehost.md, "Pull-request previews"): the app of a fork's pull request runs with a
 * data directory of its own, empty at its start, never the deployment's. The attack: the pull request's code
 * reads the file the deployment's own app keeps in its data directory, and overwrites it; it must read
 * nothing and change nothing. Its data goes with the preview when the pull request closes.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before } from 'node:test';
import { signWebhookBody } from '../../src/codehost/webhook-signature.ts';
import { makeRepositories, startFakeGitHub, type FakeGitHub } from '../fakes/github-server.ts';
import { eventually } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';
import { requestApp, startTestService, waitForRevision, type TestService } from './data-plane-harness.ts';

const TOKEN = 'ghp_previewdata0123456789abcdefghijklm';
let github: FakeGitHub;
let service: TestService;

before(async () => {
  github = await startFakeGitHub({ repositories: makeRepositories(1), tokens: { [TOKEN]: 'all' } });
  service = await startTestService({ SLIPWAY_ALLOW_INSECURE_CODEHOST: '1', SLIPWAY_CODEHOST_ALLOWED_URLS: github.url });
});
after(async () => {
  await service?.close();
  await github?.close();
});

/**
 * The deployment's own app keeps a file in its data directory; the pull request's reads what is there and
 * writes over it. Both say what they read from the data directory and what they see of it.
 */
const ownApp = {
  'package.json': JSON.stringify({ name: 'data-app', private: true, scripts: { start: 'node server.js' } }),
  'server.js': `const fs = require('node:fs'), path = require('node:path');
const file = path.join(process.env.SLIPWAY_DATA_DIR, 'customers.txt');
if (!fs.existsSync(file)) fs.writeFileSync(file, 'production customers');
require('node:http').createServer((q, s) => s.end(JSON.stringify({
  read: fs.readFileSync(file, 'utf8'), entries: fs.readdirSync(process.env.SLIPWAY_DATA_DIR).sort(),
}))).listen(Number(process.env.PORT), process.env.HOST);`,
  'slipway.json': JSON.stringify({}),
};
const forkApp = {
  ...ownApp,
  'server.js': `const fs = require('node:fs'), path = require('node:path');
const dir = process.env.SLIPWAY_DATA_DIR, file = path.join(dir, 'customers.txt');
const entries = fs.readdirSync(dir).sort();
let read = null;
try { read = fs.readFileSync(file, 'utf8'); } catch {}
fs.writeFileSync(file, 'stolen by a fork');
fs.writeFileSync(path.join(dir, 'planted.txt'), 'from a fork');
require('node:http').createServer((q, s) => s.end(JSON.stringify({ read, entries })))
  .listen(Number(process.env.PORT), process.env.HOST);`,
};

async function deliver(integrationId: string, secret: string, payload: unknown) {
  const raw = JSON.stringify(payload);
  const response = await fetch(`${service.base}/v1/integrations/forge/codehost/${integrationId}/webhooks`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      'x-github-event': 'pull_request',
      'x-github-delivery': randomUUID(),
      'x-hub-signature-256': signWebhookBody(secret, raw),
    },
    body: raw,
  });
  return (await response.json()) as Record<string, any>;
}

function forkPr(number: number, head: string, action: string) {
  const base = `${github.webOrigin}/octo-org/repo-001`;
  const fork = `${github.webOrigin}/mallory/repo-001`;
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
      head: { sha: head, ref: 'evil', repo: repo(fork, 'mallory') },
      base: { sha: '0'.repeat(40), ref: 'main', repo: repo(base, 'octo-org') },
    },
    repository: repo(base, 'octo-org'),
  };
}

async function json(url: string) {
  const answer = await requestApp(service, url, '/');
  return answer.status === 200 ? (JSON.parse(answer.body) as Record<string, unknown>) : { status: answer.status };
}

test("a fork's preview neither reads nor changes the deployment's data, and its own data goes on close", async () => {
  github.setRepositoryFiles('octo-org', 'repo-001', ownApp, { branch: 'main' });
  const integration = await service.api('POST', '/v1/integrations/forge/codehost', {
    name: 'github',
    api_url: github.url,
    token: TOKEN,
  });
  assert.equal(integration.status, 201, JSON.stringify(integration.body));
  const created = await service.api('POST', '/v2/deployments', {
    name: 'data-agent',
    source: 'codehost',
    source_config: {
      integration_id: integration.body.id,
      repo_url: `${github.webOrigin}/octo-org/repo-001`,
      build_on_push: true,
    },
    source_revision_config: { repo_ref: 'main', framework_config_path: 'slipway.json' },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const id: string = created.body.id;
  const main = await waitForRevision(service, id, created.body.latest_revision_id);
  assert.equal(main.status, 'DEPLOYED', JSON.stringify(main));
  const stableUrl: string = (await service.api('GET', `/v2/deployments/${id}`)).body.source_config.custom_url;
  assert.deepEqual(await json(stableUrl), { read: 'production customers', entries: ['customers.txt'] });

  const head = github.setRepositoryFiles('octo-org', 'repo-001', forkApp, { branch: 'pull/21/head' });
  const opened = await deliver(integration.body.id, integration.body.webhook_secret, forkPr(21, head, 'opened'));
  assert.equal(opened.outcome, 'revision_created', JSON.stringify(opened));
  const built = await waitForRevision(service, id, opened.revision_ids[0]);
  assert.equal(built.status, 'DEPLOYED', JSON.stringify(built));
  const endpoint = await eventually('the fork preview to be served', async () => {
    const got = await service.api('GET', `/v2/deployments/${id}/endpoints/pr-21`);
    return got.status === 200 && got.body.served_revision_id === built.id && got.body;
  });
  // What the fork's code found at its start: an empty data directory of its own.
  assert.deepEqual(await json(endpoint.url), { read: null, entries: [] });
  // The deployment's file is as its own app wrote it, and nothing was planted beside it.
  assert.deepEqual(await json(stableUrl), { read: 'production customers', entries: ['customers.txt'] });

  const closed = await deliver(integration.body.id, integration.body.webhook_secret, forkPr(21, head, 'closed'));
  assert.equal(closed.reason, 'preview_removed', JSON.stringify(closed));
  await eventually('the preview URL to stop answering', async () => (await json(endpoint.url)).status !== undefined);

  // Opened again with the same commit: a new preview, which starts from an empty data directory again.
  const reopened = await deliver(integration.body.id, integration.body.webhook_secret, forkPr(21, head, 'reopened'));
  assert.equal(reopened.outcome, 'revision_created', JSON.stringify(reopened));
  const again = await waitForRevision(service, id, reopened.revision_ids[0]);
  assert.equal(again.status, 'DEPLOYED', JSON.stringify(again));
  const back = await eventually('the reopened preview to be served', async () => {
    const got = await service.api('GET', `/v2/deployments/${id}/endpoints/pr-21`);
    return got.status === 200 && got.body.served_revision_id === again.id && got.body;
  });
  assert.deepEqual(await json(back.url), { read: null, entries: [] }, 'the closed preview’s data went with it');
  assert.deepEqual(await json(stableUrl), { read: 'production customers', entries: ['customers.txt'] });
});
