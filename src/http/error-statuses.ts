/**
 * The HTTP status of every error code: the one table that ties the codes of src/errors.ts (which the
 * domain and the services throw, free of HTTP) to statuses. src/http/error-handler.ts answers with it,
 * and docs/errors.md documents each code with its status (test/openapi.test.ts keeps them in step).
 */
import { ERROR_CODES, type ErrorCode } from '../errors.ts';

export const ERROR_STATUSES = {
  // 400: a well-formed request that breaks a rule.
  invalid_request: 400,
  field_required: 400,
  field_not_allowed: 400,
  field_immutable: 400,
  invalid_reference: 400,
  endpoint_name_reserved: 400,
  preview_revision_reserved: 400,
  malformed_json: 400,
  malformed_request: 400,
  codehost_rejected: 400,
  // 401 / 403
  unauthenticated: 401,
  webhook_signature_invalid: 401,
  forbidden: 403,
  workspace_required: 403,
  // 404 / 405 / 406 / 408
  not_found: 404,
  route_not_found: 404,
  method_not_allowed: 405,
  not_acceptable: 406,
  request_timeout: 408,
  // 409 / 412
  conflict: 409,
  idempotency_key_in_progress: 409,
  idempotency_response_not_kept: 409,
  precondition_failed: 412,
  // 413 / 414 / 415 / 416 / 417 / 422 / 429 / 431
  payload_too_large: 413,
  uri_too_long: 414,
  unsupported_media_type: 415,
  range_not_satisfiable: 416,
  expectation_failed: 417,
  validation_failed: 422,
  idempotency_key_mismatch: 422,
  too_many_requests: 429,
  too_many_streams: 429,
  header_too_large: 431,
  // 5xx
  internal: 500,
  bad_gateway: 502,
  unavailable: 503,
} as const satisfies Record<ErrorCode, number>;

/** A status some code is registered for. */
export type ErrorStatus = (typeof ERROR_STATUSES)[ErrorCode];

/** The codes registered for `S`: a table from statuses to codes typed with this cannot pair them wrongly. */
export type CodeWithStatus<S extends ErrorStatus> = {
  [C in ErrorCode]: (typeof ERROR_STATUSES)[C] extends S ? C : never;
}[ErrorCode];

export const statusOf = (code: ErrorCode): ErrorStatus => ERROR_STATUSES[code];

/** Every code with its status and summary, as docs/errors.md lists them. */
export const ERROR_RESPONSES = Object.fromEntries(
  (Object.keys(ERROR_CODES) as ErrorCode[]).map((code) => [
    code,
    { status: ERROR_STATUSES[code], summary: ERROR_CODES[code].summary },
  ]),
) as { readonly [C in ErrorCode]: { readonly status: (typeof ERROR_STATUSES)[C]; readonly summary: string } };
