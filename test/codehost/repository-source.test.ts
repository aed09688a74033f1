import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { CodeHostError } from '../../src/codehost/codehost-error.ts';
import { CodeHostNotFoundError, GitHubClient, type GitHubClientOptions } from '../../src/codehost/github-client.ts';
import { bootstrap } from '../../src/bootstrap.ts';
import { createSecretBox } from '../../src/crypto/secret-box.ts';
import { extractTarball } from '../../src/dataplane/archive-extraction.ts';
import { AppError } from '../../src/errors.ts';
import { createLogger } from '../../src/logger.ts';
import {
  createCodehostIntegrationService,
  type CodehostIntegrationService,
} from '../../src/service/codehost-integrations.ts';
import {
  createTestApp,
  makeRepositories,
  startFakeGitHub,
  type FakeGitHub,
  type FakeGitHubOptions,
} from '../fakes/github-server.ts';
import { createTestDatabase, type TestDatabase } from '../support/harness.ts';

const TOKEN = 'ghp_sourcetoken0123456789abcdefghijklmn';
const INSTALLATION_ID = 7;
const githubApp = createTestApp(4242);
const fast: GitHubClientOptions = { retries: 0 };

const FILES = {
  'package.json': '{"name":"support-agent","version":"1.4.2"}',
  'slipway.json': '{"build":"npm run build"}',
  'src/agent.ts': 'export const agent = true;\n',
};

let scratch: string;
before(async () => {
  scratch = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-source-'));
});
after(async () => {
  await fs.rm(scratch, { recursive: true, force: true });
});

/** A fresh path under the test's scratch directory. */
function scratchPath(name: string): string {
  return path.join(scratch, `${randomBytes(4).toString('hex')}-${name}`);
}

async function withGitHub(options: FakeGitHubOptions, run: (github: FakeGitHub) => Promise<void>): Promise<void> {
  const github = await startFakeGitHub({
    repositories: makeRepositories(3),
    tokens: { [TOKEN]: 'all' },
    apps: [{ id: githubApp.id, publicKey: githubApp.publicKey, installations: { [INSTALLATION_ID]: 'all' } }],
    ...options,
  });
  try {
    await run(github);
  } finally {
    await github.close();
  }
}

/** Every file under `dir`, relative path -> content. */
async function filesUnder(dir: string): Promise<Record<string, string>> {
  const found: Record<string, string> = {};
  for (const entry of await fs.readdir(dir, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile()) continue;
    const full = path.join(entry.parentPath, entry.name);
    found[path.relative(dir, full)] = await fs.readFile(full, 'utf8');
  }
  return found;
}

async function rejection<E extends Error>(promise: Promise<unknown>, type: new (...args: never[]) => E): Promise<E> {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof type, `expected a ${type.name}, got ${String(error)}`);
    return error;
  }
  assert.fail('expected the call to fail');
}

test('a branch, a tag, a full ref or a sha resolve to the commit they name', async () => {
  await withGitHub({}, async (github) => {
    const sha = github.setRepositoryFiles('octo-org', 'repo-001', FILES, { branch: 'main', tags: ['v1.4.2'] });
    const client = new GitHubClient({ token: TOKEN }, { ...fast, apiUrl: github.url });

    for (const ref of ['main', 'refs/heads/main', 'v1.4.2', 'refs/tags/v1.4.2', sha, sha.slice(0, 10)]) {
      assert.equal(await client.resolveCommit('octo-org', 'repo-001', ref), sha, ref);
    }

    // A push moves the branch; the earlier commit stays reachable by its sha.
    const next = github.setRepositoryFiles(
      'octo-org',
      'repo-001',
      { ...FILES, 'src/agent.ts': 'export const agent = 2;\n' },
      { branch: 'main' },
    );
    assert.notEqual(next, sha);
    assert.equal(await client.resolveCommit('octo-org', 'repo-001', 'main'), next);
    assert.equal(await client.resolveCommit('octo-org', 'repo-001', 'v1.4.2'), sha);
  });
});

