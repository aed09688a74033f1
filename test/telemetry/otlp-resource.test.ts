/**
 * The relay's rewrite of an OTLP export's `slipway.*` resource attributes (src/telemetry/otlp-resource.ts),
 * on requests made by OpenTelemetry's own serializers and on the tricks a hand-made request can play
 * (a key given twice, another spelling of the list, a resource left out, fields the service does not know).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { JsonTraceSerializer, ProtobufTraceSerializer } from '@opentelemetry/otlp-transformer';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-node';
import protobuf from 'protobufjs/minimal.js';
import { OtlpPayloadError, rewriteJsonRequest, rewriteProtobufRequest } from '../../src/telemetry/otlp-resource.ts';
import { decodeTraceRequest } from '../fakes/otlp-protobuf.ts';

const OWN = { 'slipway.deployment.id': 'own-deployment', 'slipway.revision.id': 'own-revision' };

function spans() {
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({
    resource: resourceFromAttributes({ 'service.name': 'app', 'slipway.deployment.id': 'victim', 'slipway.x': 'y' }),
    spanProcessors: [new SimpleSpanProcessor(exporter)],
  });
  provider.getTracer('t').startSpan('work').end();
  return exporter.getFinishedSpans();
}

test("JSON: slipway.* attributes become the sender's, the others stay", () => {
  const body = Buffer.from(JsonTraceSerializer.serializeRequest(spans())!).toString('utf8');
  const out = JSON.parse(rewriteJsonRequest('traces', body, OWN));
  const attributes = Object.fromEntries(
    out.resourceSpans[0].resource.attributes.map((kv: { key: string; value: { stringValue?: string } }) => [
      kv.key,
      kv.value.stringValue,
    ]),
  );
  assert.equal(attributes['slipway.deployment.id'], 'own-deployment');
  assert.equal(attributes['slipway.revision.id'], 'own-revision');
  assert.equal(attributes['slipway.x'], undefined);
  assert.equal(attributes['service.name'], 'app');
  assert.equal(out.resourceSpans[0].scopeSpans[0].spans[0].name, 'work');
});

test('JSON: a resource left out gets the own attributes; other spellings and other shapes are refused', () => {
  const out = JSON.parse(rewriteJsonRequest('logs', '{"resourceLogs":[{"scopeLogs":[]}]}', OWN));
  assert.deepEqual(
    out.resourceLogs[0].resource.attributes.map((kv: { key: string }) => kv.key),
    Object.keys(OWN),
  );
  for (const body of [
    '{"resource_spans":[{"resource":{"attributes":[{"key":"slipway.deployment.id","value":{"stringValue":"victim"}}]}}]}',
    '{"resourceSpans":[],"resource_spans":[]}',
    '{"resourceSpans":{}}',
    '{"resourceSpans":[{"resource":{"attributes":{}}}]}',
    '[]',
    'not json',
  ])
    assert.throws(() => rewriteJsonRequest('traces', body, OWN), OtlpPayloadError, body);
});

test("protobuf: slipway.* attributes become the sender's, the others stay", () => {
  const body = ProtobufTraceSerializer.serializeRequest(spans())!;
  const [span] = decodeTraceRequest(rewriteProtobufRequest(body, OWN));
  assert.equal(span?.name, 'work');
  assert.equal(span.resource['slipway.deployment.id'], 'own-deployment');
  assert.equal(span.resource['slipway.revision.id'], 'own-revision');
  assert.equal(span.resource['slipway.x'], undefined);
  assert.equal(span.resource['service.name'], 'app');
});

/** A length-delimited field. */
const ld = (field: number, value: Uint8Array | string) =>
  typeof value === 'string'
    ? protobuf.Writer.create()
        .uint32((field << 3) | 2)
        .string(value)
        .finish()
    : protobuf.Writer.create()
        .uint32((field << 3) | 2)
        .bytes(value)
        .finish();

test('protobuf: a key given twice, a resource left out, and unknown fields', () => {
  // KeyValue{key: "harmless", key: "slipway.deployment.id", value: "victim"}: a decoder keeps the last key.
  const twice = Buffer.concat([ld(1, 'harmless'), ld(1, 'slipway.deployment.id'), ld(2, ld(1, 'victim'))]);
  const span = Buffer.concat([ld(5, 'sneaky')]);
  const unknown = protobuf.Writer.create()
    .uint32((9 << 3) | 0)
    .uint32(77)
    .finish();
  const resourceSpans = Buffer.concat([ld(1, ld(1, twice)), ld(2, ld(2, span)), unknown]);
  const noResource = Buffer.concat([ld(2, ld(2, ld(5, 'bare')))]);
  const request = Buffer.concat([ld(1, resourceSpans), ld(1, noResource)]);
  const out = rewriteProtobufRequest(request, OWN);
  const decoded = decodeTraceRequest(out);
  assert.deepEqual(
    decoded.map((s) => [s.name, s.resource['slipway.deployment.id']]),
    [
      ['sneaky', 'own-deployment'],
      ['bare', 'own-deployment'],
    ],
  );
  assert.ok(out.includes(Buffer.from(unknown)), 'a field the service does not know passes as it was');
  assert.throws(() => rewriteProtobufRequest(Buffer.from([0x0a, 0xff, 0x01]), OWN), OtlpPayloadError);
});
