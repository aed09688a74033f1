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
  codehost_rejected: { status: 400, summary: 'The code host rejected the integration\'s credentials (a revoked token, an uninstalled GitHub App); fix the integration.' },
  // 401 / 403
  unauthenticated: { status: 401, summary: 'No API key was sent, or the key is unknown or revoked.' },
  webhook_signature_invalid: { status: 401, summary: 'A code-host webhook delivery without a valid X-Hub-Signature-256 for the integration\'s webhook secret.' },
  forbidden: { status: 403, summary: 'The key may not act on the workspace it asks for, or lacks the admin role.' },
  workspace_required: { status: 403, summary: 'An organization key with several workspaces must name one in X-Tenant-Id.' },
  // 404
  not_found: { status: 404, summary: 'The resource does not exist in the caller\'s workspace.' },
  route_not_found: { status: 404, summary: 'No such path.' },
  // 409
  conflict: { status: 409, summary: 'The write collides with existing state (a name or compute_id taken, a resource still in use).' },
  // 413 / 415 / 422
  payload_too_large: { status: 413, summary: 'The body is larger than the configured limit.' },
  unsupported_media_type: { status: 415, summary: 'The body is not sent as application/json (or as a tarball, for uploads).' },
  validation_failed: { status: 422, summary: 'The request does not match the schema; detail is a list with loc, msg, type and input.' },
  // 5xx
  internal: { status: 500, summary: 'An unexpected failure; the response carries the request id to quote.' },
  bad_gateway: { status: 502, summary: 'An outside service (a code host, an identity provider) failed.' },
  unavailable: { status: 503, summary: 'The service or an outside service it needs cannot answer now; retry later.' },
} as const satisfies Record<string, { status: number; summary: string }>;

export type ErrorCode = keyof typeof ERROR_CODES;

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
