/**
 * Every credential the service accepts is one the app edges strip before a request reaches an app: the
 * edges recognise the service's credentials by their prefix (`slw_`, `slwl_`, `slwa_`, `slwm_`), so a credential
 * without one would reach whatever app a caller sends it to (LangGraph's SDK sends its key to
 * deployments as `X-Api-Key`). Found with the README's own recovery advice: `SLIPWAY_BOOTSTRAP_API_KEY`
 * set to `openssl rand -hex 24`, an admin key without the prefix.
 *
 * - the configuration refuses a bootstrap key or a metrics token without its prefix, saying what to set;
 * - a key stored without it (made from such a value by an older version) opens nothing;
 * - on both edges, every kind of credential the service accepts, sent by a caller to an app as
 *   `X-Api-Key` or `Authorization: Bearer`, reaches no app; a deployment's protocol credential (`slwp_`),
 *   which opens nothing on the service, does: the app checks it itself.
 */
import assert from 'node:assert/strict';
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import fs from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { ConfigError, loadConfig } from '../../src/config.ts';
import { startAppEdge, type AppEdge } from '../../src/dataplane/app-edge.ts';
import { createLogger } from '../../src/logger.ts';
import { ADMIN_KEY, client, createTestApp, registerListener, type TestApp } from '../support/harness.ts';

/** The scraper's token for /metrics: a credential the service accepts, too. */
const METRICS_TOKEN = `slwm_${randomBytes(24).toString('hex')}`;

let t: TestApp;
let api: ReturnType<typeof client>;
let dataDir: string;

before(async () => {
  t = await createTestApp({ SLIPWAY_METRICS_TOKEN: METRICS_TOKEN });
  api = client(t.app);
  dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-credential-prefixes-'));
});
after(async () => {
  await t.close();
  await fs.rm(dataDir, { recursive: true, force: true });
});

describe('SLIPWAY_BOOTSTRAP_API_KEY', () => {
  test('without the slw_ prefix is refused at start, saying what to set', () => {
    for (const value of [
      randomBytes(24).toString('hex'),
      'my-own-admin-key-0123456789',
      'SLW_UPPER_0123456789abcdef',
    ]) {
      assert.throws(
        () => loadConfig({ SLIPWAY_DATA_DIR: dataDir, SLIPWAY_BOOTSTRAP_API_KEY: value }),
        (error: unknown) => {
          assert.ok(error instanceof ConfigError, String(error));
          assert.match(error.message, /SLIPWAY_BOOTSTRAP_API_KEY/);
          assert.match(error.message, /must start with slw_/);
          assert.match(error.message, /openssl rand -hex 24/, 'it says how to make one');
          assert.ok(!error.message.includes(value), 'the value itself is not repeated');
          return true;
        },
        value,
      );
    }
  });

  test('with the prefix is taken as it is', () => {
    const value = `slw_${randomBytes(24).toString('hex')}`;
    assert.equal(loadConfig({ SLIPWAY_DATA_DIR: dataDir, SLIPWAY_BOOTSTRAP_API_KEY: value }).bootstrapApiKey, value);
  });
});

describe('SLIPWAY_METRICS_TOKEN', () => {
  test('without the slwm_ prefix is refused at start, saying what to set', () => {
    for (const value of [randomBytes(24).toString('hex'), 'slw_0123456789abcdef0123']) {
      assert.throws(
        () => loadConfig({ SLIPWAY_DATA_DIR: dataDir, SLIPWAY_METRICS_TOKEN: value }),
        (error: unknown) => {
          assert.ok(error instanceof ConfigError, String(error));
          assert.match(error.message, /SLIPWAY_METRICS_TOKEN/);
          assert.match(error.message, /must start with slwm_/);
          assert.ok(!error.message.includes(value), 'the value itself is not repeated');
          return true;
        },
        value,
      );
    }
  });
});

test('a key stored without the prefix (made by an older version) opens nothing', async () => {
  const legacy = randomBytes(24).toString('hex');
  const { rows } = await t.database.pool.query(
    "select organization_id, workspace_id from api_keys where name like 'bootstrap%' and revoked_at is null limit 1",
  );
  assert.ok(rows[0], 'the bootstrap key of the test app');
  await t.database.pool.query(
    `insert into api_keys (id, organization_id, workspace_id, name, role, key_hash, key_prefix)
     values ($1, $2, $3, 'legacy bootstrap', 'admin', $4, $5)`,
    [
      randomUUID(),
      rows[0].organization_id,
      rows[0].workspace_id,
      createHash('sha256').update(legacy).digest(),
      legacy.slice(0, 10),
    ],
  );
  for (const headers of [{ 'x-api-key': legacy }, { authorization: `Bearer ${legacy}` }] as Record<string, string>[]) {
    const res = await client(t.app, null).get('/v2/deployments', headers);
    assert.equal(res.status, 401, `${JSON.stringify(Object.keys(headers))}: ${JSON.stringify(res.body)}`);
  }
});

let madeProtocolCredential: Promise<string> | null = null;
/** A protocol credential of a deployment, checked to open nothing on the service (made once). */
const protocolCredential = () => (madeProtocolCredential ??= makeProtocolCredential());

