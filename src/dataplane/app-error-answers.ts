/**
 * The router's own answers (src/dataplane/app-router.ts), when a request for an app cannot reach it:
 * in the API's error shape, with a request id, on a response or on the raw socket of an upgrade.
 */
import { randomUUID } from 'node:crypto';
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import type { ErrorCode } from '../errors.ts';

const REQUEST_ID = /^[\x21-\x7e]{1,200}$/;

function requestId(req: IncomingMessage): string {
  const given = req.headers['x-request-id'];
  return typeof given === 'string' && REQUEST_ID.test(given) ? given : randomUUID();
}

/** Responses the edge answered itself (not an instance), for the series' `edge` class. */
export const edgeAnswered = new WeakSet<ServerResponse>();

function errorBody(detail: string, code: ErrorCode): string {
  return JSON.stringify({ detail, code });
}

export function sendError(
  req: IncomingMessage,
  res: ServerResponse,
  status: number,
  code: ErrorCode,
  detail: string,
): void {
  if (res.headersSent) {
    // Part of the app's answer is out: cut it so the client sees a broken response, not a hang.
    res.destroy();
    return;
  }
  if (res.destroyed || res.writableEnded) return;
  const body = errorBody(detail, code);
  edgeAnswered.add(res);
  res.writeHead(status, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(body),
    'x-request-id': requestId(req),
  });
  res.end(body);
}

/** The same answer on a raw socket, for upgrades that cannot go through. */
export function sendSocketError(
  req: IncomingMessage,
  socket: Duplex,
  status: number,
  code: ErrorCode,
  detail: string,
): void {
  if (socket.destroyed || !socket.writable) return;
  const body = errorBody(detail, code);
  socket.once('finish', () => socket.destroy());
  socket.end(
    `HTTP/1.1 ${status} ${http.STATUS_CODES[status] ?? ''}\r\n` +
      `content-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\n` +
      `x-request-id: ${requestId(req)}\r\nconnection: close\r\n\r\n${body}`,
  );
}
