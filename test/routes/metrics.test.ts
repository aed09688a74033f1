/**
 * /metrics: Prometheus text without an API key (or only with the operator's bearer token, when
 * SLIPWAY_METRICS_TOKEN is set); the series move with what the service does.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { loadConfig } from '../../src/config.ts';
import { createTestClock } from '../support/clock.ts';
import { ADMIN_KEY, client, createTestApp, type TestApp } from '../support/harness.ts';

/** The service's clock: the listener gauge test moves it past a listener's 90 s instead of waiting. */
const clock = createTestClock();
let t: TestApp;
before(async () => {
  t = await createTestApp({}, { now: clock.now });
});
after(() => t.close());

async function scrape(): Promise<string> {
  const response = await t.app.inject({ method: 'GET', url: '/metrics' });
  assert.equal(response.statusCode, 200);
  assert.match(String(response.headers['content-type']), /^text\/plain/);
  return response.body;
}

/** The value of one series (name with its labels as printed), or 0 when absent. */
function value(text: string, series: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line ? Number(line.slice(series.length + 1)) : 0;
}

test('request counters, latency histograms and revision and queue gauges move', async () => {
  const api = client(t.app);
  const before = await scrape();
  const route = 'slipway_http_requests_total{method="GET",route="/v2/deployments",status="200"}';
  for (let i = 0; i < 3; i++) assert.equal((await api.get('/v2/deployments')).status, 200);
  assert.equal((await api.get('/v2/deployments/not-a-uuid')).status, 422);
  assert.equal((await api.post('/v2/listeners', { compute_type: 'k8s', compute_id: 'metered-cluster' })).status, 201);
  const created = await api.post('/v2/deployments', {
    name: 'metered',
    source: 'internal_container',
    source_revision_config: { image_uri: 'a:1' },
  });
  assert.equal(created.status, 201);

  const after = await scrape();
  assert.equal(value(after, route) - value(before, route), 3);
  assert.equal(
    value(after, 'slipway_http_requests_total{method="GET",route="/v2/deployments/:deployment_id",status="422"}'),
    1,
  );
  assert.ok(
    value(after, 'slipway_http_request_duration_seconds_count{method="GET",route="/v2/deployments",status="200"}') >= 3,
  );
  assert.equal(
    value(after, 'slipway_revisions{status="QUEUED"}') - value(before, 'slipway_revisions{status="QUEUED"}'),
    1,
  );
  assert.equal(
    value(after, 'slipway_deployments{status="AWAITING_DATABASE"}') -
      value(before, 'slipway_deployments{status="AWAITING_DATABASE"}'),
    1,
  );
  assert.equal(value(after, 'slipway_work_queue_depth') - value(before, 'slipway_work_queue_depth'), 1);
  assert.ok(value(after, 'slipway_work_queue_oldest_age_seconds') >= 0);
  assert.equal(
    value(after, 'slipway_listeners{state="never_seen"}') - value(before, 'slipway_listeners{state="never_seen"}'),
    1,
  );
  assert.match(after, /slipway_process_resident_memory_bytes/);
});

test('the listener gauge counts a listener as the API shows it: connected after a heartbeat, stale after 90 s without one', async () => {
  const api = client(t.app);
  const made = await api.post('/v2/listeners', { compute_type: 'k8s', compute_id: 'gauged-cluster' });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  const credential = (await api.post(`/v2/listeners/${made.body.id}/credentials`, {})).body.credential;
  const gauges = async () => {
    const text = await scrape();
    return {
      connected: value(text, 'slipway_listeners{state="connected"}'),
      stale: value(text, 'slipway_listeners{state="stale"}'),
      shown: (await api.get(`/v2/listeners/${made.body.id}`)).body.state as string,
    };
  };
  const unseen = await gauges();
  const beat = await client(t.app, null).post(
    `/v2/listeners/${made.body.id}/heartbeat`,
    { version: '1.0.0', namespaces: ['default'] },
    { authorization: `Bearer ${credential}` },
  );
  assert.equal(beat.status, 200, JSON.stringify(beat.body));
  const seen = await gauges();
  assert.deepEqual(seen, { connected: unseen.connected + 1, stale: unseen.stale, shown: 'connected' });
  clock.advance(89_000);
  assert.deepEqual(await gauges(), seen, 'still connected 89 s later');
  clock.advance(2_000);
  assert.deepEqual(
    await gauges(),
    { connected: unseen.connected, stale: unseen.stale + 1, shown: 'stale' },
    'stale 91 s later, in both',
  );
});

test('SLIPWAY_METRICS_TOKEN makes /metrics need that bearer token; nothing else opens it', async () => {
  const token = 'slwm_scrape-token-0123456789abcdef';
  const guarded = await createTestApp({ SLIPWAY_METRICS_TOKEN: token });
  try {
    const scrapeWith = (headers: Record<string, string>) =>
      guarded.app.inject({ method: 'GET', url: '/metrics', headers });
    const refusedHeaders: Record<string, string>[] = [
      {},
      { authorization: 'Bearer wrong-token-0123456789abcdef' },
      { authorization: `Bearer ${token}x` },
      { authorization: `Bearer ${token.slice(0, -1)}` },
      { authorization: `Basic ${Buffer.from(`x:${token}`).toString('base64')}` },
      { authorization: token },
      // An API key, even an admin one, is not the metrics token.
      { 'x-api-key': ADMIN_KEY },
      { authorization: `Bearer ${ADMIN_KEY}` },
    ];
    for (const headers of refusedHeaders) {
      const refused = await scrapeWith(headers);
      assert.equal(refused.statusCode, 401, JSON.stringify(headers));
      assert.equal(refused.json().code, 'unauthenticated');
      assert.match(String(refused.headers['www-authenticate']), /^Bearer/);
      assert.ok(!refused.body.includes('slipway_'), 'no metric in a refusal');
    }
    const allowed = await scrapeWith({ authorization: `Bearer ${token}` });
    assert.equal(allowed.statusCode, 200);
    assert.match(allowed.body, /slipway_http_requests_total/);
    // The scheme's name is case-insensitive (RFC 9110).
    assert.equal((await scrapeWith({ authorization: `bearer ${token}` })).statusCode, 200);
  } finally {
    await guarded.close();
  }
});

test('a metrics token too short to be safe stops the start, naming the variable', () => {
  assert.throws(() => loadConfig({ SLIPWAY_METRICS_TOKEN: 'short' }), /SLIPWAY_METRICS_TOKEN/);
});
