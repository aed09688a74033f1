/**
 * An endpoint of a deployment on the cluster (docs/listener.md, "Endpoints"): the revision it is pinned
 * to runs as a Kubernetes Deployment and Service of the endpoint's own (and its Secret), beside the
 * deployment's; a split runs the second revision the same way; where the cluster serves the Gateway API
 * and the operator named a Gateway, an HTTPRoute sends the endpoint's requests to the Service, or, with a
 * split, to both Services by weight. No I/O.
 *
 * The endpoint's Deployment is the deployment's web Deployment (manifest-builder.ts) for the endpoint's
 * revision, with the deployment's current resource spec (as on the own data plane), renamed and
 * relabelled so that its pods are selected apart from the deployment's; it has no autoscaler (its
 * replicas are `min_scale`), as the own data plane's endpoints have none.
 */
import type { V1Deployment, V1EnvVar } from '@kubernetes/client-node';
import type { DesiredDeployment, DesiredEndpoint, DesiredEndpointRevision } from './desired-state.ts';
import type { Manifest } from './kube-objects.ts';
import { buildManifests, SERVICE_PORT, specHash, type BuildContext } from './manifest-builder.ts';
import {
  CUSTOM_URL_ANNOTATION,
  REVISION_ID_ANNOTATION,
  SPEC_HASH_ANNOTATION,
  endpointObjectName,
  endpointSelectorLabels,
  objectName,
  ownerLabels,
  type EndpointRole,
} from './manifest-names.ts';
import type { ResourceSpec } from './resource-spec.ts';

export const GATEWAY_GROUP = 'gateway.networking.k8s.io';
export const HTTP_ROUTE_API_VERSION = `${GATEWAY_GROUP}/v1`;

/** Where the cluster's Gateway API stands, as the agent found it (listener-agent.ts discovers it). */
export interface GatewaySupport {
  /** `gateway.networking.k8s.io/v1` serves HTTPRoute on this cluster (API discovery). */
  readonly httpRoutes: boolean;
  /** The operator's Gateway the routes attach to (SLIPWAY_LISTENER_GATEWAY); null when none is named. */
  readonly parent: { readonly namespace: string; readonly name: string } | null;
  /** With a parent: routes answer `<deployment>--<endpoint>.<domain>` (SLIPWAY_LISTENER_GATEWAY_DOMAIN). */
  readonly domain: string | null;
}

/** Why no HTTPRoute can be written on this cluster, in plain words; null when one can. */
export function routesUnavailable(gateway: GatewaySupport): string | null {
  if (!gateway.httpRoutes)
    return `no Gateway API in this cluster (${HTTP_ROUTE_API_VERSION} HTTPRoute is not in the API's discovery): install the Gateway API CRDs and a Gateway controller; the listener looks again every minute`;
  if (gateway.parent === null)
    return 'SLIPWAY_LISTENER_GATEWAY not set: no Gateway for the HTTPRoutes to attach to (set it to <namespace>/<name> of your Gateway and restart the listener)';
  return null;
}

export interface EndpointBuildInput {
  readonly deployment: DesiredDeployment;
  readonly endpoint: DesiredEndpoint;
  readonly namespace: string;
  /** The deployment's current resource spec, read (resource-spec.ts). */
  readonly spec: ResourceSpec;
}

const withHash = (manifest: Manifest): Manifest => ({
  ...manifest,
  metadata: {
    ...manifest.metadata,
    annotations: { ...manifest.metadata.annotations, [SPEC_HASH_ANNOTATION]: specHash(manifest) },
  },
});

