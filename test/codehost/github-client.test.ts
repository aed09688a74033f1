import { test } from 'node:test';
import assert from 'node:assert/strict';
import { GitHubClient, type CodeHostCredentials, type GitHubClientOptions } from '../../src/codehost/github-client.ts';
import { GitHubClientCache } from '../../src/codehost/github-client-cache.ts';
import { CodeHostError } from '../../src/codehost/codehost-error.ts';
import {
  createTestApp,
  makeRepositories,
  startFakeGitHub,
  type FakeGitHub,
  type FakeGitHubOptions,
} from '../fakes/github-server.ts';

const TOKEN = 'ghp_testtoken0123456789abcdefghijklmnop';
const INSTALLATION_ID = 7;
const app = createTestApp(4242);
const otherApp = createTestApp(4242); // same id, another key: what a leaked or rotated key looks like

// Retries stay on (they are part of the behaviour) but wait a millisecond instead of seconds.
const fast: GitHubClientOptions = { retries: 2, retryBaseDelayMs: 1 };

async function withGitHub(options: FakeGitHubOptions, run: (github: FakeGitHub) => Promise<void>): Promise<void> {
  const github = await startFakeGitHub({
    repositories: makeRepositories(250),
    tokens: { [TOKEN]: 'all' },
    apps: [{ id: app.id, publicKey: app.publicKey, installations: { [INSTALLATION_ID]: 'all' } }],
    ...options,
  });
  try {
    await run(github);
  } finally {
    await github.close();
  }
}

function appCredentials(privateKey = app.privateKey): CodeHostCredentials {
  return { app_id: app.id, private_key: privateKey, installation_id: INSTALLATION_ID };
}

async function codeHostError(promise: Promise<unknown>): Promise<CodeHostError> {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof CodeHostError, `expected a CodeHostError, got ${String(error)}`);
    return error;
  }
  assert.fail('expected the call to fail');
}

test('a token integration lists every repository over several pages', async () => {
  await withGitHub({}, async (github) => {
    const client = new GitHubClient({ token: TOKEN }, { ...fast, apiUrl: github.url });
    const repos = await client.listRepositories();

    assert.equal(repos.length, 250);
    assert.deepEqual(repos[0], {
      id: 1001,
      name: 'repo-001',
      owner: 'octo-org',
      url: `${github.webOrigin}/octo-org/repo-001`,
      default_branch: 'master',
    });
    assert.deepEqual(repos[249]?.name, 'repo-250');
    assert.deepEqual(new Set(repos.map((r) => r.id)).size, 250);
    const pages = github.requestsTo('GET', '/user/repos').map((r) => r.query.page ?? '1');
    assert.deepEqual(pages, ['1', '2', '3']);
  });
});

test('a GitHub App integration on an Enterprise Server path lists its installation repositories', async () => {
  await withGitHub(
    {
      pathPrefix: '/api/v3',
      apps: [
        {
          id: app.id,
          publicKey: app.publicKey,
          installations: {
            [INSTALLATION_ID]: makeRepositories(250)
              .slice(0, 230)
              .map((r) => r.id),
          },
        },
      ],
    },
    async (github) => {
      assert.match(github.url, /\/api\/v3$/);
      const client = new GitHubClient(appCredentials(), { ...fast, apiUrl: github.url });
      const repos = await client.listRepositories();

      assert.equal(repos.length, 230);
      assert.equal(repos[229]?.name, 'repo-230');
      assert.equal(github.requestsTo('POST', `/app/installations/${INSTALLATION_ID}/access_tokens`).length, 1);
      const listings = github.requestsTo('GET', '/installation/repositories');
      assert.equal(listings.length, 3);
      // The listing uses the installation token, not the app JWT.
      assert.ok(listings.every((r) => r.authorization === `token ${github.issuedTokens[0]?.token}`));
    },
  );
});

