/**
 * A reader of OTLP's protobuf ExportTraceServiceRequest for the fake collector (test/fakes/otlp-receiver.ts),
 * as far as the tests need: each span's name and its resource's string attributes (opentelemetry-proto:
 * ExportTraceServiceRequest.resource_spans = 1; ResourceSpans.resource = 1, .scope_spans = 2;
 * Resource.attributes = 1; KeyValue.key = 1, .value = 2; AnyValue.string_value = 1;
 * ScopeSpans.spans = 2; Span.name = 5). A decoder keeps the last of a repeated singular field.
 */
import protobuf from 'protobufjs/minimal.js';

/** Each length-delimited field of a message, by number, in order; other wire types skipped. */
function fields(message: Uint8Array): [number, Uint8Array][] {
  const reader = protobuf.Reader.create(message);
  const out: [number, Uint8Array][] = [];
  while (reader.pos < reader.len) {
    const tag = reader.uint32();
    if ((tag & 7) === 2) out.push([tag >>> 3, reader.bytes()]);
    else reader.skipType(tag & 7);
  }
  return out;
}

const text = (bytes: Uint8Array) => Buffer.from(bytes).toString('utf8');

function stringAttributes(resource: Uint8Array): Record<string, unknown> {
  const attributes: Record<string, unknown> = {};
  for (const [n, kv] of fields(resource)) {
    if (n !== 1) continue;
    let key = '';
    let value: unknown = null;
    for (const [m, part] of fields(kv)) {
      if (m === 1) key = text(part);
      if (m === 2) for (const [k, v] of fields(part)) if (k === 1) value = text(v);
    }
    attributes[key] = value;
  }
  return attributes;
}

export function decodeTraceRequest(body: Uint8Array): { name: string; resource: Record<string, unknown> }[] {
  const spans: { name: string; resource: Record<string, unknown> }[] = [];
  for (const [n, resourceSpans] of fields(body)) {
    if (n !== 1) continue;
    let resource: Record<string, unknown> = {};
    const names: string[] = [];
    for (const [m, part] of fields(resourceSpans)) {
      if (m === 1) resource = { ...resource, ...stringAttributes(part) };
      if (m === 2)
        for (const [k, span] of fields(part)) {
          if (k !== 2) continue;
          let name = '';
          for (const [f, v] of fields(span)) if (f === 5) name = text(v);
          names.push(name);
        }
    }
    for (const name of names) spans.push({ name, resource });
  }
  return spans;
}
