/**
 * Code-host integrations make the service connect to the URL they name, so they are guarded: only admin
 * keys write them, only hosts on the operator's allow-list (SLIPWAY_CODEHOST_ALLOWED_URLS) are accepted,
 * and a host that cannot be reached is reported without network details (no port scanner).
 */
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';
import pino from 'pino';
import { isAllowedApiUrl } from '../../src/codehost/allowed-urls.ts';
import { ConfigError, loadConfig } from '../../src/config.ts';
import { client, createTestApp } from '../support/harness.ts';
import { TOKEN, createTokenIntegration, startCodehostFixture, type CodehostFixture } from './codehost-fixture.ts';

const BASE = '/v1/integrations/forge/codehost';

let f: CodehostFixture;

before(async () => {
  f = await startCodehostFixture();
});
after(() => f.close());

/** A TCP listener that counts the connections it gets, and answers none of them. */
async function silentListener(): Promise<{ url: string; connections: () => number; close: () => Promise<void> }> {
  let connections = 0;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    connections += 1;
    sockets.add(socket);
    socket.on('error', () => undefined);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    connections: () => connections,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

describe('who may change integrations', () => {
  test('a member key can neither create, patch nor delete one, and no host is contacted for it', async () => {
    const member = client(f.t.app, (await f.api.post('/v2/api-keys', { name: 'member', role: 'member' })).body.key);
    const existing = await createTokenIntegration(f, 'admin-made');
    const requestsBefore = f.github.requests.length;

    const created = await member.post(BASE, { name: 'member-made', api_url: f.github.url, token: TOKEN });
    assert.equal(created.status, 403, JSON.stringify(created.body));
    assert.equal(created.body.code, 'forbidden');
    assert.equal((await member.patch(`${BASE}/${existing.id}`, { token: TOKEN })).status, 403);
    assert.equal((await member.patch(`${BASE}/${existing.id}`, { rotate_webhook_secret: true })).status, 403);
    assert.equal((await member.delete(`${BASE}/${existing.id}`)).status, 403);
    assert.equal(f.github.requests.length, requestsBefore, 'the service talked to no host for a refused request');

    // Reading stays open to every key of the workspace.
    assert.equal((await member.get(`${BASE}/${existing.id}`)).status, 200);
    assert.equal((await member.get(BASE)).status, 200);
    assert.equal((await member.get(`${BASE}/${existing.id}/repos`)).status, 200);
    assert.equal((await f.api.get(`${BASE}/${existing.id}`)).status, 200, 'the integration is still there');
    assert.equal(
      (await f.api.get(`${BASE}?limit=100`)).body.resources.some((i: { name: string }) => i.name === 'member-made'),
      false,
    );
  });
});

describe('SLIPWAY_CODEHOST_ALLOWED_URLS', () => {
  test('is read as comma-separated URL prefixes, defaults to https://api.github.com, and refuses what is not a URL', () => {
    assert.deepEqual(loadConfig({}).codehostAllowedUrls, ['https://api.github.com']);
    assert.deepEqual(
      loadConfig({ SLIPWAY_CODEHOST_ALLOWED_URLS: ' https://GHE.example.com/api/v3/ ,, https://api.github.com' })
        .codehostAllowedUrls,
      ['https://ghe.example.com/api/v3', 'https://api.github.com'],
    );
    for (const bad of [
      'not a url',
      'ftp://ghe.example.com',
      'https://user:pw@ghe.example.com',
      'https://ghe.example.com/?x=1',
      ',',
    ]) {
      assert.throws(
        () => loadConfig({ SLIPWAY_CODEHOST_ALLOWED_URLS: bad }),
        (err: unknown) => err instanceof ConfigError && err.variable === 'SLIPWAY_CODEHOST_ALLOWED_URLS',
        bad,
      );
    }
  });

  test('a prefix matches whole origins and whole path segments', () => {
    const allowed = ['https://api.github.com', 'https://ghe.example.com/api/v3'];
    for (const ok of ['https://api.github.com', 'https://ghe.example.com/api/v3', 'https://ghe.example.com/api/v3/sub'])
      assert.ok(isAllowedApiUrl(ok, allowed), ok);
    for (const no of [
      'https://api.github.com.evil.example',
      'https://api.github.com:8443',
      'http://api.github.com',
      'https://evil.example/https://api.github.com',
      'https://ghe.example.com',
      'https://ghe.example.com/api/v3evil',
      'https://ghe.example.com/api/v3/../../admin',
      'https://169.254.169.254/latest',
    ]) {
      assert.ok(!isAllowedApiUrl(no, allowed), no);
    }
  });

  test('an api_url off the list is refused with a 400 naming the setting, before any connection is made', async () => {
    const listener = await silentListener();
    const requestsBefore = f.github.requests.length;
    try {
      // The fake's own server under another name is another host as far as the list goes.
      for (const apiUrl of [listener.url, `${listener.url}/api/v3`, f.github.url.replace('127.0.0.1', 'localhost')]) {
        const res = await f.api.post(BASE, { name: 'internal', api_url: apiUrl, token: TOKEN });
        assert.equal(res.status, 400, `${apiUrl}: ${JSON.stringify(res.body)}`);
        assert.equal(res.body.code, 'invalid_request');
        assert.match(
          res.body.detail,
          /^api_url .* is not among the code hosts this service may reach \(SLIPWAY_CODEHOST_ALLOWED_URLS\)/,
        );
      }
      assert.equal(listener.connections(), 0, 'the service never connected');
      assert.equal(f.github.requests.length, requestsBefore);
    } finally {
      await listener.close();
    }
  });

  test('by default only https://api.github.com is allowed', async () => {
    const strict = await createTestApp({ SLIPWAY_ALLOW_INSECURE_CODEHOST: '1' }, { codehostClient: { retries: 0 } });
    try {
      for (const apiUrl of [f.github.url, 'https://api.github.com.evil.example', 'https://ghe.example.com/api/v3']) {
        const res = await client(strict.app).post(BASE, { name: 'elsewhere', api_url: apiUrl, token: TOKEN });
        assert.equal(res.status, 400, apiUrl);
        assert.match(res.body.detail, /SLIPWAY_CODEHOST_ALLOWED_URLS/);
      }
    } finally {
      await strict.close();
    }
  });

  test('new credentials for an integration whose host is no longer allowed are refused without contacting it', async () => {
    const integration = await createTokenIntegration(f, 'host-dropped');
    const listener = await silentListener();
    try {
      // As if the operator took the host off the list after the integration was made.
      await f.t.database.db
        .updateTable('codehost_integrations')
        .set({ api_url: listener.url })
        .where('id', '=', integration.id)
        .execute();
      const res = await f.api.patch(`${BASE}/${integration.id}`, { token: TOKEN });
      assert.equal(res.status, 400, JSON.stringify(res.body));
      assert.match(res.body.detail, /SLIPWAY_CODEHOST_ALLOWED_URLS/);
      assert.equal(listener.connections(), 0);
      // What needs no connection still works: renaming, and deleting it.
      assert.equal((await f.api.patch(`${BASE}/${integration.id}`, { name: 'host-dropped-2' })).status, 200);
      assert.equal((await f.api.delete(`${BASE}/${integration.id}`)).status, 204);
    } finally {
      await listener.close();
    }
  });
});

describe('a host that cannot be reached', () => {
  test('is reported the same whether the port is closed, TLS fails, the name does not resolve or nothing answers', async () => {
    const silent = await silentListener();
    const probe = net.createServer();
    await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
    const closedPort = (probe.address() as net.AddressInfo).port;
    await new Promise<void>((resolve) => probe.close(() => resolve()));
    const cases = {
      refused: `http://127.0.0.1:${closedPort}`,
      tls: f.github.url.replace('http://', 'https://'),
      dns: 'https://codehost.invalid',
      timeout: silent.url,
    };

    const logs: string[] = [];
    const t = await createTestApp(
      { SLIPWAY_ALLOW_INSECURE_CODEHOST: '1', SLIPWAY_CODEHOST_ALLOWED_URLS: Object.values(cases).join(',') },
      {
        logger: pino({ level: 'debug' }, { write: (line: string) => void logs.push(line) }),
        codehostClient: { retries: 0, timeoutMs: 500 },
      },
    );
    const app = t.app;
    try {
      const seen = new Map<string, string>();
      for (const [kind, apiUrl] of Object.entries(cases)) {
        const res = await client(app).post(BASE, { name: kind, api_url: apiUrl, token: TOKEN });
        assert.equal(res.status, 502, `${kind}: ${JSON.stringify(res.body)}`);
        assert.equal(res.body.code, 'bad_gateway');
        assert.equal(
          res.body.detail,
          `The code host at ${apiUrl} could not be reached while checking the credentials.`,
          kind,
        );
        assert.equal(res.headers['retry-after'], undefined);
        seen.set(kind, JSON.stringify({ ...res.body, detail: res.body.detail.replace(apiUrl, '<api_url>') }));
      }
      assert.equal(new Set(seen.values()).size, 1, `the answers differ: ${[...seen.values()].join(' / ')}`);
      // The operator still learns why: the details are in the service log.
      const log = logs.join('\n');
      assert.match(log, /ECONNREFUSED/);
      assert.match(log, /codehost\.invalid/);
    } finally {
      await t.close();
      await silent.close();
    }
  });
});