test('an unknown ref, a missing repository and an empty one are errors that say so', async () => {
  await withGitHub({}, async (github) => {
    github.setRepositoryFiles('octo-org', 'repo-001', FILES);
    const client = new GitHubClient({ token: TOKEN }, { ...fast, apiUrl: github.url });

    const unknownRef = await rejection(
      client.resolveCommit('octo-org', 'repo-001', 'feature/nope'),
      CodeHostNotFoundError,
    );
    assert.equal(
      unknownRef.message,
      "The ref 'feature/nope' does not exist in octo-org/repo-001: it names no branch, tag or commit there.",
    );
    assert.equal(unknownRef.hostStatus, 422);

    const missing = await rejection(client.resolveCommit('octo-org', 'gone', 'main'), CodeHostNotFoundError);
    assert.match(missing.message, /octo-org\/gone does not exist/);

    const empty = await rejection(client.resolveCommit('octo-org', 'repo-002', 'main'), CodeHostNotFoundError);
    assert.match(empty.message, /octo-org\/repo-002 is empty/);
  });
});

test('the tarball of a commit downloads through the redirect and extracts to the repository files', async () => {
  await withGitHub({}, async (github) => {
    const sha = github.setRepositoryFiles('octo-org', 'repo-001', FILES, { branch: 'main' });
    const client = new GitHubClient({ token: TOKEN }, { ...fast, apiUrl: github.url });
    const file = scratchPath('source.tar.gz');

    const { bytes } = await client.downloadTarball('octo-org', 'repo-001', sha, file);
    assert.equal((await fs.stat(file)).size, bytes);
    assert.equal(github.requestsTo('GET', `/repos/octo-org/repo-001/tarball/${sha}`)[0]?.status, 302);
    assert.equal(github.requestsTo('GET', /^\/_codeload\//)[0]?.status, 200, 'the redirect was followed');

    const dest = scratchPath('src');
    const result = await extractTarball(file, dest, { stripSingleTopDirectory: true });
    assert.deepEqual(await filesUnder(dest), FILES);
    assert.equal(result.files, 3);
  });
});

test('a download larger than the limit is refused and leaves no file', async () => {
  await withGitHub({}, async (github) => {
    const sha = github.setRepositoryFiles('octo-org', 'repo-001', {
      'big.txt': randomBytes(64 * 1024).toString('hex'),
    });
    const client = new GitHubClient({ token: TOKEN }, { ...fast, apiUrl: github.url, maxDownloadBytes: 10_000 });
    const file = scratchPath('big.tar.gz');
    const error = await rejection(client.downloadTarball('octo-org', 'repo-001', sha, file), CodeHostError);
    assert.match(error.message, /larger than 10000 bytes/);
    await assert.rejects(fs.stat(file), { code: 'ENOENT' });
  });
});

test('a host failing the tarball is reported as unavailable and leaves no file', async () => {
  await withGitHub({}, async (github) => {
    const sha = github.setRepositoryFiles('octo-org', 'repo-001', FILES);
    github.failWith({ status: 502, path: '/_codeload/' });
    const client = new GitHubClient({ token: TOKEN }, { ...fast, apiUrl: github.url });
    const file = scratchPath('failed.tar.gz');
    const error = await rejection(client.downloadTarball('octo-org', 'repo-001', sha, file), CodeHostError);
    assert.equal(error.kind, 'unavailable');
    await assert.rejects(fs.stat(file), { code: 'ENOENT' });
  });
});

/** The service on a real database, with the fake host beside it. */
async function withService(
  options: FakeGitHubOptions,
  run: (github: FakeGitHub, service: CodehostIntegrationService, workspaceId: string) => Promise<void>,
): Promise<void> {
  const database: TestDatabase = await createTestDatabase();
  try {
    const { workspaceId } = await bootstrap(database.db, null);
    const service = createCodehostIntegrationService({
      db: database.db,
      secretBox: createSecretBox(randomBytes(32)),
      allowInsecure: true,
      logger: createLogger('silent'),
      clientOptions: fast,
    });
    await withGitHub(options, (github) => run(github, service, workspaceId));
  } finally {
    await database.drop();
  }
}

test('the service downloads a repository at a ref with a token integration, and reports the commit', async () => {
  await withService({}, async (github, service, workspaceId) => {
    const sha = github.setRepositoryFiles('octo-org', 'repo-001', FILES, { branch: 'main' });
    const { row } = await service.create(workspaceId, { name: 'github', api_url: github.url, token: TOKEN });
    const file = scratchPath('source.tar.gz');

    const { commitSha } = await service.repositories.downloadSource(
      row,
      `${github.webOrigin}/octo-org/repo-001`,
      'refs/heads/main',
      file,
    );
    assert.equal(commitSha, sha);
    const dest = scratchPath('src');
    await extractTarball(file, dest, { stripSingleTopDirectory: true });
    assert.deepEqual(await filesUnder(dest), FILES);
  });
});

test('the service downloads with a GitHub App integration on an Enterprise Server path', async () => {
  await withService({ pathPrefix: '/api/v3' }, async (github, service, workspaceId) => {
    const sha = github.setRepositoryFiles('octo-org', 'repo-003', FILES, { branch: 'release', tags: ['v2'] });
    const { row } = await service.create(workspaceId, {
      name: 'ghes',
      api_url: github.url,
      app_id: githubApp.id,
      private_key: githubApp.privateKey,
      installation_id: INSTALLATION_ID,
    });
    const file = scratchPath('source.tar.gz');

    const { commitSha } = await service.repositories.downloadSource(
      row,
      `${github.webOrigin}/octo-org/repo-003.git`,
      'v2',
      file,
    );
    assert.equal(commitSha, sha);
    const installationToken = github.issuedTokens[0]?.token;
    assert.ok(installationToken !== undefined);
    assert.equal(github.requestsTo('GET', /\/commits\//)[0]?.authorization, `token ${installationToken}`);
    const dest = scratchPath('src');
    await extractTarball(file, dest, { stripSingleTopDirectory: true });
    assert.deepEqual(await filesUnder(dest), FILES);
  });
});

test('the service answers an unknown ref or a repository elsewhere as an invalid reference, and writes nothing', async () => {
  await withService({}, async (github, service, workspaceId) => {
    github.setRepositoryFiles('octo-org', 'repo-001', FILES, { branch: 'main' });
    const { row } = await service.create(workspaceId, { name: 'github', api_url: github.url, token: TOKEN });
    const file = scratchPath('source.tar.gz');

    const unknown = await rejection(
      service.repositories.downloadSource(row, `${github.webOrigin}/octo-org/repo-001`, 'release-9', file),
      AppError,
    );
    assert.equal(unknown.code, 'invalid_reference');
    assert.match(unknown.detail, /'release-9' does not exist in octo-org\/repo-001/);

    const elsewhere = await rejection(
      service.repositories.downloadSource(row, 'https://github.com/octo-org/repo-001', 'main', file),
      AppError,
    );
    assert.equal(elsewhere.code, 'invalid_reference');
    assert.match(elsewhere.detail, /not a repository on the integration's host/);

    await assert.rejects(fs.stat(file), { code: 'ENOENT' });
    assert.equal(github.requestsTo('GET', /\/tarball\//).length, 0, 'no download was started');
  });
});

test('the service reports a host that fails the download as a bad gateway', async () => {
  await withService({}, async (github, service, workspaceId) => {
    github.setRepositoryFiles('octo-org', 'repo-001', FILES, { branch: 'main' });
    const { row } = await service.create(workspaceId, { name: 'github', api_url: github.url, token: TOKEN });
    github.failWith({ status: 500, path: '/repos/octo-org/repo-001/tarball/' });
    const file = scratchPath('source.tar.gz');

    const error = await rejection(
      service.repositories.downloadSource(row, `${github.webOrigin}/octo-org/repo-001`, 'main', file),
      AppError,
    );
    assert.equal(error.code, 'bad_gateway');
    assert.ok(!error.detail.includes(TOKEN));
    await assert.rejects(fs.stat(file), { code: 'ENOENT' });
  });
});
