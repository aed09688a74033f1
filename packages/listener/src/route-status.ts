/**
 * What the Gateway's controller says of an endpoint's HTTPRoute (docs/listener.md, "Endpoints"), read
 * from the route's `status.parents` as the Gateway API defines it: each controller that handles a parent
 * (a Gateway of the route's `parentRefs`) writes one entry for it with its conditions, `Accepted` (the
 * Gateway takes the route: its listeners allow the route's namespace, kind and hostnames) and
 * `ResolvedRefs` (every backendRef resolves: the Services exist and may be referred to). A condition
 * counts only for the route's current generation (`observedGeneration`): an entry written for the route
 * before its last change says nothing of the route as it is. No I/O.
 */
import { GATEWAY_GROUP } from './endpoint-manifests.ts';
import type { ObservedObject } from './kube-objects.ts';

export type RouteVerdict =
  /** The Gateway takes the route as it is, every backend resolved: its weights are served. */
  | { readonly state: 'accepted' }
  /** The Gateway's controller refused the route as it is (`message`: its words, with its reason). */
  | { readonly state: 'refused'; readonly message: string }
  /** No word yet on the route as it is (not applied yet, no controller, or it has not caught up). */
  | { readonly state: 'pending'; readonly detail: string };

interface Condition {
  readonly type?: string;
  readonly status?: string;
  readonly reason?: string;
  readonly message?: string;
  readonly observedGeneration?: number;
}

interface ParentStatus {
  readonly parentRef?: { group?: string; kind?: string; namespace?: string; name?: string };
  readonly conditions?: readonly Condition[];
}

/** The entry of `parent` in the route's status (a parentRef's group, kind and namespace default as the API says). */
function entryOf(route: ObservedObject, parent: { namespace: string; name: string }): ParentStatus | undefined {
  const parents = ((route.status as { parents?: readonly ParentStatus[] } | undefined)?.parents ?? []).filter(
    (p) =>
      (p.parentRef?.group ?? GATEWAY_GROUP) === GATEWAY_GROUP &&
      (p.parentRef?.kind ?? 'Gateway') === 'Gateway' &&
      (p.parentRef?.namespace ?? route.metadata.namespace) === parent.namespace &&
      p.parentRef?.name === parent.name,
  );
  return parents[0];
}

/** What the Gateway `parent` says of `route` (undefined: the cluster does not show it yet). */
export function routeVerdict(
  route: ObservedObject | undefined,
  parent: { readonly namespace: string; readonly name: string },
): RouteVerdict {
  if (route === undefined) return { state: 'pending', detail: 'the HTTPRoute is not seen yet' };
  const gateway = `${parent.namespace}/${parent.name}`;
  const entry = entryOf(route, parent);
  if (entry === undefined)
    return { state: 'pending', detail: `no controller of Gateway ${gateway} has said anything of the route yet` };
  const generation = route.metadata.generation ?? 1;
  const current = (entry.conditions ?? []).filter(
    (c) => c.observedGeneration === undefined || c.observedGeneration >= generation,
  );
  const refusal = current.find((c) => (c.type === 'Accepted' || c.type === 'ResolvedRefs') && c.status === 'False');
  if (refusal !== undefined)
    return {
      state: 'refused',
      message: `${refusal.message ?? ''}${refusal.message ? ' ' : ''}(${refusal.type} ${refusal.reason ?? 'False'})`,
    };
  const holds = (type: string) => current.some((c) => c.type === type && c.status === 'True');
  if (holds('Accepted') && holds('ResolvedRefs')) return { state: 'accepted' };
  return { state: 'pending', detail: `Gateway ${gateway} has not accepted the route as it is now` };
}
