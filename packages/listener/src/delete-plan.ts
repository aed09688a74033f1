/**
 * What the agent does with a deleted deployment (reconcile.ts): delete everything of it that is left in
 * the cluster, owners before what they own (pods go with their Deployment or StatefulSet), then confirm
 * the deletion to the service once nothing is left. No I/O.
 */
import type { DesiredDeployment } from './desired-state.ts';
import { MANAGED_KINDS, keyOf, refOf, type ObservedObject } from './kube-objects.ts';
import type { Action, Memory, Plan } from './reconcile-plan.ts';

const terminating = (o: ObservedObject): boolean =>
  o.metadata.deletionTimestamp !== undefined && o.metadata.deletionTimestamp !== null;
const kindOrder = (kind: string): number => MANAGED_KINDS.findIndex((k) => k.kind === kind);

export function deletePlan(deployment: DesiredDeployment, mine: readonly ObservedObject[], memory: Memory): Plan {
  const id = deployment.deployment_id;
  if (mine.length === 0) {
    return {
      deploymentId: id,
      actions: memory.confirmed.has(id) ? [] : [{ type: 'confirm-deletion' }],
      phase: 'deleted',
      summary: 'deleted: nothing of it is left in the cluster',
    };
  }
  // Pods go with their Deployment or StatefulSet (deleted in the foreground); only strays are deleted directly.
  const ownersLeft = mine.some((o) => o.kind === 'Deployment' || o.kind === 'StatefulSet');
  const targets = mine
    .filter((o) => !terminating(o) && (o.kind !== 'Pod' || !ownersLeft))
    .sort((a, b) => kindOrder(a.kind) - kindOrder(b.kind))
    .map((o): Action => ({ type: 'delete', target: refOf(o) }));
  return {
    deploymentId: id,
    actions: targets,
    phase: 'deleting',
    summary: `deleting: ${mine.length} object(s) left (${mine.map((o) => keyOf(refOf(o))).join(', ')})`,
  };
}
