/**
 * Names for the types of the generated OpenAPI document (api-types.ts), taken by path and method so
 * that regenerating it (operation ids, named component schemas) changes nothing here. Nothing below
 * restates a field: every shape comes from the document.
 */
import type { paths } from './api-types.ts';

type Method = 'get' | 'put' | 'post' | 'delete' | 'patch';

/** The JSON body of the `status` answer of `method path`. */
export type JsonResponse<P extends keyof paths, M extends Method, S extends number> = paths[P][M] extends {
  responses: { [K in S]: { content: { 'application/json': infer B } } };
}
  ? B
  : never;

/** The JSON request body of `method path`. */
export type JsonBody<P extends keyof paths, M extends Method> = paths[P][M] extends {
  requestBody?: { content: { 'application/json': infer B } };
}
  ? B
  : never;

/** The query parameters of `method path`. */
export type Query<P extends keyof paths, M extends Method> = paths[P][M] extends { parameters: { query?: infer Q } }
  ? NonNullable<Q>
  : never;

/** Paths whose GET answers a list envelope `{resources, offset}` and takes `limit` and `offset`. */
export type ListPath = {
  [P in keyof paths]: JsonResponse<P, 'get', 200> extends { resources: unknown[]; offset: number } ? P : never;
}[keyof paths];

/** One item of the list at `P`. */
export type ListItem<P extends ListPath> = JsonResponse<P, 'get', 200> extends { resources: (infer T)[] } ? T : never;

/** A page of a list, as the service answers it. */
export interface Page<T> {
  resources: T[];
  offset: number;
}

export type Deployment = JsonResponse<'/v2/deployments/{deployment_id}', 'get', 200>;
export type DeploymentCreate = JsonBody<'/v2/deployments', 'post'>;
export type DeploymentPatch = JsonBody<'/v2/deployments/{deployment_id}', 'patch'>;
export type DeploymentQuery = Query<'/v2/deployments', 'get'>;
export type DeploymentSource = Deployment['source'];
export type Secret = NonNullable<DeploymentCreate['secrets']>[number];

export type Revision = JsonResponse<'/v2/deployments/{deployment_id}/revisions/{revision_id}', 'get', 200>;
export type RevisionStatus = Revision['status'];
export type DeploymentEvent = ListItem<'/v2/deployments/{deployment_id}/events'>;

export type LogPage = JsonResponse<'/v2/deployments/{deployment_id}/revisions/{revision_id}/logs', 'get', 200>;
export type LogLine = LogPage['lines'][number];
export type LogType = NonNullable<Query<'/v2/deployments/{deployment_id}/revisions/{revision_id}/logs', 'get'>['type']>;

export type Upload = JsonResponse<'/v2/uploads', 'post', 201>;
export type UploadUrl = JsonResponse<'/v2/deployments/{deployment_id}/upload-url', 'post', 200>;

export type Listener = JsonResponse<'/v2/listeners/{listener_id}', 'get', 200>;
export type ListenerCreate = JsonBody<'/v2/listeners', 'post'>;

export type ApiKey = ListItem<'/v2/api-keys'>;
export type ApiKeyCreate = JsonBody<'/v2/api-keys', 'post'>;
export type ApiKeyCreated = JsonResponse<'/v2/api-keys', 'post', 201>;

export type ProtocolCredential = ListItem<'/v2/deployments/{deployment_id}/protocol-credentials'>;
export type ProtocolCredentialCreate = JsonBody<'/v2/deployments/{deployment_id}/protocol-credentials', 'post'>;
export type ProtocolCredentialCreated = JsonResponse<
  '/v2/deployments/{deployment_id}/protocol-credentials',
  'post',
  201
>;

export type DeploymentEndpoint = JsonResponse<'/v2/deployments/{deployment_id}/endpoints/{endpoint_name}', 'get', 200>;
export type DeploymentMetrics = JsonResponse<'/v2/deployments/{deployment_id}/metrics', 'get', 200>;
export type PullRequestPreview = JsonResponse<
  '/v2/deployments/{deployment_id}/previews',
  'get',
  200
>['resources'][number];
export type PreviewSettings = JsonResponse<'/v2/deployments/{deployment_id}/preview-settings', 'get', 200>;

export type CodehostIntegration = JsonResponse<'/v1/integrations/forge/codehost/{integration_id}', 'get', 200>;
export type CodehostRepository = JsonResponse<
  '/v1/integrations/forge/codehost/{integration_id}/repos',
  'get',
  200
>[number];
export type CodehostDelivery = ListItem<'/v1/integrations/forge/codehost/{integration_id}/deliveries'>;

/** The error body every route answers with (`detail`, the stable `code`, the request id). */
export type ErrorBody = JsonResponse<'/v2/deployments/{deployment_id}', 'get', 404>;
