/**
 * Names, labels and annotations of everything the listener puts into a cluster. The labels are how
 * the agent finds its objects again (after a restart, and on delete), so they are fixed here, once:
 * every object carries `app.kubernetes.io/managed-by: slipway-listener` and the deployment's id.
 */
import { createHash } from 'node:crypto';

/** The server-side apply field manager of every write the agent makes. */
export const FIELD_MANAGER = 'slipway-listener';
/**
 * The field manager that holds an autoscaled Deployment's `spec.replicas` for the moment between the
 * listener letting go of it and the HorizontalPodAutoscaler taking it (server-side apply's documented
 * hand-over: without a second owner, the field the listener stops applying would be removed, and the
 * Deployment would fall to one replica).
 */
export const HANDOVER_FIELD_MANAGER = 'slipway-listener-handover';

export const MANAGED_BY_LABEL = 'app.kubernetes.io/managed-by';
export const MANAGED_BY = 'slipway-listener';
/** Selects exactly the objects this agent may touch (and no one else's). */
export const MANAGED_SELECTOR = `${MANAGED_BY_LABEL}=${MANAGED_BY}`;

export const DEPLOYMENT_ID_LABEL = 'slipway.dev/deployment-id';
export const COMPONENT_LABEL = 'slipway.dev/component';
export const REVISION_ID_LABEL = 'slipway.dev/revision-id';
export const LISTENER_ID_LABEL = 'slipway.dev/listener-id';
/**
 * Objects holding a deployment's data (the database's volume and password): a new revision that drops
 * the `db_*` fields does not delete them; only the deployment's delete does.
 */
export const KEEP_UNTIL_DELETE_LABEL = 'slipway.dev/keep-until-delete';

/** On every object of an endpoint (docs/listener.md, "Endpoints"): the endpoint's name. */
export const ENDPOINT_LABEL = 'slipway.dev/endpoint';
/** Which of an endpoint's revisions an object runs: `main` (the one it is pinned to) or `split`. */
export const ENDPOINT_ROLE_LABEL = 'slipway.dev/endpoint-role';

export const REVISION_ID_ANNOTATION = 'slipway.dev/revision-id';
/** Hash of the manifest as the agent applied it: equal means nothing to apply. */
export const SPEC_HASH_ANNOTATION = 'slipway.dev/spec-hash';
export const CUSTOM_URL_ANNOTATION = 'slipway.dev/custom-url';

export type Component = 'web' | 'queue' | 'db' | 'cache' | 'secrets';

const SUFFIX: Readonly<Record<Component, string>> = {
  web: '',
  queue: '-queue',
  db: '-db',
  cache: '-cache',
  secrets: '-secrets',
};

/**
 * `<deployment name><suffix>`, a DNS label of at most 63 characters (Service names must be). A name
 * too long for its suffix is cut and ends with a short hash of the deployment id, so that two long
 * names with the same beginning do not collide.
 */
export function objectName(deploymentName: string, deploymentId: string, component: Component): string {
  const suffix = SUFFIX[component];
  const full = `${deploymentName}${suffix}`;
  if (full.length <= 63) return full;
  const hash = createHash('sha256').update(deploymentId).digest('hex').slice(0, 6);
  const head = deploymentName.slice(0, 63 - suffix.length - hash.length - 1).replace(/-+$/, '');
  return `${head}-${hash}${suffix}`;
}

/** The labels that make an object the deployment's: on every object, and in every selector's pods. */
export function ownerLabels(deploymentId: string, deploymentName: string, listenerId: string): Record<string, string> {
  return {
    'app.kubernetes.io/name': deploymentName,
    [MANAGED_BY_LABEL]: MANAGED_BY,
    [DEPLOYMENT_ID_LABEL]: deploymentId,
    [LISTENER_ID_LABEL]: listenerId,
  };
}

/** Pod selector of one component: stable for the life of the deployment (selectors cannot change). */
export function selectorLabels(deploymentId: string, component: Component): Record<string, string> {
  return { [DEPLOYMENT_ID_LABEL]: deploymentId, [COMPONENT_LABEL]: component };
}

/** Which of an endpoint's revisions: the one it is pinned to, or the one its split sends a share to. */
export type EndpointRole = 'main' | 'split';

/**
 * `<deployment name>--<endpoint>` (as the endpoint's host label is `<slug>--<endpoint>`), and
 * `<deployment name>--<endpoint>--split` for its split. An endpoint name has no `--`, so no endpoint's
 * name is another's split. Cut, with a hash of the deployment id, endpoint and role, to stay a DNS label
 * of at most 63 characters. The Deployment, Service, Secret and HTTPRoute of it share the name.
 */
export function endpointObjectName(
  deploymentName: string,
  deploymentId: string,
  endpoint: string,
  role: EndpointRole,
): string {
  const full = `${deploymentName}--${endpoint}${role === 'split' ? '--split' : ''}`;
  if (full.length <= 63) return full;
  const hash = createHash('sha256').update(`${deploymentId}/${endpoint}/${role}`).digest('hex').slice(0, 8);
  return `${full.slice(0, 63 - hash.length - 1).replace(/-+$/, '')}-${hash}`;
}

/** Pod selector of one endpoint's revision: stable while the endpoint exists. */
export function endpointSelectorLabels(
  deploymentId: string,
  endpoint: string,
  role: EndpointRole,
): Record<string, string> {
  return {
    [DEPLOYMENT_ID_LABEL]: deploymentId,
    [COMPONENT_LABEL]: 'endpoint',
    [ENDPOINT_LABEL]: endpoint,
    [ENDPOINT_ROLE_LABEL]: role,
  };
}
