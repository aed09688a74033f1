/**
 * codehost deployments made from the interface's repository listing: the integration must belong to the
 * workspace and repo_url must be a repository the integration reaches on its host.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import {
  createCodehostDeployment,
  createTokenIntegration,
  otherWorkspace,
  revisionsOf,
  startCodehostFixture,
  TOKEN,
  type CodehostFixture,
  type CreatedIntegration,
} from './codehost-fixture.ts';

let f: CodehostFixture;
let integration: CreatedIntegration;

before(async () => {
  f = await startCodehostFixture();
  integration = await createTokenIntegration(f, 'github');
});
after(() => f.close());

const BASE = '/v1/integrations/forge/codehost';

function createBody(name: string, repoUrl: string, integrationId = integration.id) {
  return {
    name,
    source: 'codehost',
    source_config: { integration_id: integrationId, repo_url: repoUrl },
    source_revision_config: { repo_ref: 'main', framework_config_path: 'agent.json' },
  };
}

test('a deployment created from a listed repository gets revision 1', async () => {
  const repos = (await f.api.get(`${BASE}/${integration.id}/repos`)).body;
  const repo = repos.find((r: { name: string }) => r.name === 'repo-002');
  const res = await f.api.post('/v2/deployments', {
    name: 'from-listing',
    source: 'codehost',
    source_config: { integration_id: repo.host_integration_id, repo_url: repo.url, build_on_push: true },
    source_revision_config: { repo_ref: repo.default_branch, framework_config_path: 'langgraph.json' },
  });
  assert.equal(res.status, 201, JSON.stringify(res.body));
  assert.equal(res.body.source, 'codehost');
  assert.equal(res.body.source_config.integration_id, integration.id);
  assert.equal(res.body.source_config.repo_url, repo.url);
  assert.equal(res.body.source_revision_config.repo_ref, 'main');
  assert.equal(res.body.source_revision_config.repo_commit_sha, null);
  const revisions = await revisionsOf(f, res.body.id);
  assert.equal(revisions.length, 1);
  assert.equal(revisions[0]!.id, res.body.latest_revision_id);
  // The check asked the host for exactly that repository.
  assert.ok(f.github.requestsTo('GET', '/repos/octo-org/repo-002').length >= 1);
});

test('a clone URL of a listed repository (.git, other letter case) is accepted', async () => {
  const res = await f.api.post(
    '/v2/deployments',
    createBody('clone-url', `${f.github.webOrigin}/Octo-Org/repo-003.git`),
  );
  assert.equal(res.status, 201, JSON.stringify(res.body));
});

test('a repo_url on another host is 400 and creates nothing', async () => {
  const res = await f.api.post(
    '/v2/deployments',
    createBody('other-host', 'https://gitlab.example.com/octo-org/repo-001'),
  );
  assert.equal(res.status, 400);
  assert.match(
    res.body.detail,
    /^source_config\.repo_url 'https:\/\/gitlab\.example\.com\/octo-org\/repo-001' is not on the integration's host/,
  );
  assert.equal((await f.api.get('/v2/deployments?name=other-host')).body.resources.length, 0);
});

test('a repository the host does not have is 400', async () => {
  const res = await f.api.post(
    '/v2/deployments',
    createBody('missing-repo', `${f.github.webOrigin}/octo-org/no-such-repo`),
  );
  assert.equal(res.status, 400);
  assert.match(res.body.detail, /is not a repository the integration can reach \(octo-org\/no-such-repo\)/);
});

test('a repo_url that is not a repository URL is 400', async () => {
  const res = await f.api.post('/v2/deployments', createBody('not-a-repo', `${f.github.webOrigin}/octo-org`));
  assert.equal(res.status, 400);
  assert.match(res.body.detail, /is not a repository URL/);
});

test('an integration of another workspace is 400 and the host is not asked', async () => {
  const other = await otherWorkspace(f, 'elsewhere');
  const theirs = await other.api.post(BASE, { name: 'theirs', api_url: f.github.url, token: TOKEN });
  assert.equal(theirs.status, 201);
  const asked = f.github.requests.length;
  const res = await f.api.post(
    '/v2/deployments',
    createBody('foreign-integration', `${f.github.webOrigin}/octo-org/repo-001`, theirs.body.id),
  );
  assert.equal(res.status, 400);
  assert.equal(res.body.detail, `source_config.integration_id: Integration ID ${theirs.body.id} not found.`);
  assert.equal(f.github.requests.length, asked);
});

test('a host that is down when the deployment is created gives 502 and creates nothing', async () => {
  f.github.failWith({ status: 502, path: '/repos/', times: 1 });
  const res = await f.api.post('/v2/deployments', createBody('host-down', `${f.github.webOrigin}/octo-org/repo-004`));
  assert.equal(res.status, 502);
  assert.match(res.body.detail, /unavailable while reading a repository/);
  assert.equal((await f.api.get('/v2/deployments?name=host-down')).body.resources.length, 0);
});

test('a host that rejects the credentials when the deployment is created gives 400 codehost_rejected', async () => {
  f.github.failWith({ status: 401, path: '/repos/', times: 1 });
  const res = await f.api.post(
    '/v2/deployments',
    createBody('host-rejects', `${f.github.webOrigin}/octo-org/repo-004`),
  );
  assert.equal(res.status, 400);
  assert.equal(res.body.code, 'codehost_rejected');
});

test('an integration in use cannot be deleted (409); once its deployments are gone it can', async () => {
  const own = await createTokenIntegration(f, 'in-use');
  const deployment = await createCodehostDeployment(f, own.id, 'uses-it');
  const refused = await f.api.delete(`${BASE}/${own.id}`);
  assert.equal(refused.status, 409);
  assert.match(refused.body.detail, /is used by 1 deployment\(s\), e\.g\. 'uses-it'/);
  assert.equal((await f.api.get(`${BASE}/${own.id}`)).status, 200);

  assert.equal((await f.api.delete(`/v2/deployments/${deployment.id}`)).status, 204);
  assert.equal((await f.api.delete(`${BASE}/${own.id}`)).status, 204);
});

test('build_on_push with a tag ref is refused', async () => {
  const res = await f.api.post('/v2/deployments', {
    ...createBody('tag-push', `${f.github.webOrigin}/octo-org/repo-005`),
    source_config: {
      integration_id: integration.id,
      repo_url: `${f.github.webOrigin}/octo-org/repo-005`,
      build_on_push: true,
    },
    source_revision_config: { repo_ref: 'refs/tags/v1', framework_config_path: 'agent.json' },
  });
  assert.equal(res.status, 400);
  assert.match(res.body.detail, /build_on_push cannot be used with a tag/);
});
