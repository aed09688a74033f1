/** What the pages say when a request fails: the API's own message (docs/errors.md), or why there is none. */

export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number,
    /** The API's stable error code (`unauthenticated`, `workspace_required`, ...); null when there was no body. */
    readonly code: string | null,
  ) {
    super(message);
    this.name = 'ApiError';
  }
}

interface ValidationItem {
  loc?: unknown[];
  msg?: string;
}

/** The human part of an error body: `detail` as a string, or each 422 item as `field: message`. */
function detailOf(body: unknown): string | null {
  if (typeof body !== 'object' || body === null || !('detail' in body)) return null;
  const detail = body.detail;
  if (typeof detail === 'string') return detail;
  if (Array.isArray(detail)) {
    return (detail as ValidationItem[])
      .map((item) => {
        const field = (item.loc ?? [])
          .filter((part) => part !== 'body' && part !== 'query' && part !== 'path')
          .join('.');
        return field ? `${field}: ${item.msg ?? 'invalid'}` : (item.msg ?? 'invalid');
      })
      .join('; ');
  }
  return null;
}

export function apiError(response: Response, body: unknown): ApiError {
  const code =
    typeof body === 'object' && body !== null && 'code' in body && typeof body.code === 'string' ? body.code : null;
  return new ApiError(
    detailOf(body) ?? `The service answered ${response.status} ${response.statusText}.`.replace(' .', '.'),
    response.status,
    code,
  );
}

/** Any thrown value as one sentence for the page. */
export function messageOf(error: unknown): string {
  if (error instanceof ApiError) return error.message;
  // fetch rejects with a TypeError when the service cannot be reached at all.
  if (error instanceof TypeError) return 'The service could not be reached. Check that it is running, then try again.';
  return error instanceof Error ? error.message : String(error);
}
