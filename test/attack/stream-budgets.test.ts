/**
 * Attacks on the API's stream and long-poll caps (src/http/stream-limits.ts) by a tenant that holds
 * its own share: before, every caller on one address shared one cap (every app reaches the API from
 * 127.0.0.1, every fleet behind a reverse proxy from the proxy's address), so five member keys of one
 * workspace holding their caps made every other workspace's follows and long-polls answer 429, and a
 * fleet of listeners behind one proxy was not all served. Now the caps are per key and per workspace,
 * and a forwarded client address is believed only from a proxy the operator trusts.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, afterEach, before, beforeEach, describe } from 'node:test';
import { startTracing } from '../../src/telemetry/tracing.ts';
import { startOtlpReceiver } from '../fakes/otlp-receiver.ts';
import {
  ADMIN_KEY,
  buildReplicaApp,
  client,
  createTestApp,
  newWorkspace,
  newWorkspaceAdmin,
  registerListener,
  startReplica,
  type Replica,
  type TestApp,
} from '../support/harness.ts';
import { test } from '../support/limited-test.ts';

const PER_KEY = 4;
/** Five keys at their caps fill it: what today's single per-address cap was. */
const PER_ADDRESS = 5 * PER_KEY;
/** The fleet that long-polls through one address. */
const LISTENERS = 1_000;

let t: TestApp;
let live: Replica;

before(async () => {
  t = await createTestApp({
    SLIPWAY_STREAMS_PER_KEY: String(PER_KEY),
    SLIPWAY_STREAMS_PER_ADDRESS: String(PER_ADDRESS),
  });
});
beforeEach(async () => {
  live = await startReplica(t);
});
afterEach(async () => {
  const closing = live.close();
  live.app.server.closeAllConnections();
  await closing;
});
after(() => t.close());

interface Opened {
  status: number;
  close(): Promise<void>;
}

/** Opens a GET that the server may hold; its status, and a way to close it. */
async function open(url: string, headers: Record<string, string>): Promise<Opened> {
  const abort = new AbortController();
  const response = await fetch(url, { headers, signal: abort.signal });
  return {
    status: response.status,
    async close() {
      abort.abort();
      await response.body?.cancel().catch(() => undefined);
    },
  };
}

async function revisionOf(api: ReturnType<typeof client>, name: string): Promise<string> {
  const res = await api.post('/v2/deployments', {
    name,
    source: 'internal_container',
    source_revision_config: { image_uri: 'reg.example.com/a:1' },
  });
  assert.equal(res.status, 201, JSON.stringify(res.body));
  return `/v2/deployments/${res.body.id}/revisions/${res.body.latest_revision_id}/logs?follow=true`;
}

describe("one workspace's streams do not starve another's", () => {
  test("five member keys of workspace A at their caps leave B's follows and long-polls open", async () => {
    const a = client(t.app);
    const aFollow = await revisionOf(a, 'hog-a');
    const hogs: string[] = [];
    for (let i = 0; i < 5; i++) {
      const made = await a.post('/v2/api-keys', { name: `hog ${i}`, role: 'member' });
      assert.equal(made.status, 201);
      hogs.push(made.body.key);
    }
    const held: Opened[] = [];
    for (const key of hogs) {
      for (let i = 0; i < PER_KEY; i++) {
        const opened = await open(`${live.url}${aFollow}`, { 'x-api-key': key });
        assert.equal(opened.status, 200, 'each hog key opens its own share');
        held.push(opened);
      }
      // The key's own cap still holds it.
      const over = await open(`${live.url}${aFollow}`, { 'x-api-key': key });
      assert.equal(over.status, 429);
      await over.close();
    }

    const b = await newWorkspace(t, 'bystander');
    const bAdmin = await newWorkspaceAdmin(t, b.id, 'b admin');
    const bFollow = await revisionOf(client(t.app, bAdmin.key), 'victim-b');
    const follow = await open(`${live.url}${bFollow}`, { 'x-api-key': bAdmin.key });
    assert.equal(follow.status, 200, "workspace B's follow is refused while A holds its streams");
    held.push(follow);

    const listener = await registerListener((url, body) => client(t.app, bAdmin.key).post(url, body), 'b-cluster', [
      'agents',
    ]);
    const stateUrl = `${live.url}/v2/listeners/${listener.id}/desired-state`;
    const auth = { authorization: `Bearer ${listener.credential}` };
    const first = await fetch(stateUrl, { headers: auth });
    assert.equal(first.status, 200);
    const poll = await Promise.race([
      open(`${stateUrl}?wait=30`, { ...auth, 'if-none-match': first.headers.get('etag')! }),
      // A poll that waits gives no answer yet; a refused one answers at once.
      new Promise<null>((resolve) => setTimeout(() => resolve(null), 2_000)),
    ]);
    assert.equal(poll?.status ?? 'waiting', 'waiting', "workspace B's listener long-poll is refused");
    for (const opened of held) await opened.close();
  });
});

