/**
 * Which of a revision's manifests the listener applies, and how (the decision: reconcile.ts): the
 * manifests whose spec hash the cluster does not show yet, each as an apply, and for an autoscaled
 * Deployment the hand-over of `spec.replicas` that keeps server-side apply from taking the field away.
 */
import type { Action } from './reconcile-plan.ts';
import { keyOf, refOf, type Manifest, type ObservedObject } from './kube-objects.ts';
import { FIELD_MANAGER } from './manifest-names.ts';

/** The `minReplicas` of the autoscaler among `manifests` that scales this Deployment manifest; null when none does. */
export function autoscalerMinimum(manifests: readonly Manifest[], deployment: Manifest): number | null {
  for (const m of manifests) {
    if (m.kind !== 'HorizontalPodAutoscaler') continue;
    const spec = m.spec as { scaleTargetRef?: { kind?: string; name?: string }; minReplicas?: number } | undefined;
    if (spec?.scaleTargetRef?.kind === 'Deployment' && spec.scaleTargetRef.name === deployment.metadata.name)
      return spec.minReplicas ?? 1;
  }
  return null;
}

/**
 * Whether the listener's own apply holds `spec.replicas` of this Deployment in the cluster: then leaving
 * the field out of the next apply would remove it (back to 1 replica) unless another manager holds it
 * first. An object listed without managedFields is taken as held (a hand-over does no harm).
 */
function listenerHoldsReplicas(live: ObservedObject): boolean {
  const entries = live.metadata.managedFields;
  if (entries === undefined || entries.length === 0) return true;
  return entries.some((entry) => {
    const fields = entry.fieldsV1 as Record<string, Record<string, unknown> | undefined> | undefined;
    return (
      entry.manager === FIELD_MANAGER && entry.operation === 'Apply' && fields?.['f:spec']?.['f:replicas'] !== undefined
    );
  });
}

/**
 * The actions that apply `pending` (manifests of `manifests`, the revision's whole set), given the objects
 * in the cluster by key; `inputs` is what a refusal of these applies holds for (inPlaceInputs).
 */
export function applyActions(
  manifests: readonly Manifest[],
  pending: readonly Manifest[],
  byKey: ReadonlyMap<string, ObservedObject>,
  revisionId: string,
  inputs: string,
): Action[] {
  return pending.flatMap((manifest): Action[] => {
    const apply: Action = { type: 'apply', revisionId, manifest, inputs };
    const minimum = manifest.kind === 'Deployment' ? autoscalerMinimum(manifests, manifest) : null;
    if (minimum === null) return [apply];
    // Autoscaled: the manifest leaves `spec.replicas` to the autoscaler. Server-side apply removes a
    // field its only manager stops applying, so another manager takes it over first (at the value it
    // has) and the autoscaler takes it from there; a new Deployment starts at min_scale the same way.
    const target = refOf(manifest);
    const live = byKey.get(keyOf(target));
    if (live === undefined) return [apply, { type: 'hand-over-replicas', target, replicas: minimum }];
    const replicas = (live.spec as { replicas?: number } | undefined)?.replicas;
    if (typeof replicas === 'number' && listenerHoldsReplicas(live))
      return [{ type: 'hand-over-replicas', target, replicas }, apply];
    return [apply];
  });
}
