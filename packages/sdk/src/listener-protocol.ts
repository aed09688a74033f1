/**
 * The listener protocol (docs/listener-protocol.md) as the service and the Kubernetes listener agent
 * (@slipway/listener) share it. Its version is defined here and nowhere else: the service's schemas
 * and desired-state answers take it from this module, and the agent refuses an answer of another
 * version. The bodies are the generated document's types (api-types.ts, from the service's schemas),
 * taken by path and method as api-aliases.ts does, so nothing here restates a field.
 */
import type { JsonBody, JsonResponse } from './api-aliases.ts';

/** The version of the listener protocol the service serves and the agent speaks. */
export const PROTOCOL_VERSION = 1;

/** The desired-state answer: every deployment of the listener, with what should run. */
export type DesiredState = JsonResponse<'/v2/listeners/{listener_id}/desired-state', 'get', 200>;
export type DesiredDeployment = DesiredState['deployments'][number];
/** A revision to run, with the deployment's current in-place values (`resource_spec`, `secret_references`). */
export type DesiredRevision = NonNullable<DesiredDeployment['revision']>;
/** An endpoint of a deployment (an addition to protocol 1: a service of before sends none). */
export type DesiredEndpoint = NonNullable<DesiredDeployment['endpoints']>[number];
export type DesiredEndpointRevision = DesiredEndpoint['revision'];
export type DesiredEndpointSplit = NonNullable<DesiredEndpoint['split']>;

/** A revision's status report, and what it did. */
export type ReportBody = JsonBody<'/v2/listeners/{listener_id}/reports', 'post'>;
export type ReportResult = JsonResponse<'/v2/listeners/{listener_id}/reports', 'post', 200>;
/** An endpoint's report (it serves its revision or split, or cannot), and what it did. */
export type EndpointReportBody = JsonBody<'/v2/listeners/{listener_id}/endpoint-reports', 'post'>;
export type EndpointReportResult = JsonResponse<'/v2/listeners/{listener_id}/endpoint-reports', 'post', 200>;
/** The heartbeat, with the conditions of the deployments whose serving revision is not healthy. */
export type HeartbeatBody = JsonBody<'/v2/listeners/{listener_id}/heartbeat', 'post'>;
export type DeploymentCondition = NonNullable<HeartbeatBody['deployments']>[number];
