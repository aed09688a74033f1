/**
 * The `slipway.*` resource attributes of an OTLP export request, set to the sending deployment's own
 * (src/telemetry/otlp-relay.ts): whatever an app's spans, metrics or logs say about `slipway.*`, they
 * arrive at the collector as the app's. Every other attribute, and everything else of the request, is
 * left as it was.
 *
 * Both encodings of OTLP/HTTP: JSON (ExportTraceServiceRequest and its siblings as OTLP's JSON mapping
 * writes them) and protobuf. The protobuf request is rewritten on the wire (protobufjs's Reader and
 * Writer), so that fields this service does not know pass through byte for byte: in all three requests
 * field 1 is the repeated Resource{Spans,Metrics,Logs}, whose field 1 is the Resource, whose field 1 is
 * its repeated KeyValue attributes, whose field 1 is the key (opentelemetry-proto, collector/*\/v1 and
 * resource/v1).
 */
import protobuf from 'protobufjs/minimal.js';

export type OtlpSignal = 'traces' | 'metrics' | 'logs';

/** The request is not what its content type says: answered 400. */
export class OtlpPayloadError extends Error {}

const RESOURCE_LISTS: Record<OtlpSignal, string> = {
  traces: 'resourceSpans',
  metrics: 'resourceMetrics',
  logs: 'resourceLogs',
};

const isOwned = (key: unknown) => typeof key === 'string' && key.startsWith('slipway.');

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** An OTLP JSON export request with each resource's `slipway.*` attributes replaced by `own`. */
export function rewriteJsonRequest(signal: OtlpSignal, body: string, own: Readonly<Record<string, string>>): string {
  let request: unknown;
  try {
    request = JSON.parse(body);
  } catch {
    throw new OtlpPayloadError('the body is not JSON');
  }
  if (!isObject(request)) throw new OtlpPayloadError('the body is not an OTLP export request');
  // Collectors also read other spellings of the list (resource_spans): none may pass unrewritten.
  const other = Object.keys(request).find((key) => key !== RESOURCE_LISTS[signal]);
  if (other !== undefined) throw new OtlpPayloadError(`unknown field '${other}' (expected ${RESOURCE_LISTS[signal]})`);
  const list = request[RESOURCE_LISTS[signal]] ?? [];
  if (!Array.isArray(list)) throw new OtlpPayloadError(`${RESOURCE_LISTS[signal]} is not a list`);
  const ownAttributes = Object.entries(own).map(([key, value]) => ({ key, value: { stringValue: value } }));
  for (const entry of list) {
    if (!isObject(entry)) throw new OtlpPayloadError(`an entry of ${RESOURCE_LISTS[signal]} is not an object`);
    const resource = entry.resource ?? {};
    if (!isObject(resource)) throw new OtlpPayloadError('a resource is not an object');
    const attributes: unknown = resource.attributes ?? [];
    if (!Array.isArray(attributes)) throw new OtlpPayloadError("a resource's attributes are not a list");
    const kept = (attributes as unknown[]).filter((kv) => !(isObject(kv) && isOwned(kv.key)));
    resource.attributes = [...kept, ...ownAttributes];
    entry.resource = resource;
  }
  return JSON.stringify(request);
}

const LENGTH_DELIMITED = 2;

/** The fields of a protobuf message: number, wire type and the field's whole encoding (tag included). */
function* fieldsOf(message: Uint8Array): Generator<{ field: number; raw: Uint8Array; body: Uint8Array | null }> {
  const reader = protobuf.Reader.create(message);
  while (reader.pos < reader.len) {
    const start = reader.pos;
    const tag = reader.uint32();
    const field = tag >>> 3;
    const wireType = tag & 7;
    if (field === 0) throw new OtlpPayloadError('the protobuf body has a field numbered 0');
    let body: Uint8Array | null = null;
    if (wireType === LENGTH_DELIMITED) body = reader.bytes();
    else reader.skipType(wireType);
    yield { field, raw: message.subarray(start, reader.pos), body };
  }
}

/** Field `field` as a length-delimited value. */
function lengthDelimited(field: number, value: Uint8Array): Uint8Array {
  return protobuf.Writer.create()
    .uint32((field << 3) | LENGTH_DELIMITED)
    .bytes(value)
    .finish();
}

/** KeyValue{key, value: AnyValue{string_value}}. */
function stringKeyValue(key: string, value: string): Uint8Array {
  const anyValue = protobuf.Writer.create()
    .uint32((1 << 3) | LENGTH_DELIMITED)
    .string(value)
    .finish();
  return protobuf.Writer.create()
    .uint32((1 << 3) | LENGTH_DELIMITED)
    .string(key)
    .uint32((2 << 3) | LENGTH_DELIMITED)
    .bytes(anyValue)
    .finish();
}

/** The key of a KeyValue message (field 1; its last occurrence, which is what a decoder keeps), or null. */
function keyOf(keyValue: Uint8Array): string | null {
  let key: string | null = null;
  for (const { field, body } of fieldsOf(keyValue)) {
    if (field === 1 && body !== null) key = Buffer.from(body).toString('utf8');
  }
  return key;
}

/** A Resource message without its `slipway.*` attributes, with `own` after the others. */
function rewriteResource(resource: Uint8Array, own: readonly Uint8Array[]): Uint8Array {
  const kept: Uint8Array[] = [];
  for (const { field, body, raw } of fieldsOf(resource)) {
    if (field === 1 && body !== null && isOwned(keyOf(body))) continue;
    kept.push(raw);
  }
  return Buffer.concat([...kept, ...own.map((kv) => lengthDelimited(1, kv))]);
}

/** A Resource{Spans,Metrics,Logs} message with its resource rewritten (or given one, when it has none). */
function rewriteResourceEntry(entry: Uint8Array, own: readonly Uint8Array[]): Uint8Array {
  const parts: Uint8Array[] = [];
  let seen = false;
  for (const { field, body, raw } of fieldsOf(entry)) {
    if (field === 1 && body !== null) {
      seen = true;
      parts.push(lengthDelimited(1, rewriteResource(body, own)));
    } else parts.push(raw);
  }
  if (!seen) parts.unshift(lengthDelimited(1, rewriteResource(new Uint8Array(0), own)));
  return Buffer.concat(parts);
}

/** An OTLP protobuf export request (any of the three signals) with each resource's `slipway.*` attributes replaced by `own`. */
export function rewriteProtobufRequest(body: Uint8Array, own: Readonly<Record<string, string>>): Buffer {
  const ownAttributes = Object.entries(own).map(([key, value]) => stringKeyValue(key, value));
  try {
    const parts: Uint8Array[] = [];
    for (const { field, body: value, raw } of fieldsOf(body)) {
      parts.push(field === 1 && value !== null ? lengthDelimited(1, rewriteResourceEntry(value, ownAttributes)) : raw);
    }
    return Buffer.concat(parts);
  } catch (error) {
    if (error instanceof OtlpPayloadError) throw error;
    // protobufjs's reader throws a RangeError (or an Error for a wire type it does not know) on a truncated or broken body.
    throw new OtlpPayloadError(`the body is not protobuf: ${error instanceof Error ? error.message : String(error)}`);
  }
}
