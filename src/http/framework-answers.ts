/**
 * Answers that Node's HTTP server gives on its own, before Fastify sees a request, in the service's
 * shape: the error envelope `{"detail", "code"}` and an X-Request-Id, like every other answer.
 *
 * - `clientErrorHandler` (Fastify's option of that name): requests the HTTP parser refuses (malformed
 *   framing, an invalid Content-Length or Transfer-Encoding, headers over the size limit) and requests
 *   that time out. There is no request object then, only the socket: the answer is written raw and the
 *   connection closed, as Node does.
 * - `registerFrameworkAnswers`: an Expect other than 100-continue (Node answers a bare 417), an
 *   HTTP/1.1 request without Host (Node answers a bare 400 unless `requireHostHeader: false`, which
 *   app.ts sets so that this hook answers instead), and a request that arrives while the service shuts
 *   down (Fastify's own `return503OnClosing` answer has no code and no request id; app.ts turns it off).
 */
import { randomUUID } from 'node:crypto';
import { STATUS_CODES, type IncomingMessage, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import { AppError, type ErrorCode } from '../errors.ts';
import { ERROR_STATUSES } from './error-statuses.ts';

function envelope(code: ErrorCode, detail: string): string {
  return JSON.stringify({ detail, code });
}

/** What to answer to an error of Node's HTTP parser or server, by its error code. */
function answerFor(error: Error & { code?: unknown; reason?: unknown }): { code: ErrorCode; detail: string } {
  if (error.code === 'ERR_HTTP_REQUEST_TIMEOUT')
    return { code: 'request_timeout', detail: 'The request did not arrive in time.' };
  if (error.code === 'HPE_HEADER_OVERFLOW')
    return { code: 'header_too_large', detail: 'The request line and headers are larger than the service reads.' };
  // llhttp's reason is a fixed description ("Invalid character in Content-Length"), never request text.
  const reason =
    typeof error.reason === 'string' && /^[\x20-\x7e]{1,200}$/.test(error.reason) ? `: ${error.reason}` : '';
  return { code: 'malformed_request', detail: `The request is not valid HTTP${reason}.` };
}

/** A response has already started on this connection: writing another would corrupt it (Node checks the same). */
function responseStarted(socket: Duplex): boolean {
  return (socket as Duplex & { _httpMessage?: ServerResponse | null })._httpMessage?.headersSent === true;
}

/**
 * Fastify's `clientErrorHandler`. Neither the answer nor the log quotes the request: its raw bytes may
 * hold an API key or a secret.
 */
export function clientErrorHandler(
  this: { log?: FastifyBaseLogger } | void,
  error: Error & { code?: unknown; reason?: unknown },
  socket: Socket | Duplex,
): void {
  // A reset connection has nobody left to answer.
  if (error.code === 'ECONNRESET' || socket.destroyed) return;
  const { code, detail } = answerFor(error);
  const requestId = randomUUID();
  const status = ERROR_STATUSES[code];
  if (this && this.log)
    this.log.debug(
      { code: typeof error.code === 'string' ? error.code : undefined, requestId, status },
      'refused a request the HTTP parser could not read',
    );
  if (socket.writable && !responseStarted(socket)) {
    const body = envelope(code, detail);
    socket.write(
      `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\n` +
        'Content-Type: application/json; charset=utf-8\r\n' +
        `Content-Length: ${Buffer.byteLength(body)}\r\n` +
        `X-Request-Id: ${requestId}\r\n` +
        'Connection: close\r\n\r\n' +
        body,
    );
  }
  socket.destroy();
}

/** Node's answer to an Expect it cannot meet, in the envelope. */
function expectationFailed(_request: IncomingMessage, response: ServerResponse): void {
  const body = envelope('expectation_failed', 'Only Expect: 100-continue is supported.');
  response.writeHead(ERROR_STATUSES.expectation_failed, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(body),
    'x-request-id': randomUUID(),
  });
  response.end(body);
}

/** Registers the answers above that need the app: call it after the hook that sets X-Request-Id. */
export function registerFrameworkAnswers(app: FastifyInstance): void {
  app.server.on('checkExpectation', expectationFailed);
  // Closing stops new connections and reaps idle ones; a request pipelined or sent on a busy keep-alive
  // connection still arrives, and a load balancer should send it elsewhere.
  let closing = false;
  app.addHook('preClose', async () => {
    closing = true;
  });
  app.addHook('onRequest', async (request, reply) => {
    if (closing) {
      reply.header('connection', 'close');
      throw new AppError('unavailable', 'The service is shutting down; retry shortly.', { retryAfterSeconds: 1 });
    }
    // RFC 9112 §3.2: a server must answer 400 to an HTTP/1.1 request without Host.
    if (request.raw.httpVersion === '1.1' && !request.headers.host)
      throw new AppError('malformed_request', 'An HTTP/1.1 request must have a Host header.');
  });
}
