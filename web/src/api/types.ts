/**
 * The resource shapes the pages use, taken from the types generated from /openapi.json by path and
 * method, so they follow the document when it is regenerated (named schemas or not).
 */
import type { paths } from '@slipway/sdk/api-types';

/** The JSON body of a response (or request) entry of the generated types. */
type Json<T> = T extends { content: { 'application/json': infer Body } } ? Body : never;

export type DeploymentPage = Json<paths['/v2/deployments']['get']['responses'][200]>;
export type Deployment = Json<paths['/v2/deployments/{deployment_id}']['get']['responses'][200]>;
export type DeploymentQuery = NonNullable<paths['/v2/deployments']['get']['parameters']['query']>;
export type CreateDeploymentBody = Json<paths['/v2/deployments']['post']['requestBody']>;
export type Secret = NonNullable<CreateDeploymentBody['secrets']>[number];
export type Revision = Json<paths['/v2/deployments/{deployment_id}/revisions/{revision_id}']['get']['responses'][200]>;
export type DeploymentTag = Json<
  paths['/v2/deployments/{deployment_id}/tags']['get']['responses'][200]
>['resources'][number];
export type TagKey = Json<paths['/v2/tags/keys']['get']['responses'][200]>['resources'][number];
export type TagValue = Json<paths['/v2/tags/keys/{tag_key_id}/values']['get']['responses'][200]>['resources'][number];
export type LogType = NonNullable<
  NonNullable<
    paths['/v2/deployments/{deployment_id}/revisions/{revision_id}/logs']['get']['parameters']['query']
  >['type']
>;
export type LogPage = Json<
  paths['/v2/deployments/{deployment_id}/revisions/{revision_id}/logs']['get']['responses'][200]
>;
export type LogLine = LogPage['lines'][number];
export type DeploymentEndpoint = Json<
  paths['/v2/deployments/{deployment_id}/endpoints']['get']['responses'][200]
>['resources'][number];
export type Listener = Json<paths['/v2/listeners/{listener_id}']['get']['responses'][200]>;
export type Integration = Json<paths['/v1/integrations/forge/codehost/{integration_id}']['get']['responses'][200]>;
export type ApiKey = Json<paths['/v2/api-keys']['get']['responses'][200]>['resources'][number];
export type CreatedApiKey = Json<paths['/v2/api-keys']['post']['responses'][201]>;
export type Workspace = Json<paths['/v2/workspaces']['get']['responses'][200]>['resources'][number];

export type DeploymentStatus = Deployment['status'];
export type RevisionStatus = Revision['status'];

/** Every value of a string union, checked both ways: a value missing here or unknown there fails the type check. */
const allOf =
  <T extends string>() =>
  <const L extends readonly T[]>(
    list: L & ([Exclude<T, L[number]>] extends [never] ? unknown : { missing: Exclude<T, L[number]> }),
  ): L =>
    list;

export const DEPLOYMENT_STATUSES = allOf<DeploymentStatus>()([
  'AWAITING_DATABASE',
  'READY',
  'UNUSED',
  'AWAITING_DELETE',
  'UNKNOWN',
]);

/**
 * Revision states with no way out (docs/lifecycle.md): the SDK's, which the dashboard bundles already
 * (test/cli/sdk-final-status.test.ts holds them to the service's table, src/domain/states.ts).
 */
export { isFinalRevisionStatus as isFinalRevision } from '@slipway/sdk/revision-follow';
export type DeploymentEvent = Json<
  paths['/v2/deployments/{deployment_id}/events']['get']['responses'][200]
>['resources'][number];
export type ProtocolCredential = Json<
  paths['/v2/deployments/{deployment_id}/protocol-credentials']['get']['responses'][200]
>['resources'][number];
export type CreatedProtocolCredential = Json<
  paths['/v2/deployments/{deployment_id}/protocol-credentials']['post']['responses'][201]
>;
export type DeploymentMetrics = Json<paths['/v2/deployments/{deployment_id}/metrics']['get']['responses'][200]>;
export type MetricsSeries = DeploymentMetrics['series'][number];
export type MetricsPoint = MetricsSeries['points'][number];
