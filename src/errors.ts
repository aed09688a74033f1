/**
 * Every error the service answers with has a stable code registered here, with its HTTP status.
 * Domain and store code throw `AppError`; `src/http/error-handler.ts` is the one place that turns it
 * into a response. docs/errors.md lists every code (a test keeps the two in step).
 */

export const ERROR_CODES = {
  // 400: a well-formed request that breaks a rule.
  invalid_request: { status: 400, summary: 'The request breaks a rule of the resource; detail names the field.' },
  field_required: { status: 400, summary: 'A field that the source (or the operation) needs is missing.' },
  field_not_allowed: { status: 400, summary: 'A field that does not belong to the source was given.' },
  field_immutable: { status: 400, summary: 'A field that cannot change after creation was given another value.' },
  invalid_reference: { status: 400, summary: 'The request refers to something that does not exist in the workspace (a listener, an integration, an upload).' },
  malformed_json: { status: 400, summary: 'The body is not valid JSON.' },
  malformed_request: { status: 400, summary: 'The request is not valid HTTP (framing, Content-Length, Transfer-Encoding, a header, no Host); the connection is closed.' },
  codehost_rejected: { status: 400, summary: 'The code host rejected the integration\'s credentials (a revoked token, an uninstalled GitHub App); fix the integration.' },
  // 401 / 403
  unauthenticated: { status: 401, summary: 'No API key was sent, or the key is unknown or revoked.' },
  webhook_signature_invalid: { status: 401, summary: 'A code-host webhook delivery without a valid X-Hub-Signature-256 for the integration\'s webhook secret.' },
  forbidden: { status: 403, summary: 'The key may not act on the workspace it asks for, or lacks the admin role.' },
  workspace_required: { status: 403, summary: 'An organization key with several workspaces must name one in X-Tenant-Id.' },
  // 404 / 405 / 406 / 408
  not_found: { status: 404, summary: 'The resource does not exist in the caller\'s workspace.' },
  route_not_found: { status: 404, summary: 'No such path.' },
  method_not_allowed: { status: 405, summary: 'The path exists but not with this method.' },
  not_acceptable: { status: 406, summary: 'No representation matches the Accept header; the API answers JSON.' },
  request_timeout: { status: 408, summary: 'The request did not arrive in time; the connection is closed.' },
  // 409 / 412
  conflict: { status: 409, summary: 'The write collides with existing state (a name or compute_id taken, a resource still in use).' },
  precondition_failed: { status: 412, summary: 'A conditional header (If-Match, If-Unmodified-Since) does not hold.' },
  // 413 / 414 / 415 / 416 / 417 / 422 / 429 / 431
  payload_too_large: { status: 413, summary: 'The body is larger than the configured limit.' },
  uri_too_long: { status: 414, summary: 'The request URL is longer than the service reads.' },
  unsupported_media_type: { status: 415, summary: 'The body is not sent as application/json (or as a tarball, for uploads).' },
  range_not_satisfiable: { status: 416, summary: 'The Range header asks for bytes the resource does not have.' },
  expectation_failed: { status: 417, summary: 'The Expect header asks for something other than 100-continue.' },
  validation_failed: { status: 422, summary: 'The request does not match the schema; detail is a list with loc, msg, type and input.' },
  too_many_requests: { status: 429, summary: 'Too many requests; retry after the time in Retry-After.' },
  header_too_large: { status: 431, summary: 'The request line and headers are larger than the service reads; the connection is closed.' },
  // 5xx
  internal: { status: 500, summary: 'An unexpected failure; the response carries the request id to quote.' },
  bad_gateway: { status: 502, summary: 'An outside service (a code host, an identity provider) failed.' },
  unavailable: { status: 503, summary: 'The service or an outside service it needs cannot answer now; retry later.' },
} as const satisfies Record<string, { status: number; summary: string }>;

export type ErrorCode = keyof typeof ERROR_CODES;

/** A status some code is registered for. */
export type ErrorStatus = (typeof ERROR_CODES)[ErrorCode]['status'];

/** The codes registered for `S`: a table from statuses to codes typed with this cannot pair them wrongly. */
export type CodeWithStatus<S extends ErrorStatus> = { [C in ErrorCode]: (typeof ERROR_CODES)[C]['status'] extends S ? C : never }[ErrorCode];

/** One item of a 422 body, FastAPI's shape. */
export interface ValidationIssue {
  type: string;
  loc: (string | number)[];
  msg: string;
  input?: unknown;
}

export class AppError extends Error {
  readonly status: number;
  constructor(
    readonly code: ErrorCode,
    readonly detail: string,
    readonly headers: Readonly<Record<string, string>> = {},
  ) {
    super(detail);
    this.name = 'AppError';
    this.status = ERROR_CODES[code].status;
  }
}

export class ValidationError extends AppError {
  constructor(readonly issues: ValidationIssue[]) {
    super('validation_failed', issues.map((i) => `${i.loc.join('.')}: ${i.msg}`).join('; '));
    this.name = 'ValidationError';
  }
}

/** Shorthands for the messages the contract fixes word for word. */
export const notFound = (kind: string, id: string): AppError => new AppError('not_found', `${kind} ID ${id} not found.`);
