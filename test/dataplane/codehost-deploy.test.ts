/**
 * A codehost deployment on the local data plane: the repository is fetched at its ref through the
 * integration (a fake GitHub API serving real tarballs), the resolved commit is recorded on the
 * revision, and the app serves at its stable URL.
 */
import assert from 'node:assert/strict';
import { after, before } from 'node:test';
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
