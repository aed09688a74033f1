/**
 * The one error the client throws. An answer of the service that is not a success carries its HTTP
 * status, the `detail` and stable `code` of its body (docs/errors.md) and the request id to quote; a
 * request that got no answer at all (refused connection, DNS, timeout) has status null and code
 * `connection_failed` or `timeout`, so callers branch on one class and one field.
 */

/** Codes the client itself sets when no answer came; every other code is the service's. */
export type ClientErrorCode = 'connection_failed' | 'timeout';

export interface SlipwayErrorInit {
  status: number | null;
  code: string;
  detail: string;
  requestId?: string | null;
  /** The parsed body of the answer (a 422's `detail` is a list: see `issues`). */
  body?: unknown;
  url: string;
  cause?: unknown;
}

/** One item of a 422's list, FastAPI's shape. */
export interface ValidationIssue {
  type: string;
  loc: (string | number)[];
  msg: string;
}

export class SlipwayError extends Error {
  readonly status: number | null;
  readonly code: string;
  readonly detail: string;
  readonly requestId: string | null;
  readonly body: unknown;
  readonly url: string;

  constructor(init: SlipwayErrorInit) {
    super(
      init.status === null ? init.detail : `${init.status} ${init.code}: ${init.detail}`,
      init.cause === undefined ? undefined : { cause: init.cause },
    );
    this.name = 'SlipwayError';
    this.status = init.status;
    this.code = init.code;
    this.detail = init.detail;
    this.requestId = init.requestId ?? null;
    this.body = init.body;
    this.url = init.url;
  }

  /** The items of a 422 answer, else an empty list. */
  get issues(): ValidationIssue[] {
    const detail = (this.body as { detail?: unknown } | undefined)?.detail;
    return Array.isArray(detail) ? (detail as ValidationIssue[]) : [];
  }

  /** The error of an answer that is not a success, from its body (parsed JSON, or text when it was not JSON). */
  static fromAnswer(response: Response, body: unknown): SlipwayError {
    const fields = typeof body === 'object' && body !== null ? (body as Record<string, unknown>) : {};
    const text = typeof body === 'string' ? body.trim().slice(0, 500) : '';
    const detail = describeDetail(fields.detail) ?? (text || response.statusText || `HTTP ${response.status}`);
    const code = typeof fields.code === 'string' ? fields.code : `http_${response.status}`;
    const requestId =
      response.headers.get('x-request-id') ?? (typeof fields.request_id === 'string' ? fields.request_id : null);
    return new SlipwayError({ status: response.status, code, detail, requestId, body, url: response.url });
  }

  /** The same, reading the answer's body. */
  static async fromResponse(response: Response): Promise<SlipwayError> {
    const text = await response.text().catch(() => '');
    let body: unknown = text;
    try {
      body = JSON.parse(text);
    } catch {
      // Not JSON (a proxy's HTML page): the text itself becomes the detail.
    }
    return SlipwayError.fromAnswer(response, body);
  }
}

/** A 422's list of issues as one line (`body.name: String should match pattern ...`). */
function describeDetail(detail: unknown): string | null {
  if (typeof detail === 'string') return detail;
  if (Array.isArray(detail)) {
    return detail
      .map(
        (issue: Partial<ValidationIssue>) =>
          `${Array.isArray(issue.loc) ? issue.loc.join('.') : '?'}: ${issue.msg ?? 'invalid'}`,
      )
      .join('; ');
  }
  return null;
}
