/**
 * A revision's way through the local data plane as a trace (src/telemetry/tracing.ts): a `revision` span
 * with `build` (fetch, extract, install) and `deploy` (start, health, switch) under it, exported to an
 * OTLP receiver on loopback; and the app gets the standard OTEL_* variables, through which its own spans
 * reach the same receiver, also from inside its sandbox (a forward to the host's loopback).
 */
import assert from 'node:assert/strict';
import { after, before } from 'node:test';
import { startTestService, uploadApp, waitForRevision, type TestService } from '../dataplane/data-plane-harness.ts';
import { startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from '../fakes/otlp-receiver.ts';
import { test } from '../support/limited-test.ts';

/** Sends one span of its own, as an instrumented app's exporter would, then serves. */
const SERVER = `
import http from 'node:http';
const resource = Object.fromEntries((process.env.OTEL_RESOURCE_ATTRIBUTES ?? '').split(',').filter(Boolean)
  .map((pair) => pair.split('=')).map(([k, v]) => [k, decodeURIComponent(v)]));
const attr = (key, value) => ({ key, value: { stringValue: String(value) } });
const hex = (n) => Array.from({ length: n }, () => Math.floor(Math.random() * 16).toString(16)).join('');
const now = BigInt(Date.now()) * 1000000n;
const body = { resourceSpans: [{
  resource: { attributes: [attr('service.name', process.env.OTEL_SERVICE_NAME), ...Object.entries(resource).map(([k, v]) => attr(k, v))] },
  scopeSpans: [{ scope: { name: 'tiny-app' }, spans: [{ traceId: hex(32), spanId: hex(16), name: 'app started', kind: 1,
    startTimeUnixNano: String(now), endTimeUnixNano: String(now + 1000n), attributes: [] }] }],
}] };
let sent = 'not yet';
fetch(process.env.OTEL_EXPORTER_OTLP_ENDPOINT + '/v1/traces', {
  method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
}).then((r) => { sent = String(r.status); }, (e) => { sent = String(e.cause ?? e); });
http.createServer((req, res) => {
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ sent, endpoint: process.env.OTEL_EXPORTER_OTLP_ENDPOINT }));
}).listen(Number(process.env.PORT), process.env.HOST);
`;

let receiver: OtlpReceiver;
let service: TestService;
before(async () => {
  receiver = await startOtlpReceiver();
  service = await startTestService({ OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint });
});
after(async () => {
  await service.close();
  await receiver.close();
});

test('a revision is a trace of its steps, and the app sends its own spans to the same collector', async () => {
  const tarball = await uploadApp(service, {
    'package.json': JSON.stringify({
      name: 'traced',
      private: true,
      type: 'module',
      scripts: { start: 'node server.js' },
    }),
    'server.js': SERVER,
    'slipway.json': JSON.stringify({ health_check_path: '/', install: 'node --version' }),
  });
  const created = await service.api('POST', '/v2/deployments', {
    name: 'traced-agent',
    source: 'internal_source',
    source_config: {},
    source_revision_config: { source_tarball_path: tarball, framework_config_path: 'slipway.json' },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const deploymentId: string = created.body.id;
  const revisionId: string = created.body.latest_revision_id;
  const revision = await waitForRevision(service, deploymentId, revisionId);
  assert.equal(revision.status, 'DEPLOYED', JSON.stringify(revision));

  const root = await receiver.waitFor(
    'of the revision',
    (s) => s.name === 'revision' && s.attributes['slipway.revision.id'] === revisionId,
  );
  assert.equal(root.attributes['slipway.deployment.id'], deploymentId);
  assert.equal(root.parentSpanId, '', 'a trace of its own');
  const child = (name: string, parent: ReceivedSpan) =>
    receiver.waitFor(`${name} under ${parent.name}`, (s) => s.name === name && s.parentSpanId === parent.spanId);
  const build = await child('build', root);
  const deploy = await child('deploy', root);
  for (const step of ['fetch', 'extract', 'install']) await child(step, build);
  for (const step of ['start', 'health', 'switch']) await child(step, deploy);
  for (const span of receiver.spans.filter((s) => s.traceId === root.traceId)) {
    assert.equal(span.status, 0, `${span.name} did not fail`);
    assert.equal(span.resource['service.name'], 'slipway');
  }

  // The app's own span: its service is the deployment, its resource names deployment and revision.
  const own = await receiver.waitFor('of the app', (s) => s.name === 'app started');
  assert.equal(own.resource['service.name'], 'traced-agent');
  assert.equal(own.resource['slipway.deployment.id'], deploymentId);
  assert.equal(own.resource['slipway.revision.id'], revisionId);
});