/** The Secret, Deployment and Service that run one revision of an endpoint. */
function revisionManifests(
  input: EndpointBuildInput,
  revision: DesiredEndpointRevision & { readonly image_uri: string },
  role: EndpointRole,
  ctx: BuildContext,
): Manifest[] {
  const { deployment, endpoint, namespace } = input;
  const id = deployment.deployment_id;
  const name = endpointObjectName(deployment.name, id, endpoint.name, role);
  const selector = endpointSelectorLabels(id, endpoint.name, role);
  // No autoscaler and no worker: the endpoint's web instances only.
  const { max_scale: _max, ...spec } = input.spec;
  const built = buildManifests(
    {
      deployment,
      revision: {
        ...revision,
        status: 'DEPLOYED',
        secret_references: deployment.revision?.secret_references ?? null,
        resource_spec: null,
      },
      namespace,
      spec,
      dbPassword: '',
      existingDbStorage: null,
    },
    ctx,
  );
  const web = objectName(deployment.name, id, 'web');
  const secrets = objectName(deployment.name, id, 'secrets');
  const relabel = (m: Manifest, annotations: Record<string, string> = {}): Manifest['metadata'] => ({
    name,
    namespace,
    labels: { ...m.metadata.labels, ...selector },
    annotations: { ...annotations, [REVISION_ID_ANNOTATION]: revision.id },
  });
  const out: Manifest[] = [];
  for (const m of built) {
    if (m.kind === 'Secret' && m.metadata.name === secrets) out.push({ ...m, metadata: relabel(m) });
    else if (m.kind === 'Service' && m.metadata.name === web) {
      const { [CUSTOM_URL_ANNOTATION]: _url, ...annotations } = m.metadata.annotations ?? {};
      const spec = m.spec as Record<string, unknown>;
      out.push({ ...m, metadata: relabel(m, annotations), spec: { ...spec, selector } });
    } else if (m.kind === 'Deployment' && m.metadata.name === web) {
      const spec = (m as unknown as V1Deployment).spec!;
      const template = spec.template;
      const containers = (template.spec?.containers ?? []).map((c) => ({
        ...c,
        env: (c.env ?? []).map((e): V1EnvVar =>
          e.valueFrom?.secretKeyRef?.name === secrets
            ? { ...e, valueFrom: { secretKeyRef: { ...e.valueFrom.secretKeyRef, name } } }
            : e,
        ),
      }));
      out.push({
        ...m,
        metadata: relabel(m, m.metadata.annotations),
        spec: {
          ...spec,
          selector: { matchLabels: selector },
          template: {
            ...template,
            metadata: { ...template.metadata, labels: { ...template.metadata?.labels, ...selector } },
            spec: { ...template.spec, containers },
          },
        },
      });
    }
  }
  return out;
}

/** The HTTPRoute of an endpoint: to its Service, or by weight to its Service and its split's. */
function httpRoute(
  input: EndpointBuildInput,
  gateway: GatewaySupport & { parent: NonNullable<GatewaySupport['parent']> },
  split: { weight: number } | null,
  ctx: BuildContext,
): Manifest {
  const { deployment, endpoint, namespace } = input;
  const id = deployment.deployment_id;
  const main = endpointObjectName(deployment.name, id, endpoint.name, 'main');
  const labels = {
    ...ownerLabels(id, deployment.name, ctx.listenerId),
    ...endpointSelectorLabels(id, endpoint.name, 'main'),
  };
  const backendRefs =
    split === null
      ? [{ name: main, port: SERVICE_PORT }]
      : [
          { name: main, port: SERVICE_PORT, weight: 100 - split.weight },
          {
            name: endpointObjectName(deployment.name, id, endpoint.name, 'split'),
            port: SERVICE_PORT,
            weight: split.weight,
          },
        ];
  return {
    apiVersion: HTTP_ROUTE_API_VERSION,
    kind: 'HTTPRoute',
    metadata: {
      name: main,
      namespace,
      labels,
      annotations: { [REVISION_ID_ANNOTATION]: endpoint.revision.id },
    },
    spec: {
      parentRefs: [
        { group: GATEWAY_GROUP, kind: 'Gateway', namespace: gateway.parent.namespace, name: gateway.parent.name },
      ],
      ...(gateway.domain !== null ? { hostnames: [`${deployment.name}--${endpoint.name}.${gateway.domain}`] } : {}),
      rules: [{ backendRefs }],
    },
  };
}

export interface EndpointManifests {
  readonly manifests: readonly Manifest[];
  /**
   * Why the endpoint's split cannot be served here (no Gateway API, no Gateway, no image), in plain
   * words; null when there is none or its manifests are written (the Gateway has its say then).
   */
  readonly splitNotServed: string | null;
  /** The endpoint's HTTPRoute, when one is written. */
  readonly route: Manifest | null;
}

/**
 * Everything of one endpoint. A split is served only where an HTTPRoute can be written: elsewhere only
 * the endpoint's revision runs (its Service takes all of the endpoint's requests) and `splitRefused`
 * says why.
 */
export function buildEndpointManifests(
  input: EndpointBuildInput,
  gateway: GatewaySupport,
  ctx: BuildContext,
): EndpointManifests {
  const { endpoint } = input;
  const image = endpoint.revision.image_uri;
  if (image === null || image === '') return { manifests: [], splitNotServed: null, route: null };
  const out = revisionManifests(input, { ...endpoint.revision, image_uri: image }, 'main', ctx);
  const noRoutes = routesUnavailable(gateway);
  const split = endpoint.split;
  const splitImage = split?.revision.image_uri ?? null;
  const servesSplit = split !== null && noRoutes === null && splitImage !== null && splitImage !== '';
  if (servesSplit) out.push(...revisionManifests(input, { ...split.revision, image_uri: splitImage }, 'split', ctx));
  const route =
    noRoutes === null && gateway.parent !== null
      ? withHash(
          httpRoute(input, { ...gateway, parent: gateway.parent }, servesSplit ? { weight: split.weight } : null, ctx),
        )
      : null;
  const splitNotServed =
    split === null || servesSplit ? null : (noRoutes ?? `revision ${split.revision_id} has no image_uri`);
  return { manifests: [...out.map(withHash), ...(route === null ? [] : [route])], splitNotServed, route };
}