test('the installation token is exchanged once and reused by later calls of the same integration', async () => {
  await withGitHub({}, async (github) => {
    const clients = new GitHubClientCache(fast);
    const integration = { id: 'int-1', apiUrl: github.url, credentials: appCredentials() };

    await clients.forIntegration(integration).listRepositories();
    await clients.forIntegration(integration).listRepositories();

    assert.equal(github.requestsTo('POST', /\/access_tokens$/).length, 1);
    assert.equal(github.requestsTo('GET', '/installation/repositories').length, 6);

    // New credentials make a new client, which must not reuse a token minted from the old ones.
    const rotated = { ...integration, credentials: appCredentials(app.privateKey + '\n') };
    await clients.forIntegration(rotated).listRepositories();
    assert.equal(github.requestsTo('POST', /\/access_tokens$/).length, 2);
  });
});

test('an installation token close to its expiry is exchanged again', async () => {
  let now = Date.now();
  const clock = (): number => now;
  await withGitHub({ now: clock, installationTokenLifetimeSeconds: 3600 }, async (github) => {
    const client = new GitHubClient(appCredentials(), { ...fast, apiUrl: github.url, now: clock });
    await client.listRepositories();
    now += 30 * 60 * 1000;
    await client.listRepositories();
    assert.equal(github.requestsTo('POST', /\/access_tokens$/).length, 1);

    now += 28 * 60 * 1000; // 58 minutes after issue: inside the refresh margin
    await client.listRepositories();
    assert.equal(github.requestsTo('POST', /\/access_tokens$/).length, 2);
  });
});

test('a JWT signed with the wrong key is refused and reported as rejected credentials', async () => {
  await withGitHub({}, async (github) => {
    const client = new GitHubClient(appCredentials(otherApp.privateKey), { ...fast, apiUrl: github.url });
    const error = await codeHostError(client.listRepositories());

    assert.equal(error.kind, 'rejected');
    assert.equal(error.hostStatus, 401);
    assert.deepEqual(
      github.requestsTo('POST', /\/access_tokens$/).map((r) => r.status),
      [401],
    );
    assert.equal(github.requestsTo('GET', '/installation/repositories').length, 0);
    assert.ok(!error.message.includes('PRIVATE KEY'));
  });
});

test('an unknown installation is reported as rejected credentials', async () => {
  await withGitHub({}, async (github) => {
    const credentials = { app_id: app.id, private_key: app.privateKey, installation_id: 99 };
    const client = new GitHubClient(credentials, { ...fast, apiUrl: github.url });
    const error = await codeHostError(client.listRepositories());
    assert.equal(error.kind, 'rejected');
    assert.equal(error.hostStatus, 404);
    // Reading a repository needs the installation token too; a missing installation is not "repository not found".
    const check = await codeHostError(client.checkRepositoryUrl(`${github.webOrigin}/octo-org/repo-001`));
    assert.equal(check.kind, 'rejected');
  });
});

test('a private key that is not a PEM RSA key is refused without contacting the host or echoing it', async () => {
  await withGitHub({}, async (github) => {
    const garbage = '-----BEGIN RSA PRIVATE KEY-----\nnot-a-key-secret-material\n-----END RSA PRIVATE KEY-----';
    const client = new GitHubClient(appCredentials(garbage), { ...fast, apiUrl: github.url });
    const error = await codeHostError(client.listRepositories());
    assert.equal(error.kind, 'rejected');
    assert.ok(!error.message.includes('secret-material'));
    assert.equal(github.requests.length, 0);
  });
});

test('a token the host does not accept is reported as rejected, without the token in the message', async () => {
  await withGitHub({}, async (github) => {
    const client = new GitHubClient({ token: 'ghp_unknown_token_value_123456' }, { ...fast, apiUrl: github.url });
    const error = await codeHostError(client.listRepositories());

    assert.equal(error.kind, 'rejected');
    assert.equal(error.hostStatus, 401);
    assert.match(error.message, /Bad credentials/);
    assert.ok(!error.message.includes('ghp_unknown_token_value_123456'));
    assert.equal(github.requests.length, 1, 'a rejection is not retried');
  });
});

test('a host message that echoes the token is redacted', async () => {
  await withGitHub({}, async (github) => {
    github.failWith({ status: 401, message: `token ${TOKEN} is revoked` });
    const client = new GitHubClient({ token: TOKEN }, { ...fast, apiUrl: github.url });
    const error = await codeHostError(client.listRepositories());
    assert.equal(error.kind, 'rejected');
    assert.ok(!error.message.includes(TOKEN));
    assert.match(error.message, /\[REDACTED\] is revoked/);
  });
});

