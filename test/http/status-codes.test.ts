/**
 * A client error raised with only an HTTP status (by the framework, a plugin or Node) gets a stable code
 * registered for that very status: a 405 is never `invalid_request`, whose status is 400.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, test } from 'node:test';
import Fastify, { type FastifyInstance } from 'fastify';
import type { ErrorCode } from '../../src/errors.ts';
import { ERROR_RESPONSES as ERROR_CODES } from '../../src/http/error-statuses.ts';
import { registerErrorHandler } from '../../src/http/error-handler.ts';

let app: FastifyInstance;

before(async () => {
  app = Fastify();
  registerErrorHandler(app);
  app.get<{ Params: { status: string } }>('/fail/:status', async (request) => {
    throw Object.assign(new Error(`failed with ${request.params.status}`), {
      statusCode: Number(request.params.status),
    });
  });
  await app.ready();
});
after(() => app.close());

const CLIENT_ERRORS = Object.keys(http.STATUS_CODES)
  .map(Number)
  .filter((s) => s >= 400 && s < 500);

test('every 4xx answer carries a code registered with the status it is sent with', async () => {
  for (const status of CLIENT_ERRORS) {
    const res = await app.inject({ method: 'GET', url: `/fail/${status}` });
    const body = JSON.parse(res.body) as { code: ErrorCode; detail: unknown };
    assert.ok(body.code in ERROR_CODES, `${status}: ${body.code} is a registered code`);
    assert.equal(
      ERROR_CODES[body.code].status,
      res.statusCode,
      `${status}: answered ${res.statusCode} with ${body.code}, registered for ${ERROR_CODES[body.code].status}`,
    );
    assert.match(String(res.headers['content-type']), /^application\/json/, `${status}: JSON`);
  }
});

test('the statuses the framework and Node raise keep their status and get a code of their own', async () => {
  const expected: Record<number, ErrorCode> = {
    400: 'invalid_request',
    401: 'unauthenticated',
    403: 'forbidden',
    404: 'route_not_found',
    405: 'method_not_allowed',
    406: 'not_acceptable',
    408: 'request_timeout',
    409: 'conflict',
    412: 'precondition_failed',
    413: 'payload_too_large',
    414: 'uri_too_long',
    415: 'unsupported_media_type',
    416: 'range_not_satisfiable',
    417: 'expectation_failed',
    429: 'too_many_requests',
    431: 'header_too_large',
  };
  for (const [status, code] of Object.entries(expected)) {
    const res = await app.inject({ method: 'GET', url: `/fail/${status}` });
    assert.equal(res.statusCode, Number(status), `${status} keeps its status`);
    assert.equal(JSON.parse(res.body).code, code, `${status} is ${code}`);
  }
});
