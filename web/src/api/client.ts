/**
 * The typed API client: openapi-fetch over the paths generated from /openapi.json, with the signed-in
 * key (and workspace) on every request. `data()` turns its `{ data, error }` answers into a value or
 * an ApiError, so pages handle failure in one way.
 */
import createClient, { type Client } from 'openapi-fetch';
import type { paths } from '../../../src/client/api-types.ts';
import { apiError } from './errors.ts';

export type Api = Client<paths>;

export interface Credentials {
  apiKey: string;
  /** X-Tenant-Id: needed by organization keys; null for a workspace key. */
  workspaceId: string | null;
}

/** Fired when the service refuses the key (401): the app signs out and says why. */
export const UNAUTHORIZED_EVENT = 'slipway:unauthorized';

export function createApi(credentials: Credentials, options: { reportUnauthorized?: boolean } = {}): Api {
  const api = createClient<paths>({ baseUrl: window.location.origin });
  api.use({
    onRequest({ request }) {
      request.headers.set('x-api-key', credentials.apiKey);
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

/** The body of a successful answer, or the ApiError of a failed one. */
export async function data<T>(call: Promise<{ data?: T; error?: unknown; response: Response }>): Promise<T> {
  const { data: body, error, response } = await call;
  if (!response.ok || error !== undefined) throw apiError(response, error);
  return body as T;
}