async function makeProtocolCredential(): Promise<string> {
  const deployment = await api.post('/v2/deployments', {
    name: 'prefix-protocol',
    source: 'internal_container',
    source_revision_config: { image_uri: 'registry.example.com/agent:1' },
  });
  assert.equal(deployment.status, 201, JSON.stringify(deployment.body));
  const made = await api.post(`/v2/deployments/${deployment.body.id}/protocol-credentials`, {});
  assert.equal(made.status, 201, JSON.stringify(made.body));
  const credential = made.body.credential as string;
  for (const headers of [{ 'x-api-key': credential }, { authorization: `Bearer ${credential}` }] as Record<
    string,
    string
  >[])
    assert.equal((await client(t.app, null).get('/v2/deployments', headers)).status, 401);
  return credential;
}

let madeCredentials: Promise<Record<string, string>> | null = null;
/** Every kind of credential the service accepts, each checked to open something (made once). */
const acceptedCredentials = () => (madeCredentials ??= makeCredentials());

async function makeCredentials(): Promise<Record<string, string>> {
  const made = await api.post('/v2/api-keys', { name: 'member', role: 'member' });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  const listener = await registerListener(api.post, `cluster-${randomUUID()}`, ['agents']);
  const deployment = await api.post('/v2/deployments', {
    name: 'prefix-check',
    source: 'internal_container',
    source_revision_config: { image_uri: 'registry.example.com/agent:1' },
  });
  assert.equal(deployment.status, 201, JSON.stringify(deployment.body));
  const agent = await api.post(`/v2/deployments/${deployment.body.id}/agent-credentials`, {
    agent_ids: ['support-agent'],
  });
  assert.equal(agent.status, 201, JSON.stringify(agent.body));
  const credentials = {
    'the bootstrap key': ADMIN_KEY,
    'an API key': made.body.key as string,
    'a listener credential': listener.credential,
    'an agent credential': agent.body.credential as string,
    'the metrics token': METRICS_TOKEN,
  };
  // Each opens what it is for (a listener's desired state, for a listener credential).
  assert.equal((await client(t.app, credentials['an API key']).get('/v2/deployments')).status, 200);
  const desired = await t.app.inject({
    method: 'GET',
    url: `/v2/listeners/${listener.id}/desired-state`,
    headers: { authorization: `Bearer ${listener.credential}` },
  });
  assert.equal(desired.statusCode, 200, desired.body);
  const scraped = await t.app.inject({
    method: 'GET',
    url: '/metrics',
    headers: { authorization: `Bearer ${METRICS_TOKEN}` },
  });
  assert.equal(scraped.statusCode, 200, scraped.body);
  return credentials;
}

async function startEchoApp(): Promise<{ port: number; seen: string[]; close(): Promise<void> }> {
  const seen: string[] = [];
  const server = http.createServer((req, res) => {
    seen.push(JSON.stringify(req.rawHeaders));
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.end('ok');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    seen,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

function get(port: number, headers: Record<string, string>): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.get(
      {
        hostname: '127.0.0.1',
        port,
        path: '/',
        headers: { host: 'prefix-app-0000000c.localhost', ...headers },
        agent: false,
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode!));
      },
    );
    req.on('error', reject);
  });
}

for (const kind of ['haproxy', 'builtin'] as const) {
  test(`no credential the service accepts reaches an app through the ${kind} edge`, async () => {
    const credentials = await acceptedCredentials();
    const edgeDir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-prefix-edge-'));
    let edge: AppEdge | null = null;
    const app = await startEchoApp();
    try {
      edge = await startAppEdge({
        config: {
          dataDir: edgeDir,
          appsDomain: 'localhost',
          appsHost: '127.0.0.1',
          appsPort: 0,
          appsPublicUrl: null,
          appsTls: null,
          edgeProxy: kind,
          drainTimeoutMs: 2_000,
        },
        logger: createLogger('silent'),
      });
      await edge.setTargets('prefix-app-0000000c', [{ instanceId: 'i-1', port: app.port }]);
      for (const [what, credential] of Object.entries(credentials)) {
        for (const headers of [{ 'x-api-key': credential }, { authorization: `Bearer ${credential}` }] as Record<
          string,
          string
        >[]) {
          const before = app.seen.length;
          const status = await get(edge.port, headers);
          assert.equal(status, 200, `${what}: the request itself is served`);
          const reached = app.seen.slice(before).join('\n');
          assert.ok(reached !== '', `${what}: the app got the request`);
          assert.ok(!reached.includes(credential), `${what} in ${Object.keys(headers)[0]} reached the app: ${reached}`);
        }
      }
      // A protocol credential (slwp_) is for the app, which checks it (docs/langgraph.md, "Who may call
      // MCP and A2A"): the edge passes it on; it opens nothing on the service.
      const protocol = await protocolCredential();
      const before = app.seen.length;
      assert.equal(await get(edge.port, { authorization: `Bearer ${protocol}` }), 200);
      assert.ok(app.seen.slice(before).join('\n').includes(protocol), 'the protocol credential reached the app');
    } finally {
      await edge?.close();
      await app.close();
      await fs.rm(edgeDir, { recursive: true, force: true });
    }
  });
}
