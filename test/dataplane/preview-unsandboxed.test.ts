/**
 * Pull-request previews on a data plane without a sandbox (SLIPWAY_SANDBOX=none; docs/codehost.md,
 * "Pull-request previews"). There a preview's processes run as the deployment's own host uid, with no mount
 * namespace: the attack is a fork's pull request whose code opens the deployment's data directory by its
 * host path, next to its own. Such a preview must never run (its revision fails before anything of it is
 * fetched, saying why); a pull request from a branch of the repository itself still gets its preview.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before } from 'node:test';
import { signWebhookBody } from '../../src/codehost/webhook-signature.ts';
import { makeRepositories, startFakeGitHub, type FakeGitHub } from '../fakes/github-server.ts';
import { eventually } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';
import { requestApp, startTestService, waitForRevision, type TestService } from './data-plane-harness.ts';

const TOKEN = 'ghp_previewbare0123456789abcdefghijklmn';
let github: FakeGitHub;
let service: TestService;

before(async () => {
  github = await startFakeGitHub({ repositories: makeRepositories(1), tokens: { [TOKEN]: 'all' } });
  service = await startTestService({
    SLIPWAY_ALLOW_INSECURE_CODEHOST: '1',
    SLIPWAY_CODEHOST_ALLOWED_URLS: github.url,
    SLIPWAY_SANDBOX: 'none',
  });
});
after(async () => {
  await service?.close();
  await github?.close();
});

/** The deployment's app keeps a file in its data directory and says what it holds. */
const ownApp = {
  'package.json': JSON.stringify({ name: 'bare-app', private: true, scripts: { start: 'node server.js' } }),
  'server.js': `const fs = require('node:fs'), path = require('node:path');
const file = path.join(process.env.SLIPWAY_DATA_DIR, 'customers.txt');
if (!fs.existsSync(file)) fs.writeFileSync(file, 'production customers');
require('node:http').createServer((q, s) => s.end(JSON.stringify({ read: fs.readFileSync(file, 'utf8') })))
  .listen(Number(process.env.PORT), process.env.HOST);`,
  'slipway.json': JSON.stringify({}),
};
/** A fork's: from its own data directory (<deployment>/previews/pr-N/data) to the deployment's (<deployment>/data). */
const forkApp = {
  ...ownApp,
  'server.js': `const fs = require('node:fs'), path = require('node:path');
const theirs = path.join(process.env.SLIPWAY_DATA_DIR, '..', '..', '..', 'data', 'customers.txt');
let read = null;
try { read = fs.readFileSync(theirs, 'utf8'); fs.writeFileSync(theirs, 'stolen by a fork'); } catch {}
require('node:http').createServer((q, s) => s.end(JSON.stringify({ read }))).listen(Number(process.env.PORT), process.env.HOST);`,
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

function pr(number: number, head: string, fork: boolean) {
  const base = `${github.webOrigin}/octo-org/repo-001`;
  const headOwner = fork ? 'mallory' : 'octo-org';
  const repo = (owner: string) => ({
    name: 'repo-001',
    full_name: `${owner}/repo-001`,
    html_url: `${github.webOrigin}/${owner}/repo-001`,
    clone_url: `${github.webOrigin}/${owner}/repo-001.git`,
  });
  return {
    action: 'opened',
    number,
    pull_request: {
      number,
      merged: false,
      head: { sha: head, ref: 'feature', repo: repo(headOwner) },
      base: { sha: '0'.repeat(40), ref: 'main', repo: { ...repo('octo-org'), html_url: base } },
    },
    repository: repo('octo-org'),
  };
}

async function json(url: string) {
  const answer = await requestApp(service, url, '/');
  return answer.status === 200 ? (JSON.parse(answer.body) as Record<string, unknown>) : { status: answer.status };
}

test("without a sandbox a fork's preview never runs, so it cannot open the deployment's data; a branch's still does", async () => {
  github.setRepositoryFiles('octo-org', 'repo-001', ownApp, { branch: 'main' });
  const integration = await service.api('POST', '/v1/integrations/forge/codehost', {
    name: 'github',
    api_url: github.url,
    token: TOKEN,
  });
  assert.equal(integration.status, 201, JSON.stringify(integration.body));
  const created = await service.api('POST', '/v2/deployments', {
    name: 'bare-agent',
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
  assert.equal((await waitForRevision(service, id, created.body.latest_revision_id)).status, 'DEPLOYED');
  const stableUrl: string = (await service.api('GET', `/v2/deployments/${id}`)).body.source_config.custom_url;
  assert.deepEqual(await json(stableUrl), { read: 'production customers' });

  const forkHead = github.setRepositoryFiles('octo-org', 'repo-001', forkApp, { branch: 'pull/21/head' });
  const opened = await deliver(integration.body.id, integration.body.webhook_secret, pr(21, forkHead, true));
  assert.equal(opened.outcome, 'revision_created', JSON.stringify(opened));
  const refused = await waitForRevision(service, id, opened.revision_ids[0]);
  assert.equal(refused.status, 'BUILD_FAILED', JSON.stringify(refused));
  assert.equal(refused.failure_reason, 'fork_preview_unsandboxed');
  assert.match(refused.failure_message, /SLIPWAY_SANDBOX=none/);
  assert.match(refused.failure_message, /fork/);
  assert.equal((await service.api('GET', `/v2/deployments/${id}/endpoints/pr-21`)).status, 404);
  assert.deepEqual(await json(stableUrl), { read: 'production customers' }, 'the data was neither read nor changed');

  // A branch of the repository itself: its authors may push to the deployment's branch anyway.
  const branchHead = github.setRepositoryFiles('octo-org', 'repo-001', ownApp, { branch: 'feature' });
  const branch = await deliver(integration.body.id, integration.body.webhook_secret, pr(22, branchHead, false));
  assert.equal(branch.outcome, 'revision_created', JSON.stringify(branch));
  assert.equal((await waitForRevision(service, id, branch.revision_ids[0])).status, 'DEPLOYED');
  await eventually('the branch preview to be served at pr-22', async () => {
    const got = await service.api('GET', `/v2/deployments/${id}/endpoints/pr-22`);
    return got.status === 200 && got.body.served_revision_id === branch.revision_ids[0];
  });
});