test('a rate limit is reported with the Retry-After the host sent, and not retried', async () => {
  await withGitHub({}, async (github) => {
    github.failWith({ status: 403, rateLimited: true, retryAfterSeconds: 42 });
    const client = new GitHubClient({ token: TOKEN }, { ...fast, apiUrl: github.url });
    const error = await codeHostError(client.listRepositories());

    assert.equal(error.kind, 'rate_limited');
    assert.equal(error.retryAfterSeconds, 42);
    assert.match(error.message, /rate limit/i);
    assert.equal(github.requests.length, 1);
  });
});

test('a primary rate limit without Retry-After is reported with the wait until the reset time', async () => {
  const fixed = Date.parse('2026-11-21T10:00:00.000Z');
  await withGitHub({ now: () => fixed }, async (github) => {
    github.failWith({ status: 403, rateLimited: true });
    const client = new GitHubClient({ token: TOKEN }, { ...fast, apiUrl: github.url, now: () => fixed });
    const error = await codeHostError(client.listRepositories());
    assert.equal(error.kind, 'rate_limited');
    assert.equal(error.retryAfterSeconds, 3600);
  });
});

test('a 429 is a rate limit too', async () => {
  await withGitHub({}, async (github) => {
    github.failWith({ status: 429, retryAfterSeconds: 5, message: 'You have exceeded a secondary rate limit.' });
    const client = new GitHubClient({ token: TOKEN }, { ...fast, apiUrl: github.url });
    const error = await codeHostError(client.listRepositories());
    assert.equal(error.kind, 'rate_limited');
    assert.equal(error.retryAfterSeconds, 5);
  });
});

for (const status of [500, 502, 503]) {
  test(`a host answering ${status} is unavailable after the retries`, async () => {
    await withGitHub({}, async (github) => {
      github.failWith({ status });
      const client = new GitHubClient({ token: TOKEN }, { ...fast, apiUrl: github.url });
      const error = await codeHostError(client.listRepositories());

      assert.equal(error.kind, 'unavailable');
      assert.equal(error.hostStatus, status);
      assert.equal(github.requests.length, 3, 'one request and two retries');
    });
  });
}

test('a host that fails once in the middle of a listing is retried and the listing completes', async () => {
  await withGitHub({}, async (github) => {
    const client = new GitHubClient(appCredentials(), { ...fast, apiUrl: github.url });
    github.failWith({ status: 502, times: 1, path: '/app/' });
    github.failWith({ status: 503, times: 1, path: '/installation/' });
    const repos = await client.listRepositories();
    assert.equal(repos.length, 250);
  });
});

test('a host that cannot be reached is unavailable', async () => {
  const github = await startFakeGitHub({});
  const apiUrl = github.url;
  await github.close();
  const client = new GitHubClient({ token: TOKEN }, { retries: 0, apiUrl });
  const error = await codeHostError(client.listRepositories());
  assert.equal(error.kind, 'unavailable');
  assert.equal(error.hostStatus, undefined);
  assert.ok(!error.message.includes(TOKEN));
});

test('a repository URL is accepted when it is on the host and the token reaches it', async () => {
  const repositories = [
    ...makeRepositories(3),
    { id: 5000, owner: 'someone', name: 'hidden', default_branch: 'main', private: true },
  ];
  await withGitHub({ repositories, tokens: { [TOKEN]: [1001, 1002, 1003] } }, async (github) => {
    const client = new GitHubClient({ token: TOKEN }, { ...fast, apiUrl: github.url });

    const ok = await client.checkRepositoryUrl(`${github.webOrigin}/Octo-Org/repo-002.git`);
    assert.deepEqual(ok, {
      ok: true,
      repository: {
        id: 1002,
        name: 'repo-002',
        owner: 'octo-org',
        url: `${github.webOrigin}/octo-org/repo-002`,
        default_branch: 'main',
      },
    });

    const hidden = await client.checkRepositoryUrl(`${github.webOrigin}/someone/hidden`);
    assert.equal(hidden.ok, false);
    assert.equal(!hidden.ok && hidden.reason, 'not_reachable');

    const missing = await client.checkRepositoryUrl(`${github.webOrigin}/octo-org/nope`);
    assert.equal(!missing.ok && missing.reason, 'not_reachable');

    const elsewhere = await client.checkRepositoryUrl('https://github.com/octo-org/repo-002');
    assert.equal(!elsewhere.ok && elsewhere.reason, 'other_host');

    const malformed = await client.checkRepositoryUrl('octo-org/repo-002');
    assert.equal(!malformed.ok && malformed.reason, 'malformed');
  });
});

