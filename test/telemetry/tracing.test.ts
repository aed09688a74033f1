/**
 * Traces (src/telemetry/tracing.ts, src/http/request-tracing.ts): with OTEL_EXPORTER_OTLP_ENDPOINT set,
 * API requests arrive at an OTLP/HTTP receiver on loopback as spans, children of the caller's span.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe } from 'node:test';
import { ConfigError, loadConfig } from '../../src/config.ts';
import { startOtlpReceiver, type OtlpReceiver } from '../fakes/otlp-receiver.ts';
import { ADMIN_KEY, createTestApp, type TestApp } from '../support/harness.ts';
import { test } from '../support/limited-test.ts';

describe('API requests as spans', () => {
  let receiver: OtlpReceiver;
  let t: TestApp;

  before(async () => {
    receiver = await startOtlpReceiver();
    t = await createTestApp({
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint,
      OTEL_SERVICE_NAME: 'slipway-under-test',
    });
  });
  after(async () => {
    await t.close();
    await receiver.close();
  });

  test("a request with a traceparent is a server span in the caller's trace, named by its route", async () => {
    const traceId = randomBytes(16).toString('hex');
    const parentId = randomBytes(8).toString('hex');
    const reply = await t.app.inject({
      method: 'GET',
      url: '/v2/deployments?name_contains=upload-token-secret',
      headers: { 'x-api-key': ADMIN_KEY, traceparent: `00-${traceId}-${parentId}-01` },
    });
    assert.equal(reply.statusCode, 200);
    const span = await receiver.waitFor('of the list request', (s) => s.traceId === traceId);
    assert.equal(span.parentSpanId, parentId);
    assert.equal(span.name, 'GET /v2/deployments');
    assert.equal(span.kind, 2, 'SERVER');
    assert.equal(span.attributes['http.route'], '/v2/deployments');
    assert.equal(span.attributes['http.response.status_code'], 200);
    assert.equal(span.attributes['url.path'], '/v2/deployments');
    assert.ok(!JSON.stringify(span).includes('upload-token-secret'), 'the query string is not recorded');
    assert.equal(span.resource['service.name'], 'slipway-under-test');
  });

  test('a request without one starts a trace of its own; a refusal is recorded with its status', async () => {
    const marker = randomBytes(4).toString('hex');
    const reply = await t.app.inject({ method: 'GET', url: `/v2/deployments/${marker}`, headers: {} });
    assert.equal(reply.statusCode, 401);
    const span = await receiver.waitFor(
      'of the refused request',
      (s) => s.attributes['url.path'] === `/v2/deployments/${marker}`,
    );
    assert.equal(span.parentSpanId, '');
    assert.equal(span.name, 'GET /v2/deployments/:deployment_id');
    assert.equal(span.attributes['http.response.status_code'], 401);
  });
});

describe('tracing configuration', () => {
  test('no endpoint: no traces', () => {
    assert.equal(loadConfig({}).tracing, null);
  });

  test('the standard variables: endpoint (with /v1/traces added), a traces endpoint of its own, headers, name', () => {
    const config = loadConfig({
      OTEL_EXPORTER_OTLP_ENDPOINT: 'https://collector.example.com:4318/',
      OTEL_EXPORTER_OTLP_HEADERS: 'authorization=Bearer%20abc,x-team=agents',
    }).tracing!;
    assert.equal(config.tracesUrl, 'https://collector.example.com:4318/v1/traces');
    assert.equal(config.endpoint, 'https://collector.example.com:4318');
    assert.deepEqual(config.headers, { authorization: 'Bearer abc', 'x-team': 'agents' });
    assert.equal(config.serviceName, 'slipway');
    const own = loadConfig({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://127.0.0.1:4318/custom' }).tracing!;
    assert.equal(own.tracesUrl, 'http://127.0.0.1:4318/custom');
    assert.equal(own.endpoint, null);
  });

  test('bad values stop the start, naming the variable', () => {
    for (const [name, value] of [
      ['OTEL_EXPORTER_OTLP_ENDPOINT', 'collector:4318'],
      ['OTEL_EXPORTER_OTLP_ENDPOINT', 'ftp://collector'],
      ['OTEL_EXPORTER_OTLP_ENDPOINT', 'http://user:pass@collector:4318'],
      ['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', 'not a url'],
    ] as const) {
      assert.throws(
        () => loadConfig({ [name]: value }),
        (error: unknown) => error instanceof ConfigError && error.message.includes(name),
        `${name}=${value}`,
      );
    }
    assert.throws(
      () => loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_EXPORTER_OTLP_HEADERS: 'no-equals-sign' }),
      /OTEL_EXPORTER_OTLP_HEADERS/,
    );
    assert.throws(
      () => loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_EXPORTER_OTLP_HEADERS: 'a=%E0%A4%A' }),
      /OTEL_EXPORTER_OTLP_HEADERS/,
    );
  });
});
