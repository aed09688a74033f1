/**
 * The one place where errors become HTTP responses (style.md, practice 1). Bodies follow FastAPI:
 * `{"detail": "..."}`, or for 422 `{"detail": [{type, loc, msg, input}]}`, plus our stable `code`.
 */
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { AppError, ValidationError, type ErrorCode, type ValidationIssue } from '../errors.ts';
import { toValidationIssues } from './validation.ts';

function send(reply: FastifyReply, status: number, code: ErrorCode, detail: string | ValidationIssue[]) {
  return reply.status(status).type('application/json; charset=utf-8').send(JSON.stringify({ detail, code }));
}

/** Errors raised by Fastify itself before a handler runs, by their Fastify code. */
const FASTIFY_ERRORS: Record<string, { code: ErrorCode; detail?: string }> = {
  FST_ERR_CTP_BODY_TOO_LARGE: { code: 'payload_too_large', detail: 'Request body is too large.' },
  FST_ERR_CTP_INVALID_MEDIA_TYPE: { code: 'unsupported_media_type', detail: 'Unsupported Content-Type: send application/json.' },
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: { code: 'invalid_request', detail: 'Content-Length does not match the body.' },
};

function isJsonSyntaxError(error: FastifyError): boolean {
  return error instanceof SyntaxError || error.code === 'FST_ERR_CTP_EMPTY_JSON_BODY' || error.code === 'FST_ERR_CTP_INVALID_JSON_BODY';
}

/**
 * Errors Fastify's router raises before any hook runs (a malformed percent-encoding in the path, a path
 * parameter over maxParamLength): pass as Fastify's `frameworkErrors` option so they get our body shape
 * and the request id header too.
 */
export function frameworkErrorHandler(error: FastifyError, request: FastifyRequest, reply: FastifyReply) {
  reply.header('x-request-id', request.id);
  if (error.code === 'FST_ERR_BAD_URL') return send(reply, 400, 'invalid_request', 'The request path is not a valid URL (malformed percent-encoding).');
  if (error.code === 'FST_ERR_MAX_PARAM_LENGTH') {
    return send(reply, 422, 'validation_failed', [{ type: 'string_too_long', loc: ['path'], msg: 'A path parameter is too long' }]);
  }
  request.log.error({ err: error }, 'request failed in the router');
  return reply.status(500).type('application/json; charset=utf-8').send(JSON.stringify({ detail: 'Internal server error', code: 'internal', request_id: request.id }));
}

export function registerErrorHandler(app: FastifyInstance): void {
  app.setErrorHandler((error: FastifyError, request: FastifyRequest, reply: FastifyReply) => {
    if (error instanceof ValidationError) return send(reply, 422, 'validation_failed', error.issues);
    if (error instanceof AppError) {
      for (const [name, value] of Object.entries(error.headers)) reply.header(name, value);
      return send(reply, error.status, error.code, error.detail);
    }
    if (error.validation) {
      const context = error.validationContext ?? 'body';
      const data = context === 'body' ? request.body : context === 'querystring' ? request.query : context === 'params' ? request.params : request.headers;
      return send(reply, 422, 'validation_failed', toValidationIssues(error.validation, context, data));
    }
    if (isJsonSyntaxError(error)) {
      const issue: ValidationIssue = { type: 'json_invalid', loc: ['body'], msg: error.code === 'FST_ERR_CTP_EMPTY_JSON_BODY' ? 'Body is empty but Content-Type is application/json' : `JSON decode error: ${error.message}` };
      return send(reply, 422, 'validation_failed', [issue]);
    }
    const known = error.code ? FASTIFY_ERRORS[error.code] : undefined;
    if (known) return send(reply, error.statusCode ?? 400, known.code, known.detail ?? error.message);
    if (error.statusCode !== undefined && error.statusCode >= 400 && error.statusCode < 500) {
      return send(reply, error.statusCode, error.statusCode === 404 ? 'route_not_found' : 'invalid_request', error.message);
    }
    request.log.error({ err: error }, 'request failed');
    return reply.status(500).type('application/json; charset=utf-8').send(JSON.stringify({ detail: 'Internal server error', code: 'internal', request_id: request.id }));
  });

  app.setNotFoundHandler((request, reply) => send(reply, 404, 'route_not_found', `No route ${request.method} ${request.url.split('?')[0]}.`));
}
