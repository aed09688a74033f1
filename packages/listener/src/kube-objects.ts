/**
 * The Kubernetes objects the agent writes and watches, as plain data: what a manifest is, how an
 * object is named in logs and maps, and the kinds the agent manages (with their API paths, which the
 * list-watch and the RBAC in deploy/ both follow).
 */
import type { V1Deployment, V1ObjectMeta, V1Pod, V1StatefulSet } from '@kubernetes/client-node';

/** Some fields of an object, applied by a field manager of their own (the replicas hand-over). */
export interface PartialManifest {
  readonly apiVersion: string;
  readonly kind: string;
  readonly metadata: { readonly name: string; readonly namespace: string };
  readonly [field: string]: unknown;
}

/** A manifest the agent applies: always namespaced, named and labelled. */
export interface Manifest {
  readonly apiVersion: string;
  readonly kind: string;
  readonly metadata: {
    readonly name: string;
    readonly namespace: string;
    readonly labels: Readonly<Record<string, string>>;
    readonly annotations?: Readonly<Record<string, string>>;
  };
  readonly [field: string]: unknown;
}

/** An object as read from the cluster (list or watch). */
export interface ObservedObject {
  readonly apiVersion?: string;
  readonly kind: string;
  readonly metadata: V1ObjectMeta;
  readonly [field: string]: unknown;
}

export interface ObjectRef {
  readonly apiVersion: string;
  readonly kind: string;
  readonly namespace: string;
  readonly name: string;
}

export interface ManagedKind {
  readonly apiVersion: string;
  readonly kind: string;
  /** The resource name in API paths. */
  readonly plural: string;
}

/**
 * Every kind the agent creates, plus Pods (read-only: their waiting reasons tell a failed rollout, and
 * a deployment is only gone when its pods are). Order matters on delete: owners before what they own.
 */
export const MANAGED_KINDS: readonly ManagedKind[] = [
  { apiVersion: 'autoscaling/v2', kind: 'HorizontalPodAutoscaler', plural: 'horizontalpodautoscalers' },
  { apiVersion: 'apps/v1', kind: 'Deployment', plural: 'deployments' },
  { apiVersion: 'apps/v1', kind: 'StatefulSet', plural: 'statefulsets' },
  { apiVersion: 'v1', kind: 'Service', plural: 'services' },
  { apiVersion: 'v1', kind: 'Secret', plural: 'secrets' },
  { apiVersion: 'v1', kind: 'PersistentVolumeClaim', plural: 'persistentvolumeclaims' },
  { apiVersion: 'v1', kind: 'Pod', plural: 'pods' },
];

/**
 * The Gateway API's route, which the agent writes for endpoints (docs/listener.md, "Endpoints") only
 * where the cluster serves it: listed, watched and applied only then (a list of a kind the API server
 * does not serve would fail every namespace's list-watch).
 */
export const HTTP_ROUTE_KIND: ManagedKind = {
  apiVersion: 'gateway.networking.k8s.io/v1',
  kind: 'HTTPRoute',
  plural: 'httproutes',
};

export function kindOf(kind: string): ManagedKind | undefined {
  return [HTTP_ROUTE_KIND, ...MANAGED_KINDS].find((k) => k.kind === kind);
}

/** `/api/v1/namespaces/ns/pods` or `/apis/apps/v1/namespaces/ns/deployments`. */
export function collectionPath(kind: ManagedKind, namespace: string): string {
  const root = kind.apiVersion.includes('/') ? `/apis/${kind.apiVersion}` : `/api/${kind.apiVersion}`;
  return `${root}/namespaces/${encodeURIComponent(namespace)}/${kind.plural}`;
}

export function refOf(object: Manifest | ObservedObject): ObjectRef {
  const apiVersion = object.apiVersion ?? kindOf(object.kind)?.apiVersion ?? 'v1';
  return {
    apiVersion,
    kind: object.kind,
    namespace: object.metadata.namespace ?? '',
    name: object.metadata.name ?? '',
  };
}

/** `Deployment agents/support-agent`: a key for maps, and readable in logs and messages. */
export function keyOf(ref: Pick<ObjectRef, 'kind' | 'namespace' | 'name'>): string {
  return `${ref.kind} ${ref.namespace}/${ref.name}`;
}

export const isDeployment = (o: ObservedObject): o is ObservedObject & V1Deployment => o.kind === 'Deployment';
export const isStatefulSet = (o: ObservedObject): o is ObservedObject & V1StatefulSet => o.kind === 'StatefulSet';
export const isPod = (o: ObservedObject): o is ObservedObject & V1Pod => o.kind === 'Pod';
