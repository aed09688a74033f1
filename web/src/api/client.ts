/**
 * The typed API client: openapi-fetch over the paths generated from /openapi.json, with the signed-in
 * key (and workspace) on every request. `data()` turns its `{ data, error }` answers into a value or
 * the client's SlipwayError (@slipway/sdk, the same the SDK throws), so pages handle failure in one way.
 */
import createClient, { type Client } from 'openapi-fetch';
import type { paths } from '@slipway/sdk/api-types';
import { SlipwayError } from '@slipway/sdk/slipway-error';

export type Api = Client<paths>;

export interface Credentials {
  /** Null when signed in through single sign-on: the browser sends the HttpOnly cookie itself. */
  apiKey: string | null;
  /** X-Tenant-Id: needed by organization keys; null for a workspace key. */
  workspaceId: string | null;
}

/** Fired when the service refuses the key (401): the app signs out and says why. */
export const UNAUTHORIZED_EVENT = 'slipway:unauthorized';

export function createApi(credentials: Credentials, options: { reportUnauthorized?: boolean } = {}): Api {
  const api = createClient<paths>({ baseUrl: window.location.origin });
  api.use({
    onRequest({ request }) {
      if (credentials.apiKey !== null) request.headers.set('x-api-key', credentials.apiKey);
      if (credentials.workspaceId !== null) request.headers.set('x-tenant-id', credentials.workspaceId);
      return request;
    },
    onResponse({ response }) {
      if (response.status === 401 && options.reportUnauthorized)
        window.dispatchEvent(new CustomEvent(UNAUTHORIZED_EVENT));
      return undefined;
    },
  });
  return api;
}

/** The body of a successful answer, or the SlipwayError of a failed one. */
export async function data<T>(call: Promise<{ data?: T; error?: unknown; response: Response }>): Promise<T> {
  const { data: body, error, response } = await call;
  if (!response.ok || error !== undefined) throw SlipwayError.fromAnswer(response, error);
  return body as T;
}

/** Any thrown value as one sentence for the page: the API's own message (docs/errors.md), or why there is none. */
export function messageOf(error: unknown): string {
  if (error instanceof SlipwayError) {
    // A 422 names each field as the form shows it ("name: ..."), not where it sat in the request ("body.name").
    const issues = error.issues.map((issue) => {
      const field = issue.loc.filter((part) => part !== 'body' && part !== 'query' && part !== 'path').join('.');
      return field ? `${field}: ${issue.msg}` : issue.msg;
    });
    return issues.length > 0 ? issues.join('; ') : error.detail;
  }
  // fetch rejects with a TypeError when the service cannot be reached at all.
  if (error instanceof TypeError) return 'The service could not be reached. Check that it is running, then try again.';
  return error instanceof Error ? error.message : String(error);
}
