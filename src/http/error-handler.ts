/**
 * The one place where errors become HTTP responses. Bodies follow FastAPI:
 * `{"detail": "..."}`, or for 422 `{"detail": [{type, loc, msg, input}]}`, plus our stable `code`.
 */
import { isDatabaseUnavailable } from '../db/connection-errors.ts';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest, HTTPMethods } from 'fastify';
import { AppError, ValidationError, type ErrorCode, type ValidationIssue } from '../errors.ts';
import { statusOf, type CodeWithStatus, type ErrorStatus } from './error-statuses.ts';
import { redactSecrets } from './secret-fields.ts';
import { toValidationIssues } from './validation.ts';

function send(reply: FastifyReply, status: number, code: ErrorCode, detail: string | ValidationIssue[]) {
  return reply.status(status).type('application/json; charset=utf-8').send(JSON.stringify({ detail, code }));
}

/** The one way a 422 is answered: whatever raised it, no item echoes a secret of the route's schemas. */
function validationFailed(
  reply: FastifyReply,
  request: FastifyRequest,
  issues: ValidationIssue[],
  code: CodeWithStatus<422> = 'validation_failed',
) {
  return send(reply, 422, code, redactSecrets(issues, request.routeOptions.schema));
}

/** Errors raised by Fastify itself before a handler runs, by their Fastify code. */
const FASTIFY_ERRORS: Record<string, { code: ErrorCode; detail?: string }> = {
  FST_ERR_CTP_BODY_TOO_LARGE: { code: 'payload_too_large', detail: 'Request body is too large.' },
  FST_ERR_CTP_INVALID_MEDIA_TYPE: {
    code: 'unsupported_media_type',
    detail: 'Unsupported Content-Type: send application/json.',
  },
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: { code: 'malformed_request', detail: 'Content-Length does not match the body.' },
};

/**
 * The code of a client error that comes with nothing but its HTTP status (from Fastify, a plugin, or
 * Node). Typed so that each status can only name a code registered for it.
 */
