/**
 * Code-host integrations through HTTP: create (token and GitHub App), read, delete, and the interface's
 * repository listing, against a fake GitHub on loopback.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { sql } from 'kysely';
import { client, createTestApp } from '../support/harness.ts';
import {
  INSTALLATION_ID,
  TOKEN,
  createTokenIntegration,
  deliver,
  otherWorkspace,
  startCodehostFixture,
  type CodehostFixture,
} from './codehost-fixture.ts';

let f: CodehostFixture;

/** A port nothing listens on, allowed so that the service tries it (see "a host that cannot be reached"). */
const CLOSED_PORT_URL = 'http://127.0.0.1:9';

before(async () => {
  f = await startCodehostFixture({ allowedUrls: [CLOSED_PORT_URL] });
});
after(() => f.close());

const BASE = '/v1/integrations/forge/codehost';

describe('create', () => {
  test('a token integration is created, checked against the host, and shows its webhook secret once', async () => {
    const res = await f.api.post(BASE, { name: 'github-token', api_url: f.github.url, token: TOKEN });
    assert.equal(res.status, 201, JSON.stringify(res.body));
    const body = res.body;
    assert.equal(body.name, 'github-token');
    assert.equal(body.kind, 'token');
    assert.equal(body.api_url, f.github.url);
    assert.equal(body.app_id, null);
    assert.equal(body.webhook_url, `https://slipway.example.com${BASE}/${body.id}/webhooks`);
    assert.match(body.webhook_secret, /^[0-9a-f]{64}$/);
    assert.equal(JSON.stringify(body).includes(TOKEN), false);
    // One request of the listing's first page told whether the host accepts the token.
    assert.ok(f.github.requestsTo('GET', '/user/repos').length >= 1);

    const read = await f.api.get(`${BASE}/${body.id}`);
    assert.equal(read.status, 200);
    assert.equal(read.body.webhook_secret, undefined, 'the webhook secret is shown at create only');
    assert.equal(JSON.stringify(read.body).includes(TOKEN), false);
  });

  test('credentials and the webhook secret are encrypted at rest', async () => {
    const created = await createTokenIntegration(f, 'at-rest', { webhook_secret: 'my-webhook-secret-1234' });
    assert.equal(created.webhook_secret, 'my-webhook-secret-1234');
    const row = await f.t.database.db
      .selectFrom('codehost_integrations')
      .selectAll()
      .where('id', '=', created.id)
      .executeTakeFirstOrThrow();
    assert.equal(row.credentials_encrypted.includes(TOKEN), false);
    assert.equal(row.webhook_secret_encrypted.includes('my-webhook-secret-1234'), false);
    assert.deepEqual(JSON.parse(f.t.secretBox.open(row.credentials_encrypted)), { token: TOKEN });
  });

  test('a GitHub App integration exchanges its app JWT for an installation token at create', async () => {
    const exchanges = () => f.github.requestsTo('POST', `/app/installations/${INSTALLATION_ID}/access_tokens`).length;
    const before = exchanges();
    const res = await f.api.post(BASE, {
      name: 'github-app',
      api_url: f.github.url,
      app_id: f.githubApp.id,
      private_key: f.githubApp.privateKey,
      installation_id: String(INSTALLATION_ID),
    });
    assert.equal(res.status, 201, JSON.stringify(res.body));
    assert.equal(res.body.kind, 'app');
    assert.equal(res.body.app_id, String(f.githubApp.id));
    assert.equal(res.body.installation_id, String(INSTALLATION_ID));
    assert.equal(JSON.stringify(res.body).includes('PRIVATE KEY'), false);
    assert.equal(exchanges(), before + 1);

    // The token exchanged at create serves the first listing.
    const repos = await f.api.get(`${BASE}/${res.body.id}/repos`);
    assert.equal(repos.status, 200);
    assert.equal(repos.body.length, 250);
    assert.equal(exchanges(), before + 1);
  });

  test('a token the host rejects is refused with a 400 that says so, without the token, and nothing is stored', async () => {
    const bad = 'ghp_not_accepted_by_the_host_0123456789';
    const res = await f.api.post(BASE, { name: 'rejected', api_url: f.github.url, token: bad });
    assert.equal(res.status, 400);
    assert.equal(res.body.code, 'codehost_rejected');
    assert.match(res.body.detail, /rejected the integration's credentials/);
    assert.match(res.body.detail, /Bad credentials/);
    assert.equal(JSON.stringify(res.body).includes(bad), false);
    const list = await f.api.get(`${BASE}?limit=100`);
    assert.equal(
      list.body.resources.some((i: { name: string }) => i.name === 'rejected'),
      false,
    );
  });

  test('an App whose key does not match is refused as rejected credentials', async () => {
    const res = await f.api.post(BASE, {
      name: 'wrong-app',
      api_url: f.github.url,
      app_id: 999,
      private_key: f.githubApp.privateKey,
      installation_id: INSTALLATION_ID,
    });
    assert.equal(res.status, 400);
    assert.equal(res.body.code, 'codehost_rejected');
    assert.equal(JSON.stringify(res.body).includes('PRIVATE KEY'), false);
  });

  test('bad bodies are refused, and secret fields are never echoed', async () => {
    const longToken = `ghp_${'x'.repeat(2000)}`;
    const cases: [Record<string, unknown>, number, RegExp][] = [
      [{ name: 'x' }, 400, /token is required/],
      [{ name: 'x', token: TOKEN, app_id: 1 }, 400, /either token, or app_id/],
      [{ name: 'x', app_id: 1, installation_id: 2 }, 400, /private_key is required/],
      [{ name: 'x', api_url: 'not a url', token: TOKEN }, 400, /api_url is not a valid URL/],
      [{ name: 'x', api_url: 'ftp://example.com', token: TOKEN }, 400, /api_url must be an http or https URL/],
      [{ name: 'x', api_url: 'https://user:pw@example.com', token: TOKEN }, 400, /must not carry credentials/],
      [{ name: 'x', token: longToken }, 422, /token/],
      [{ name: 'x', token: 12345678 }, 422, /token/],
      [{ name: 'x', token: TOKEN, webhook_secret: 'short' }, 422, /webhook_secret/],
      [{ name: '', token: TOKEN }, 422, /name/],
    ];
    for (const [body, status, detail] of cases) {
      const res = await f.api.post(BASE, { api_url: f.github.url, ...body });
      assert.equal(res.status, status, `${JSON.stringify(body).slice(0, 100)} -> ${JSON.stringify(res.body)}`);
      assert.match(JSON.stringify(res.body.detail), detail);
      const text = JSON.stringify(res.body);
      assert.equal(text.includes('xxxxxxxxxx'), false);
      assert.equal(text.includes('12345678'), false);
      assert.equal(text.includes('"short"'), false);
    }
  });

  test('plain http is refused unless SLIPWAY_ALLOW_INSECURE_CODEHOST is set', async () => {
    const strict = await createTestApp({}, { codehostClient: { retries: 0 } });
    try {
      const res = await client(strict.app).post(BASE, { name: 'insecure', api_url: f.github.url, token: TOKEN });
      assert.equal(res.status, 400);
      assert.match(res.body.detail, /api_url must be an https URL .*SLIPWAY_ALLOW_INSECURE_CODEHOST=1/);
    } finally {
      await strict.close();
    }
  });

  test('a second integration of the same name in the workspace is a conflict', async () => {
    await createTokenIntegration(f, 'twin');
    const res = await f.api.post(BASE, { name: 'twin', api_url: f.github.url, token: TOKEN });
    assert.equal(res.status, 409);
  });
});

describe('list, get, delete', () => {
  test('integrations are listed newest first in the list envelope', async () => {
    const a = await createTokenIntegration(f, 'list-a');
    const b = await createTokenIntegration(f, 'list-b');
    const res = await f.api.get(`${BASE}?limit=2`);
    assert.equal(res.status, 200);
    assert.deepEqual(
      res.body.resources.map((i: { id: string }) => i.id),
      [b.id, a.id],
    );
    assert.equal(res.body.offset, 2);
    assert.equal(JSON.stringify(res.body).includes(TOKEN), false);
    assert.equal((await f.api.get(`${BASE}?limit=0`)).status, 422);
  });

  test('another workspace sees none of them: 404', async () => {
    const mine = await createTokenIntegration(f, 'mine');
    const other = await otherWorkspace(f, 'other-ws-1');
    assert.equal((await other.api.get(`${BASE}/${mine.id}`)).status, 404);
    assert.equal((await other.api.get(`${BASE}/${mine.id}/repos`)).status, 404);
    assert.equal((await other.api.get(`${BASE}/${mine.id}/deliveries`)).status, 404);
    assert.equal((await other.api.delete(`${BASE}/${mine.id}`)).status, 404);
    assert.deepEqual((await other.api.get(BASE)).body.resources, []);
    assert.equal((await f.api.get(`${BASE}/${mine.id}`)).status, 200);
  });

  test('delete answers 204, then the integration is gone', async () => {
    const gone = await createTokenIntegration(f, 'to-delete');
    assert.equal((await f.api.delete(`${BASE}/${gone.id}`)).status, 204);
    const read = await f.api.get(`${BASE}/${gone.id}`);
    assert.equal(read.status, 404);
    assert.equal(read.body.detail, `Integration ID ${gone.id} not found.`);
    assert.equal((await f.api.delete(`${BASE}/${gone.id}`)).status, 404);
  });

  test('a malformed integration id is 422 with loc path', async () => {
    for (const url of [`${BASE}/not-a-uuid`, `${BASE}/not-a-uuid/repos`, `${BASE}/not-a-uuid/deliveries`]) {
      const res = await f.api.get(url);
      assert.equal(res.status, 422, url);
      assert.deepEqual(res.body.detail[0].loc, ['path', 'integration_id']);
    }
  });

  test('without an API key: 401', async () => {
    assert.equal((await client(f.t.app, null).get(BASE)).status, 401);
  });
});

describe('patch', () => {
  test('renames, and replaces an expired token after checking the new one', async () => {
    const integration = await createTokenIntegration(f, 'expiring');
    f.github.failWith({ status: 401, path: '/user/repos', times: 1 });
    assert.equal((await f.api.get(`${BASE}/${integration.id}/repos`)).status, 400);

    const refused = await f.api.patch(`${BASE}/${integration.id}`, { token: 'ghp_still_not_a_valid_token_000000' });
    assert.equal(refused.status, 400);
    assert.equal(refused.body.code, 'codehost_rejected');
    const stored = await f.t.database.db
      .selectFrom('codehost_integrations')
      .select('credentials_encrypted')
      .where('id', '=', integration.id)
      .executeTakeFirstOrThrow();
    assert.deepEqual(JSON.parse(f.t.secretBox.open(stored.credentials_encrypted)), { token: TOKEN });

    const renewed = await f.api.patch(`${BASE}/${integration.id}`, { name: 'renewed', token: TOKEN });
    assert.equal(renewed.status, 200, JSON.stringify(renewed.body));
    assert.equal(renewed.body.name, 'renewed');
    assert.equal(renewed.body.webhook_secret, undefined);
    assert.equal((await f.api.get(`${BASE}/${integration.id}/repos`)).status, 200);
  });

  test('switches a token integration to a GitHub App installation', async () => {
    const integration = await createTokenIntegration(f, 'to-app');
    const res = await f.api.patch(`${BASE}/${integration.id}`, {
      app_id: f.githubApp.id,
      private_key: f.githubApp.privateKey,
      installation_id: INSTALLATION_ID,
    });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.equal(res.body.kind, 'app');
    assert.equal(res.body.installation_id, String(INSTALLATION_ID));
    const listed = f.github.requestsTo('GET', '/installation/repositories').length;
    assert.equal((await f.api.get(`${BASE}/${integration.id}/repos`)).body.length, 250);
    assert.ok(
      f.github.requestsTo('GET', '/installation/repositories').length > listed,
      'the listing now uses the installation',
    );
  });

  test('rotates the webhook secret, shown once; the host cannot change', async () => {
    const integration = await createTokenIntegration(f, 'rotating');
    const rotated = await f.api.patch(`${BASE}/${integration.id}`, { rotate_webhook_secret: true });
    assert.equal(rotated.status, 200);
    assert.match(rotated.body.webhook_secret, /^[0-9a-f]{64}$/);
    assert.notEqual(rotated.body.webhook_secret, integration.webhook_secret);
    assert.equal((await f.api.get(`${BASE}/${integration.id}`)).body.webhook_secret, undefined);
    assert.equal(
      (await deliver(f, integration.id, { zen: 'hi' }, { event: 'ping', secret: integration.webhook_secret })).status,
      401,
    );
    assert.equal(
      (await deliver(f, integration.id, { zen: 'hi' }, { event: 'ping', secret: rotated.body.webhook_secret })).status,
      200,
    );

    const same = await f.api.patch(`${BASE}/${integration.id}`, { api_url: `${f.github.url}/` });
    assert.equal(same.status, 200);
    const moved = await f.api.patch(`${BASE}/${integration.id}`, { api_url: 'https://api.github.com' });
    assert.equal(moved.status, 400);
    assert.equal(
      moved.body.detail,
      'api_url cannot be changed after creation; create another integration for another host',
    );
    assert.equal(
      (
        await f.api.patch(`${BASE}/${integration.id}`, {
          webhook_secret: 'a-new-secret-of-16+',
          rotate_webhook_secret: true,
        })
      ).status,
      400,
    );
    assert.equal((await f.api.patch(`${BASE}/${integration.id}`, { name: 'twin' })).status, 409);
  });
});

describe('answers holding the webhook secret are kept by nobody', () => {
  /** Stored answers of the Idempotency-Key store that hold `text`. */
  const storedWith = async (text: string): Promise<number> =>
    (
      await sql<{
        n: number;
      }>`select count(*)::int as n from idempotency_keys where response_body like ${`%${text}%`}`.execute(
        f.t.database.db,
      )
    ).rows[0]!.n;

  test('a create retried with its Idempotency-Key is 409, not a second secret, and the secret is stored nowhere', async () => {
    const key = { 'idempotency-key': randomUUID() };
    const body = { name: 'retried-create', api_url: f.github.url, token: TOKEN };
    const first = await f.api.post(BASE, body, key);
    assert.equal(first.status, 201, JSON.stringify(first.body));
    assert.equal(first.headers['cache-control'], 'no-store');
    const retry = await f.api.post(BASE, body, key);
    assert.equal(retry.status, 409);
    assert.equal(retry.body.code, 'idempotency_response_not_kept');
    assert.equal(JSON.stringify(retry.body).includes(first.body.webhook_secret), false);
    assert.equal(await storedWith(first.body.webhook_secret), 0);
    const listed = await f.api.get(`${BASE}?limit=100`);
    assert.equal(listed.body.resources.filter((i: { name: string }) => i.name === 'retried-create').length, 1);
  });

  test('a patch that rotates the secret is not kept; a rename stays replayable', async () => {
    const integration = await createTokenIntegration(f, 'retried-patch');
    const key = { 'idempotency-key': randomUUID() };
    const rotated = await f.api.patch(`${BASE}/${integration.id}`, { rotate_webhook_secret: true }, key);
    assert.equal(rotated.status, 200);
    assert.equal(rotated.headers['cache-control'], 'no-store');
    const retry = await f.api.patch(`${BASE}/${integration.id}`, { rotate_webhook_secret: true }, key);
    assert.equal(retry.status, 409);
    assert.equal(retry.body.code, 'idempotency_response_not_kept');
    assert.equal(await storedWith(rotated.body.webhook_secret), 0);

    const renameKey = { 'idempotency-key': randomUUID() };
    const renamed = await f.api.patch(`${BASE}/${integration.id}`, { name: 'renamed-patch' }, renameKey);
    assert.equal(renamed.status, 200);
    assert.equal(renamed.headers['cache-control'], undefined);
    const replayed = await f.api.patch(`${BASE}/${integration.id}`, { name: 'renamed-patch' }, renameKey);
    assert.equal(replayed.status, 200);
    assert.equal(replayed.headers['idempotent-replayed'], 'true');
  });
});

describe('repository listing (the interface)', () => {
  test('a bare array of every repository over several pages, each with exactly the six fields', async () => {
    const integration = await createTokenIntegration(f, 'listing');
    const pagesBefore = f.github.requestsTo('GET', '/user/repos').length;
    const res = await f.api.get(`${BASE}/${integration.id}/repos`);
    assert.equal(res.status, 200);
    assert.ok(Array.isArray(res.body));
    assert.equal(res.body.length, 250);
    for (const repo of res.body) {
      assert.deepEqual(Object.keys(repo).sort(), [
        'default_branch',
        'host_integration_id',
        'id',
        'name',
        'owner',
        'url',
      ]);
      assert.equal(repo.host_integration_id, integration.id);
    }
    assert.deepEqual(res.body[0], {
      host_integration_id: integration.id,
      id: 1001,
      name: 'repo-001',
      owner: 'octo-org',
      url: `${f.github.webOrigin}/octo-org/repo-001`,
      default_branch: 'master',
    });
    assert.equal(res.body[1].default_branch, 'main');
    assert.equal(new Set(res.body.map((r: { id: number }) => r.id)).size, 250);
    const pages = f.github.requestsTo('GET', '/user/repos').slice(pagesBefore);
    assert.deepEqual(
      pages.map((p) => p.query.page ?? '1'),
      ['1', '2', '3'],
    );
  });

  test('a host that rejects the credentials gives a 400 that says so', async () => {
    const integration = await createTokenIntegration(f, 'revoked');
    f.github.failWith({ status: 401, path: '/user/repos', times: 1 });
    const res = await f.api.get(`${BASE}/${integration.id}/repos`);
    assert.equal(res.status, 400);
    assert.equal(res.body.code, 'codehost_rejected');
    assert.match(
      res.body.detail,
      /rejected the integration's credentials while listing repositories \(HTTP 401: Bad credentials/,
    );
    assert.equal(JSON.stringify(res.body).includes(TOKEN), false);
  });

  test('a host that is down gives 502 with the reason', async () => {
    const integration = await createTokenIntegration(f, 'host-down');
    f.github.failWith({ status: 500, path: '/user/repos', times: 1 });
    const res = await f.api.get(`${BASE}/${integration.id}/repos`);
    assert.equal(res.status, 502);
    assert.equal(res.body.code, 'bad_gateway');
    assert.match(res.body.detail, /is unavailable while listing repositories \(HTTP 500/);
    assert.equal(res.headers['retry-after'], undefined);
  });

  test('a host that is down and says when to come back gives 503 with Retry-After', async () => {
    const integration = await createTokenIntegration(f, 'host-maintenance');
    f.github.failWith({ status: 503, retryAfterSeconds: 30, path: '/user/repos', times: 1 });
    const res = await f.api.get(`${BASE}/${integration.id}/repos`);
    assert.equal(res.status, 503);
    assert.equal(res.headers['retry-after'], '30');
  });

  test('a host that cannot be reached gives 502', async () => {
    const integration = await createTokenIntegration(f, 'unreachable');
    // Point the stored integration at a closed port, as if the host went away.
    await f.t.database.db
      .updateTable('codehost_integrations')
      .set({ api_url: CLOSED_PORT_URL })
      .where('id', '=', integration.id)
      .execute();
    const res = await f.api.get(`${BASE}/${integration.id}/repos`);
    assert.equal(res.status, 502);
    assert.equal(
      res.body.detail,
      `The code host at ${CLOSED_PORT_URL} could not be reached while listing repositories.`,
    );
  });

  test('a rate limit gives 503 with the Retry-After the host sent', async () => {
    const integration = await createTokenIntegration(f, 'rate-limited');
    f.github.failWith({ status: 403, rateLimited: true, retryAfterSeconds: 42, path: '/user/repos', times: 1 });
    const res = await f.api.get(`${BASE}/${integration.id}/repos`);
    assert.equal(res.status, 503);
    assert.equal(res.body.code, 'unavailable');
    assert.equal(res.headers['retry-after'], '42');
    assert.match(res.body.detail, /rate-limited the integration while listing repositories/);
  });

  test('an App installation on a GitHub Enterprise Server path lists the repositories it covers', async () => {
    const covered = Array.from({ length: 130 }, (_, i) => 1101 + i);
    const partial = await startCodehostFixture({ pathPrefix: '/api/v3', installation: covered });
    try {
      const res = await partial.api.post(BASE, {
        name: 'ghes-app',
        api_url: partial.github.url,
        app_id: partial.githubApp.id,
        private_key: partial.githubApp.privateKey,
        installation_id: INSTALLATION_ID,
      });
      assert.equal(res.status, 201, JSON.stringify(res.body));
      assert.match(res.body.api_url, /\/api\/v3$/);
      const repos = await partial.api.get(`${BASE}/${res.body.id}/repos`);
      assert.equal(repos.status, 200);
      assert.deepEqual(
        repos.body.map((r: { id: number }) => r.id),
        covered,
      );
      assert.deepEqual(repos.body[0], {
        host_integration_id: res.body.id,
        id: 1101,
        name: 'repo-101',
        owner: 'octo-org',
        url: `${partial.github.webOrigin}/octo-org/repo-101`,
        default_branch: 'master',
      });
      assert.equal(
        partial.github.requestsTo('GET', '/installation/repositories').filter((r) => r.query.per_page === '100').length,
        2,
      );
    } finally {
      await partial.close();
    }
  });
});
