/**
 * Every error the service answers with has a stable code registered here. Domain, service and store
 * code throw `AppError` with a code and a detail, and nothing of HTTP: the status of each code is in
 * src/http/error-statuses.ts, and src/http/error-handler.ts is the one place that turns an error into
 * a response. docs/errors.md lists every code (a test keeps the two in step). A broken invariant (a
 * bug, such as a transition the state machine forbids) is an `InvariantError`, answered 500.
 */

export const ERROR_CODES = {
  // 400: a well-formed request that breaks a rule.
  invalid_request: { summary: 'The request breaks a rule of the resource; detail names the field.' },
  field_required: { summary: 'A field that the source (or the operation) needs is missing.' },
  field_not_allowed: { summary: 'A field that does not belong to the source was given.' },
  field_immutable: { summary: 'A field that cannot change after creation was given another value.' },
  invalid_reference: {
    summary:
      'The request refers to something that does not exist in the workspace (a listener, an integration, an upload).',
  },
  endpoint_name_reserved: {
    summary:
      "An endpoint name kept for the service's own endpoints (`pr-<number>`: pull-request previews) was set, split or deleted by hand.",
  },
  preview_revision_reserved: {
    summary:
      "A pull request's preview revision was put at another endpoint, split into one, or redeployed: it serves only as its preview.",
  },
  malformed_json: { summary: 'The body is not valid JSON.' },
  malformed_request: {
    summary:
      'The request is not valid HTTP (framing, Content-Length, Transfer-Encoding, a header, no Host); the connection is closed.',
  },
  codehost_rejected: {
    summary:
      "The code host rejected the integration's credentials (a revoked token, an uninstalled GitHub App); fix the integration.",
  },
  // 401 / 403
  unauthenticated: { summary: 'No API key was sent, or the key is unknown or revoked.' },
  webhook_signature_invalid: {
    summary: "A code-host webhook delivery without a valid X-Hub-Signature-256 for the integration's webhook secret.",
  },
  forbidden: { summary: 'The key may not act on the workspace it asks for, or lacks the admin role.' },
  workspace_required: { summary: 'An organization key with several workspaces must name one in X-Tenant-Id.' },
  // 404 / 405 / 406 / 408
  not_found: { summary: "The resource does not exist in the caller's workspace." },
  route_not_found: { summary: 'No such path.' },
  method_not_allowed: {
    summary: 'The path exists but not with this method; the Allow header lists the methods it takes.',
  },
  not_acceptable: { summary: 'No representation matches the Accept header; the API answers JSON.' },
  request_timeout: { summary: 'The request did not arrive in time; the connection is closed.' },
  // 409 / 412
  conflict: {
    summary: 'The write collides with existing state (a name or compute_id taken, a resource still in use).',
  },
  idempotency_key_in_progress: {
    summary: 'A request with this Idempotency-Key is still running; retry after Retry-After.',
  },
  idempotency_response_not_kept: {
    summary:
      'The request with this Idempotency-Key was done, but its answer held a credential shown once and was not kept.',
  },
  precondition_failed: {
    summary:
      'A conditional header (If-Match, If-Unmodified-Since) does not hold: the resource changed since its ETag was read.',
  },
  // 413 / 414 / 415 / 416 / 417 / 422 / 429 / 431
  payload_too_large: { summary: 'The body is larger than the configured limit.' },
  uri_too_long: { summary: 'The request URL is longer than the service reads.' },
  unsupported_media_type: { summary: 'The body is not sent as application/json (or as a tarball, for uploads).' },
  range_not_satisfiable: { summary: 'The Range header asks for bytes the resource does not have.' },
  expectation_failed: { summary: 'The Expect header asks for something other than 100-continue.' },
  validation_failed: {
    summary: 'The request does not match the schema; detail is a list with loc, msg, type and input.',
  },
  idempotency_key_mismatch: {
    summary: 'The Idempotency-Key was used for another request (method, path or body) in the last 24 hours.',
  },
  too_many_requests: { summary: 'Too many requests; retry after the time in Retry-After.' },
  too_many_streams: {
    summary:
      'The API key (or listener credential) or the client address holds as many open streams and long-polls as allowed; close one, or retry after Retry-After.',
  },
  header_too_large: {
    summary: 'The request line and headers are larger than the service reads; the connection is closed.',
  },
  // 5xx
  internal: { summary: 'An unexpected failure; the response carries the request id to quote.' },
  bad_gateway: { summary: 'An outside service (a code host, an identity provider) failed.' },
  unavailable: { summary: 'The service or an outside service it needs cannot answer now; retry later.' },
} as const satisfies Record<string, { summary: string }>;

export type ErrorCode = keyof typeof ERROR_CODES;

/** The codes answered with a list of issues (FastAPI's 422 shape); src/http/error-handler.ts checks they are 422s. */
export type ValidationCode = Extract<ErrorCode, 'validation_failed' | 'idempotency_key_mismatch'>;

/** One item of a 422 body, FastAPI's shape. */
export interface ValidationIssue {
  type: string;
  loc: (string | number)[];
  msg: string;
  input?: unknown;
}

/** What an error may carry besides its detail, for the HTTP layer to say in its own terms. */
export interface ErrorData {
  /** When a retry may work (sent as Retry-After). */
  retryAfterSeconds?: number;
}

export class AppError extends Error {
  constructor(
    readonly code: ErrorCode,
    readonly detail: string,
    readonly data: Readonly<ErrorData> = {},
  ) {
    super(detail);
    this.name = 'AppError';
  }
}

/**
 * A state the code must never reach (a bug, not a request to refuse): never caught as a domain error,
 * so that it is answered 500 with a request id and logged with its stack.
 */
export class InvariantError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'InvariantError';
  }
}

/** A 422 in FastAPI's list shape; `code` tells a request that cannot be valid from one refused for another reason. */
export class ValidationError extends AppError {
  declare readonly code: ValidationCode;
  constructor(
    readonly issues: ValidationIssue[],
    code: ValidationCode = 'validation_failed',
  ) {
    super(code, issues.map((i) => `${i.loc.join('.')}: ${i.msg}`).join('; '));
    this.name = 'ValidationError';
  }
}

/** Shorthands for the messages the contract fixes word for word. */
export const notFound = (kind: string, id: string): AppError =>
  new AppError('not_found', `${kind} ID ${id} not found.`);