const CLIENT_ERRORS: { [S in ErrorStatus]?: CodeWithStatus<S> } = {
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

/**
 * A status with no code of its own (a 402 or a 418 from some plugin) is answered 400 invalid_request:
 * a code is always sent with the status it is registered for.
 */
export function clientErrorCode(status: number): { status: number; code: ErrorCode } {
  const code = (CLIENT_ERRORS as Partial<Record<number, ErrorCode>>)[status];
  return code === undefined ? { status: 400, code: 'invalid_request' } : { status: statusOf(code), code };
}

function isJsonSyntaxError(error: FastifyError): boolean {
  return (
    error instanceof SyntaxError ||
    error.code === 'FST_ERR_CTP_EMPTY_JSON_BODY' ||
    error.code === 'FST_ERR_CTP_INVALID_JSON_BODY'
  );
}

/**
 * Errors Fastify's router raises before any hook runs (a malformed percent-encoding in the path, a path
 * parameter over maxParamLength): pass as Fastify's `frameworkErrors` option so they get our body shape
 * and the request id header too.
 */
export function frameworkErrorHandler(error: FastifyError, request: FastifyRequest, reply: FastifyReply) {
  reply.header('x-request-id', request.id);
  if (error.code === 'FST_ERR_BAD_URL')
    return send(reply, 400, 'invalid_request', 'The request path is not a valid URL (malformed percent-encoding).');
  if (error.code === 'FST_ERR_MAX_PARAM_LENGTH') {
    // No input is echoed, so there is nothing to redact (and this request has no route options).
    return send(reply, 422, 'validation_failed', [
      { type: 'string_too_long', loc: ['path'], msg: 'A path parameter is too long' },
    ]);
  }
  request.log.error({ err: error }, 'request failed in the router');
  return reply
    .status(500)
    .type('application/json; charset=utf-8')
    .send(JSON.stringify({ detail: 'Internal server error', code: 'internal', request_id: request.id }));
}

/** What a client is told to wait when the database is down (it is usually back within seconds). */
const DATABASE_RETRY_AFTER_SECONDS = '5';

export function registerErrorHandler(app: FastifyInstance): void {
  app.setErrorHandler((error: FastifyError, request: FastifyRequest, reply: FastifyReply) => {
    if (error instanceof ValidationError) return validationFailed(reply, request, error.issues, error.code);
    if (error instanceof AppError) {
      if (error.data.retryAfterSeconds !== undefined) reply.header('retry-after', String(error.data.retryAfterSeconds));
      return send(reply, statusOf(error.code), error.code, error.detail);
    }
    if (error.validation) {
      const context = error.validationContext ?? 'body';
      const data =
        context === 'body'
          ? request.body
          : context === 'querystring'
            ? request.query
            : context === 'params'
              ? request.params
              : request.headers;
      return validationFailed(reply, request, toValidationIssues(error.validation, context, data));
    }
    if (isJsonSyntaxError(error)) {
      const issue: ValidationIssue = {
        type: 'json_invalid',
        loc: ['body'],
        msg:
          error.code === 'FST_ERR_CTP_EMPTY_JSON_BODY'
            ? 'Body is empty but Content-Type is application/json'
            : `JSON decode error: ${error.message}`,
      };
      return validationFailed(reply, request, [issue]);
    }
    const known = error.code ? FASTIFY_ERRORS[error.code] : undefined;
    if (known) return send(reply, statusOf(known.code), known.code, known.detail ?? error.message);
    if (error.statusCode !== undefined && error.statusCode >= 400 && error.statusCode < 500) {
      if (error.statusCode === 422)
        return validationFailed(reply, request, [{ type: 'value_error', loc: ['body'], msg: error.message }]);
      const { status, code } = clientErrorCode(error.statusCode);
      return send(reply, status, code, error.message);
    }
    if (isDatabaseUnavailable(error)) {
      request.log.warn({ err: error }, 'database unavailable');
      reply.header('retry-after', DATABASE_RETRY_AFTER_SECONDS);
      return send(reply, 503, 'unavailable', 'The database is not reachable right now; retry shortly.');
    }
    request.log.error({ err: error }, 'request failed');
    return reply
      .status(500)
      .type('application/json; charset=utf-8')
      .send(JSON.stringify({ detail: 'Internal server error', code: 'internal', request_id: request.id }));
  });

  const allowedMethods = registerMethodIndex(app);
  app.setNotFoundHandler((request, reply) => {
    const path = request.url.split('?')[0]!;
    const allowed = allowedMethods(path);
    // The method's own route declined (a file of /docs that does not exist): that is a 404 as well.
    if (allowed.length === 0 || allowed.includes(request.method))
      return send(reply, 404, 'route_not_found', `No route ${request.method} ${path}.`);
    reply.header('allow', allowed.join(', '));
    return send(
      reply,
      405,
      'method_not_allowed',
      `${path} does not take ${request.method}; it takes ${allowed.join(', ')}.`,
    );
  });
}

/**
 * The methods the routes of a path take, for the Allow header of a 405 (RFC 9110 §15.5.6): every method
 * some route uses, asked of Fastify's own router, so that path parameters, wildcards and percent-encoding
 * match exactly as they do for a request. The dashboard's catch-all (`/*`, GET) matches every path and
 * yields to the API (src/routes/dashboard.ts): a match of a wildcard that spans the whole path says
 * nothing about the path, so it does not count.
 */
function registerMethodIndex(app: FastifyInstance): (path: string) => string[] {
  const methods = new Set<HTTPMethods>();
  app.addHook('onRoute', (route) => {
    for (const method of Array.isArray(route.method) ? route.method : [route.method]) methods.add(method);
  });
  return (path) => {
    const whole = decodedPath(path);
    return [...methods]
      .filter((method) => {
        const found = app.findRoute({ method, url: path });
        if (found === null) return false;
        const params = found.params as Record<string, string | undefined>;
        return !(Object.keys(params).length === 1 && params['*'] !== undefined && `/${params['*']}` === whole);
      })
      .sort();
  };
}

/** The path as the router's parameters hold it: percent-decoded (the path as sent when it does not decode). */
function decodedPath(path: string): string {
  try {
    return decodeURIComponent(path);
  } catch {
    return path;
  }
}
