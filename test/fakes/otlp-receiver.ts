/**
 * An OpenTelemetry collector's OTLP/HTTP traces receiver on loopback, as far as the tests need one:
 * `POST /v1/traces` with an ExportTraceServiceRequest in OTLP's JSON encoding (what the OTLP/HTTP
 * exporter of OpenTelemetry JS sends) or in protobuf (names and resources only: otlp-protobuf.ts),
 * answered as a collector does (200 with an empty partial success; 400 for a body that is not OTLP; 404
 * elsewhere). Spans are kept, flattened, for the tests to read, and every request's method, path and
 * headers.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { gunzipSync } from 'node:zlib';
import { decodeTraceRequest } from './otlp-protobuf.ts';
import { eventually } from '../support/wait.ts';

export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  /** '' for a root span. */
  parentSpanId: string;
  name: string;
  kind: number;
  attributes: Record<string, unknown>;
  /** OTLP status code: 0 unset, 1 ok, 2 error. */
  status: number;
  /** The resource's attributes (service.name, ...). */
  resource: Record<string, unknown>;
}

export interface OtlpReceiver {
  /** http://127.0.0.1:<port>, for OTEL_EXPORTER_OTLP_ENDPOINT. */
  endpoint: string;
  spans: ReceivedSpan[];
  /** Every request that reached it, whatever its path. */
  requests: { method: string; path: string; headers: http.IncomingHttpHeaders; bytes: number }[];
  /** Resolves with the first span that matches, once it has arrived (the exporter sends in batches). */
  waitFor(what: string, match: (span: ReceivedSpan) => boolean): Promise<ReceivedSpan>;
  close(): Promise<void>;
}

interface KeyValue {
  key: string;
  value: Record<string, unknown>;
}

function anyValue(value: Record<string, unknown>): unknown {
  if ('stringValue' in value) return value.stringValue;
  if ('intValue' in value) return Number(value.intValue);
  if ('doubleValue' in value) return value.doubleValue;
  if ('boolValue' in value) return value.boolValue;
  if ('arrayValue' in value)
    return ((value.arrayValue as { values?: Record<string, unknown>[] }).values ?? []).map(anyValue);
  return null;
}

function attributes(list: KeyValue[] | undefined): Record<string, unknown> {
  return Object.fromEntries((list ?? []).map((kv) => [kv.key, anyValue(kv.value)]));
}

export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = [];
  const requests: OtlpReceiver['requests'] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      requests.push({
        method: req.method ?? '',
        path: req.url ?? '',
        headers: req.headers,
        bytes: chunks.reduce((n, c) => n + c.length, 0),
      });
      if (req.method !== 'POST' || req.url !== '/v1/traces') {
        res.writeHead(404).end();
        return;
      }
      try {
        let body = Buffer.concat(chunks);
        if (req.headers['content-encoding'] === 'gzip') body = gunzipSync(body);
        if (String(req.headers['content-type']).startsWith('application/x-protobuf')) {
          for (const span of decodeTraceRequest(body))
            spans.push({ traceId: '', spanId: '', parentSpanId: '', kind: 0, attributes: {}, status: 0, ...span });
          res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
          return;
        }
        if (!String(req.headers['content-type']).startsWith('application/json')) throw new Error('not JSON');
        const request = JSON.parse(body.toString('utf8')) as {
          resourceSpans: {
            resource?: { attributes?: KeyValue[] };
            scopeSpans: { spans: Record<string, unknown>[] }[];
          }[];
        };
        for (const rs of request.resourceSpans) {
          const resource = attributes(rs.resource?.attributes);
          for (const ss of rs.scopeSpans) {
            for (const span of ss.spans) {
              spans.push({
                traceId: String(span.traceId),
                spanId: String(span.spanId),
                parentSpanId: typeof span.parentSpanId === 'string' ? span.parentSpanId : '',
                name: String(span.name),
                kind: Number(span.kind),
                attributes: attributes(span.attributes as KeyValue[]),
                status: Number((span.status as { code?: number } | undefined)?.code ?? 0),
                resource,
              });
            }
          }
        }
        res.writeHead(200, { 'content-type': 'application/json' }).end('{"partialSuccess":{}}');
      } catch (error) {
        res.writeHead(400, { 'content-type': 'application/json' }).end(JSON.stringify({ message: String(error) }));
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    endpoint: `http://127.0.0.1:${port}`,
    spans,
    requests,
    waitFor(what, match) {
      return eventually(`the span ${what}`, () => spans.find(match), {
        everyMs: 50,
        describe: () => `spans received: ${spans.map((s) => s.name).join(', ') || 'none'}`,
      });
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
