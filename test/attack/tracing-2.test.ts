/**
 * Attack on the API's traces (src/http/request-tracing.ts) by any caller: a W3C `traceparent` whose
 * sampled flag is off asked OpenTelemetry's default (parent-based) sampler to record nothing of the
 * request, so a caller could keep all its requests out of the operator's traces. The caller's trace is
 * joined (its trace id and parent), but whether the service records its own work is the operator's.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before } from 'node:test';
import { startOtlpReceiver, type OtlpReceiver } from '../fakes/otlp-receiver.ts';
import { ADMIN_KEY, createTestApp, type TestApp } from '../support/harness.ts';
import { test } from '../support/limited-test.ts';

let receiver: OtlpReceiver;
let t: TestApp;

before(async () => {
  receiver = await startOtlpReceiver();
  t = await createTestApp({ OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint });
});
after(async () => {
  await t?.close();
  await receiver?.close();
});

test("a caller's unsampled traceparent does not keep its request out of the traces", async () => {
  const hidden = { traceId: randomBytes(16).toString('hex'), parentId: randomBytes(8).toString('hex') };
  const reply = await t.app.inject({
    method: 'DELETE',
    url: `/v2/deployments/${randomBytes(4).toString('hex')}`,
    headers: { 'x-api-key': ADMIN_KEY, traceparent: `00-${hidden.traceId}-${hidden.parentId}-00` },
  });
  assert.ok(reply.statusCode >= 400, reply.body);
  // A request after it, traced as usual: once its span is in, the batch before it was sent too.
  const marker = randomBytes(4).toString('hex');
  await t.app.inject({ method: 'GET', url: `/v2/deployments/${marker}`, headers: { 'x-api-key': ADMIN_KEY } });
  await receiver.waitFor('of the request after it', (s) => s.attributes['url.path'] === `/v2/deployments/${marker}`);
  const span = receiver.spans.find((s) => s.traceId === hidden.traceId);
  assert.ok(span, 'the request with an unsampled traceparent left no span');
  // Still in the caller's trace.
  assert.equal(span.parentSpanId, hidden.parentId);
  assert.equal(span.name, 'DELETE /v2/deployments/:deployment_id');
});
