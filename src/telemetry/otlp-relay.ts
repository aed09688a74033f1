/**
 * Apps' OpenTelemetry exports, through the service (docs/operations.md, "Traces"; docs/data-plane.md):
 * an app's OTEL_EXPORTER_OTLP_ENDPOINT leads to its own forward (src/dataplane/app-host-access.ts), whose
 * connections this relay takes in this process, knowing from the forward which running revision sent
 * them. It answers only OTLP/HTTP's `POST /v1/traces`, `/v1/metrics` and `/v1/logs`, in JSON or
 * protobuf, at most MAX_BODY_BYTES (compressed and uncompressed), and sends each on to the operator's
 * collector with the `slipway.*` resource attributes set to the sender's own (src/telemetry/otlp-resource.ts)
 * and the collector's headers (OTEL_EXPORTER_OTLP_HEADERS, which apps never see). The collector's answer
 * goes back to the app as it came.
 */
import http from 'node:http';
import type { Socket } from 'node:net';
import { gunzip } from 'node:zlib';
import { promisify } from 'node:util';
import type { Logger } from 'pino';
import type { TracingConfig } from '../config.ts';
import { OtlpPayloadError, rewriteJsonRequest, rewriteProtobufRequest, type OtlpSignal } from './otlp-resource.ts';

/** The largest export request an app may send (a batch of a few thousand spans); OTLP exporters send far less. */
export const MAX_BODY_BYTES = 4 * 1024 * 1024;
/** How long the collector may take to answer one export. */
const COLLECTOR_TIMEOUT_MS = 10_000;

const gunzipAsync = promisify(gunzip);
const SIGNALS: Record<string, OtlpSignal> = { '/v1/traces': 'traces', '/v1/metrics': 'metrics', '/v1/logs': 'logs' };

export interface OtlpRelay {
  /** Takes a connection from a running revision's forward; `resource` is its `slipway.*` attributes. */
  accept(socket: Socket, resource: Readonly<Record<string, string>>): void;
}

/** Where each signal goes: the traces URL the service uses itself, the others beside it when an endpoint is set. */
function collectorUrl(tracing: TracingConfig, signal: OtlpSignal): string | null {
  if (signal === 'traces') return tracing.tracesUrl;
  return tracing.endpoint === null ? null : `${tracing.endpoint}/v1/${signal}`;
}

class RelayRefusal extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** The body, at most MAX_BODY_BYTES as sent and once uncompressed. */
async function readBody(request: http.IncomingMessage): Promise<Buffer> {
  const declared = Number(request.headers['content-length'] ?? 0);
  if (declared > MAX_BODY_BYTES) throw new RelayRefusal(413, `the body is over ${MAX_BODY_BYTES} bytes`);
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of request as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) throw new RelayRefusal(413, `the body is over ${MAX_BODY_BYTES} bytes`);
    chunks.push(chunk);
  }
  const body = Buffer.concat(chunks);
  const encoding = (request.headers['content-encoding'] ?? 'identity').toLowerCase();
  if (encoding === 'identity') return body;
  if (encoding !== 'gzip') throw new RelayRefusal(415, `content-encoding ${encoding} is not supported (gzip is)`);
  return gunzipAsync(body, { maxOutputLength: MAX_BODY_BYTES }).catch((error: NodeJS.ErrnoException) => {
    if (error.code === 'ERR_BUFFER_TOO_LARGE' || error.code === 'ERR_OUT_OF_RANGE')
      throw new RelayRefusal(413, `the body is over ${MAX_BODY_BYTES} bytes uncompressed`);
    throw new RelayRefusal(400, 'the body is not valid gzip');
  });
}

export function createOtlpRelay(deps: {
  tracing: TracingConfig;
  logger: Pick<Logger, 'warn'>;
  fetch?: typeof fetch;
}): OtlpRelay {
  const { tracing, logger } = deps;
  const send = deps.fetch ?? fetch;
  const resources = new WeakMap<Socket, Readonly<Record<string, string>>>();

  async function relay(request: http.IncomingMessage, resource: Readonly<Record<string, string>>) {
    const signal = SIGNALS[(request.url ?? '').split('?')[0]!];
    if (signal === undefined) throw new RelayRefusal(404, 'only /v1/traces, /v1/metrics and /v1/logs are relayed');
    if (request.method !== 'POST') throw new RelayRefusal(405, 'only POST is relayed');
    const url = collectorUrl(tracing, signal);
    if (url === null) throw new RelayRefusal(404, `no collector is set for ${signal}`);
    const type = (request.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
    if (type !== 'application/json' && type !== 'application/x-protobuf')
      throw new RelayRefusal(415, 'the body must be application/json or application/x-protobuf');
    const body = await readBody(request);
    let rewritten: Uint8Array | string;
    try {
      rewritten =
        type === 'application/json'
          ? rewriteJsonRequest(signal, body.toString('utf8'), resource)
          : rewriteProtobufRequest(body, resource);
    } catch (error) {
      if (error instanceof OtlpPayloadError) throw new RelayRefusal(400, error.message);
      throw error;
    }
    const answer = await send(url, {
      method: 'POST',
      headers: { ...tracing.headers, 'content-type': type },
      body: typeof rewritten === 'string' ? rewritten : new Uint8Array(rewritten),
      signal: AbortSignal.timeout(COLLECTOR_TIMEOUT_MS),
    }).catch((error: unknown) => {
      logger.warn({ err: error, collector: url }, "an app's telemetry could not be sent on to the collector");
      throw new RelayRefusal(502, 'the collector could not be reached');
    });
    return {
      status: answer.status,
      type: answer.headers.get('content-type'),
      body: Buffer.from(await answer.arrayBuffer()),
    };
  }

  const server = http.createServer((request, response) => {
    const resource = resources.get(request.socket);
    if (resource === undefined) {
      response.writeHead(421).end();
      return;
    }
    relay(request, resource).then(
      (answer) => {
        response.writeHead(answer.status, answer.type ? { 'content-type': answer.type } : {}).end(answer.body);
      },
      (error: unknown) => {
        const refusal =
          error instanceof RelayRefusal ? error : new RelayRefusal(500, 'the export could not be relayed');
        if (!(error instanceof RelayRefusal)) logger.warn({ err: error }, "an app's telemetry export failed");
        // A refused body is not read to its end: the connection closes after the answer.
        response
          .writeHead(refusal.status, { 'content-type': 'application/json', connection: 'close' })
          .end(JSON.stringify({ code: refusal.status, message: refusal.message }));
      },
    );
  });
  return {
    accept(socket, resource) {
      resources.set(socket, resource);
      server.emit('connection', socket);
    },
  };
}