test('for an App, a public repository outside the installation is not reachable', async () => {
  const repositories = [
    ...makeRepositories(2),
    { id: 6000, owner: 'other-org', name: 'public-lib', default_branch: 'main', private: false },
  ];
  await withGitHub(
    {
      repositories,
      apps: [{ id: app.id, publicKey: app.publicKey, installations: { [INSTALLATION_ID]: [1001, 1002] } }],
    },
    async (github) => {
      const client = new GitHubClient(appCredentials(), { ...fast, apiUrl: github.url });
      const inside = await client.checkRepositoryUrl(`${github.webOrigin}/octo-org/repo-001`);
      assert.equal(inside.ok, true);
      const outside = await client.checkRepositoryUrl(`${github.webOrigin}/other-org/public-lib`);
      assert.equal(!outside.ok && outside.reason, 'not_reachable');
    },
  );
});

test('a repository check against a host that is down is an error, not a "not reachable"', async () => {
  await withGitHub({}, async (github) => {
    github.failWith({ status: 503 });
    const client = new GitHubClient({ token: TOKEN }, { ...fast, apiUrl: github.url });
    const error = await codeHostError(client.checkRepositoryUrl(`${github.webOrigin}/octo-org/repo-001`));
    assert.equal(error.kind, 'unavailable');
  });
});

test('two Apps on two hosts with the same installation id each use their own installation token', async () => {
  const alpha = createTestApp(1);
  const beta = createTestApp(2);
  const hostA = await startFakeGitHub({
    repositories: makeRepositories(3, 'alpha'),
    apps: [{ id: 1, publicKey: alpha.publicKey, installations: { 7: 'all' } }],
  });
  const hostB = await startFakeGitHub({
    repositories: makeRepositories(3, 'beta'),
    apps: [{ id: 2, publicKey: beta.publicKey, installations: { 7: 'all' } }],
  });
  try {
    const a = new GitHubClient(
      { app_id: 1, private_key: alpha.privateKey, installation_id: 7 },
      { ...fast, apiUrl: hostA.url },
    );
    const b = new GitHubClient(
      { app_id: 2, private_key: beta.privateKey, installation_id: 7 },
      { ...fast, apiUrl: hostB.url },
    );
    const [reposA, reposB] = await Promise.all([a.listRepositories(), b.listRepositories()]);
    assert.deepEqual([...new Set(reposA.map((r) => r.owner))], ['alpha']);
    assert.deepEqual([...new Set(reposB.map((r) => r.owner))], ['beta']);
    // Host B never saw host A's token.
    const tokenA = hostA.issuedTokens[0]?.token ?? 'none';
    assert.ok(hostB.requests.every((r) => !(r.authorization ?? '').includes(tokenA)));
    assert.equal(hostB.issuedTokens.length, 1);
  } finally {
    await hostA.close();
    await hostB.close();
  }
});

test('concurrent listings of one App integration share one token exchange', async () => {
  await withGitHub({}, async (github) => {
    const client = new GitHubClient(appCredentials(), { ...fast, apiUrl: github.url });
    const results = await Promise.all([
      client.listRepositories(),
      client.listRepositories(),
      client.listRepositories(),
    ]);
    assert.deepEqual(
      results.map((r) => r.length),
      [250, 250, 250],
    );
    assert.equal(github.requestsTo('POST', /\/access_tokens$/).length, 1);
  });
});
