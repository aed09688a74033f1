/**
 * A codehost deployment on the local data plane: the repository is fetched at its ref through the
 * integration (a fake GitHub API serving real tarballs), the resolved commit is recorded on the
 * revision, and the app serves at its stable URL. A push builds the commit it names, not the branch's head.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before } from 'node:test';
import { signWebhookBody } from '../../src/codehost/webhook-signature.ts';
import { makeRepositories, startFakeGitHub, type FakeGitHub } from '../fakes/github-server.ts';
import { requestApp, startTestService, waitForRevision, type TestService } from './data-plane-harness.ts';
import { test } from '../support/limited-test.ts';

const TOKEN = 'ghp_dataplanetoken0123456789abcdefghij';
let github: FakeGitHub;
let service: TestService;

before(async () => {
  github = await startFakeGitHub({ repositories: makeRepositories(3), tokens: { [TOKEN]: 'all' } });
  service = await startTestService({ SLIPWAY_ALLOW_INSECURE_CODEHOST: '1', SLIPWAY_CODEHOST_ALLOWED_URLS: github.url });
});
after(async () => {
  await service.close();
  await github.close();
});

test('a repository at a branch is fetched, built and served; the revision records the commit', async () => {
  const sha = github.setRepositoryFiles(
    'octo-org',
    'repo-001',
    {
      'package.json': JSON.stringify({ name: 'from-git', private: true, scripts: { start: 'node server.js' } }),
      'server.js':
        "require('node:http').createServer((q, s) => s.end('built from git')).listen(Number(process.env.PORT), process.env.HOST);",
      'slipway.json': JSON.stringify({ database: false }),
    },
    { branch: 'main' },
  );
  const integration = await service.api('POST', '/v1/integrations/forge/codehost', {
    name: 'github',
    api_url: github.url,
    token: TOKEN,
  });
  assert.equal(integration.status, 201, JSON.stringify(integration.body));
  const created = await service.api('POST', '/v2/deployments', {
    name: 'git-agent',
    source: 'codehost',
    source_config: { integration_id: integration.body.id, repo_url: `${github.webOrigin}/octo-org/repo-001` },
    source_revision_config: { repo_ref: 'main', framework_config_path: 'slipway.json' },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const revision = await waitForRevision(service, created.body.id, created.body.latest_revision_id);
  assert.equal(revision.status, 'DEPLOYED', JSON.stringify(revision));
  assert.equal(revision.source_revision_config.repo_commit_sha, sha);
  const deployment = (await service.api('GET', `/v2/deployments/${created.body.id}`)).body;
  assert.equal(deployment.source_revision_config.repo_commit_sha, sha);
  assert.equal((await requestApp(service, deployment.source_config.custom_url, '/')).body, 'built from git');
});

test('a ref the repository does not have fails the build with a message naming it', async () => {
  const integration = await service.api('POST', '/v1/integrations/forge/codehost', {
    name: 'github-2',
    api_url: github.url,
    token: TOKEN,
  });
  const created = await service.api('POST', '/v2/deployments', {
    name: 'git-missing-ref',
    source: 'codehost',
    source_config: { integration_id: integration.body.id, repo_url: `${github.webOrigin}/octo-org/repo-001` },
    source_revision_config: { repo_ref: 'no-such-branch', framework_config_path: 'slipway.json' },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const revision = await waitForRevision(service, created.body.id, created.body.latest_revision_id);
  assert.equal(revision.status, 'BUILD_FAILED');
  assert.equal(revision.failure_reason, 'source_fetch_failed');
  assert.match(revision.failure_message, /no-such-branch/);
});

test('a push builds the commit it names, even when the branch has moved on since', async () => {
  const server = (text: string) => ({
    'package.json': JSON.stringify({ name: 'pushed', private: true, scripts: { start: 'node server.js' } }),
    'server.js': `require('node:http').createServer((q, s) => s.end(${JSON.stringify(text)})).listen(Number(process.env.PORT), process.env.HOST);`,
    'slipway.json': JSON.stringify({ database: false }),
  });
  github.setRepositoryFiles('octo-org', 'repo-002', server('commit one'), { branch: 'main' });
  const integration = await service.api('POST', '/v1/integrations/forge/codehost', {
    name: 'github-push',
    api_url: github.url,
    token: TOKEN,
  });
  assert.equal(integration.status, 201, JSON.stringify(integration.body));
  const created = await service.api('POST', '/v2/deployments', {
    name: 'git-pushed',
    source: 'codehost',
    source_config: {
      integration_id: integration.body.id,
      repo_url: `${github.webOrigin}/octo-org/repo-002`,
      build_on_push: true,
    },
    source_revision_config: { repo_ref: 'main', framework_config_path: 'slipway.json' },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  assert.equal((await waitForRevision(service, created.body.id, created.body.latest_revision_id)).status, 'DEPLOYED');

  // Two quick pushes: by the time the first one's revision fetches its source, main is at the second's.
  const second = github.setRepositoryFiles('octo-org', 'repo-002', server('commit two'), { branch: 'main' });
  const third = github.setRepositoryFiles('octo-org', 'repo-002', server('commit three'), { branch: 'main' });
  const push = async (after: string) => {
    const raw = JSON.stringify({
      ref: 'refs/heads/main',
      after,
      deleted: false,
      repository: {
        full_name: 'octo-org/repo-002',
        html_url: `${github.webOrigin}/octo-org/repo-002`,
        clone_url: `${github.webOrigin}/octo-org/repo-002.git`,
      },
    });
    const response = await fetch(`${service.base}/v1/integrations/forge/codehost/${integration.body.id}/webhooks`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'x-github-event': 'push',
        'x-github-delivery': randomUUID(),
        'x-hub-signature-256': signWebhookBody(integration.body.webhook_secret, raw),
      },
      body: raw,
    });
    const body = (await response.json()) as { outcome: string; revision_ids: string[] };
    assert.equal(body.outcome, 'revision_created', JSON.stringify(body));
    return body.revision_ids[0]!;
  };
  for (const [sha, text] of [
    [second, 'commit two'],
    [third, 'commit three'],
  ] as const) {
    const revision = await waitForRevision(service, created.body.id, await push(sha));
    assert.equal(revision.status, 'DEPLOYED', JSON.stringify(revision));
    assert.equal(revision.source_revision_config.repo_commit_sha, sha);
    assert.equal(revision.source_revision_config.repo_ref, 'main', 'the deployment still tracks its branch');
    const deployment = (await service.api('GET', `/v2/deployments/${created.body.id}`)).body;
    assert.equal((await requestApp(service, deployment.source_config.custom_url, '/')).body, text);
  }
});
