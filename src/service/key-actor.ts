/**
 * Who acts, as the admin services (src/service/workspaces.ts, src/service/api-keys.ts) see it: the API
 * key that authenticated the request and the workspace it acts in. src/http/authenticate.ts resolves
 * it; services take this shape rather than the request, so that they never see HTTP.
 */
export interface KeyActor {
  keyId: string;
  organizationId: string;
  /** The key's own workspace; null for an organization key. */
  keyWorkspaceId: string | null;
  /** The workspace the request acts in; null only for an organization key that named none. */
  workspaceId: string | null;
}