describe('a fleet of listeners long-polls through one address', () => {
  test(`${LISTENERS} listeners long-polling from one address are all served`, async () => {
    const api = client(t.app);
    const fleet: { id: string; credential: string }[] = [];
    for (let i = 0; i < LISTENERS; i += 25) {
      fleet.push(
        ...(await Promise.all(
          Array.from({ length: Math.min(25, LISTENERS - i) }, (_, n) =>
            registerListener((url, body) => api.post(url, body), `fleet-${i + n}`, ['agents']),
          ),
        )),
      );
    }
    const auth = (credential: string) => ({ authorization: `Bearer ${credential}` });
    const etags = new Map<string, string>();
    for (let i = 0; i < fleet.length; i += 50) {
      await Promise.all(
        fleet.slice(i, i + 50).map(async (l) => {
          const res = await fetch(`${live.url}/v2/listeners/${l.id}/desired-state`, { headers: auth(l.credential) });
          assert.equal(res.status, 200);
          etags.set(l.id, res.headers.get('etag')!);
        }),
      );
    }
    // Every listener waits at once, each on a connection of its own (node:http without an agent: no
    // socket reused from the reads above); nothing changes, so each answers 304 when its wait runs out.
    const answers = await Promise.all(
      fleet.map(
        (l) =>
          new Promise<number | string>((resolve) => {
            const url = `${live.url}/v2/listeners/${l.id}/desired-state?wait=15`;
            http
              .get(
                url,
                { agent: false, headers: { ...auth(l.credential), 'if-none-match': etags.get(l.id)! } },
                (res) => {
                  res.resume();
                  res.on('end', () => resolve(res.statusCode ?? 0));
                },
              )
              .on('error', (error: NodeJS.ErrnoException) => resolve(`error ${error.code ?? error.message}`));
          }),
      ),
    );
    const refused = answers.filter((status) => status !== 304);
    assert.deepEqual(refused, [], `${refused.length} of ${LISTENERS} long-polls were not served`);
  });
});

describe('a forwarded client address is believed only from a trusted proxy', () => {
  test('X-Forwarded-For from an untrusted peer is ignored; from the trusted proxy, it names the client', async () => {
    const receiver = await startOtlpReceiver();
    const tracing = startTracing(
      { tracesUrl: `${receiver.endpoint}/v1/traces`, endpoint: receiver.endpoint, headers: {}, serviceName: 'xff' },
      t.logger,
    );
    const proxy = await buildReplicaApp(t, {
      config: { ...t.config, trustedProxies: ['192.0.2.0/24'] },
      tracing,
    });
    try {
      const ask = async (remoteAddress: string, marker: string) => {
        const answer = await proxy.inject({
          method: 'GET',
          url: `/v2/deployments/${marker}`,
          headers: { 'x-forwarded-for': '203.0.113.9', 'x-api-key': ADMIN_KEY },
          remoteAddress,
        });
        assert.ok(answer.statusCode >= 400);
        const span = await receiver.waitFor(marker, (s) => s.attributes['url.path'] === `/v2/deployments/${marker}`);
        return span.attributes['client.address'];
      };
      // Another peer claims to forward for someone: its own address is what counts.
      assert.equal(await ask('198.51.100.4', 'untrusted'), '198.51.100.4');
      // The operator's proxy: the client it names.
      assert.equal(await ask('192.0.2.7', 'trusted'), '203.0.113.9');
    } finally {
      await proxy.close();
      await tracing.shutdown();
      await receiver.close();
    }
  });
});
