/**
 * Where a revision's rollout stands once its manifests are applied (the decision that uses it:
 * reconcile.ts): each workload's own status (rollout-status.ts) or what its pods say is wrong, combined
 * into one; and, for a revision the service has as DEPLOYED, what is wrong with what serves.
 */
import {
  isDeployment,
  isPod,
  isStatefulSet,
  keyOf,
  refOf,
  type Manifest,
  type ObservedObject,
} from './kube-objects.ts';
import { autoscalerMinimum } from './apply-actions.ts';
import { COMPONENT_LABEL, REVISION_ID_LABEL } from './manifest-names.ts';
import type { ServingCondition } from './reconcile-plan.ts';
import {
  combine,
  deploymentRollout,
  mostRestarts,
  podFailure,
  restartingAfterCrash,
  settledOnTemplate,
  statefulSetRollout,
  statefulSetStalled,
  waitingDetail,
  type FailureReason,
  type Rollout,
} from './rollout-status.ts';

/** Restarts of a serving pod's container from which its crashes are a crash loop (about a minute of kubelet back-off). */
const SERVING_CRASH_LOOP_RESTARTS = 3;

export interface RevisionRolloutInput {
  /** The revision's manifests, all applied. */
  readonly manifests: readonly Manifest[];
  /** The cluster's objects by key (`keyOf`). */
  readonly byKey: ReadonlyMap<string, ObservedObject>;
  /** The deployment's objects in the cluster. */
  readonly mine: readonly ObservedObject[];
  readonly namespace: string;
  readonly revisionId: string;
  /** The service has the revision as DEPLOYED: failures of its settled pods are a serving condition. */
  readonly deployed: boolean;
  readonly now: number;
  readonly progressDeadlineSeconds: number;
}

export interface RevisionRollout {
  readonly rollout: Rollout;
  /** What is wrong with what serves (only looked for when `deployed`). */
  readonly condition: Omit<ServingCondition, 'revisionId'> | undefined;
}

/**
 * A Deployment's progress deadline exceeded by the ReplicaSet of another revision's pods is no failure
 * of this revision: after a failed new revision the agent goes back to the serving one, and the
 * Deployment controller, back on a ReplicaSet it still has, sets no new Progressing condition, so the
 * failed revision's "ReplicaSet ... has timed out progressing" stays until the rollback completes
 * (kube-controller-manager 1.26; it made the serving revision's update_failed and update_rolled_out
 * though nobody changed it, issue 34). The ReplicaSet of a template is `<deployment>-<pod-template-hash>`.
 */
function pastOtherRevision(
  own: Rollout,
  deploymentName: string,
  mine: readonly ObservedObject[],
  revisionId: string,
): Rollout {
  if (own.state !== 'failed' || own.reason !== 'progress_deadline_exceeded') return own;
  const replicaSet = /ReplicaSet "([^"]+)"/.exec(own.message)?.[1];
  if (replicaSet === undefined) return own;
  const other = mine
    .filter(isPod)
    .find(
      (p) =>
        `${deploymentName}-${p.metadata.labels?.['pod-template-hash'] ?? ''}` === replicaSet &&
        p.metadata.labels?.[REVISION_ID_LABEL] !== revisionId,
    );
  if (other === undefined) return own;
  return {
    state: 'progressing',
    detail: `Deployment ${deploymentName}: going back from ReplicaSet ${replicaSet} of revision ${other.metadata.labels?.[REVISION_ID_LABEL] ?? '?'}`,
  };
}

export function revisionRollout(input: RevisionRolloutInput): RevisionRollout {
  const { manifests, byKey, mine, namespace, deployed } = input;
  const label = (o: ObservedObject, key: string): string | undefined => o.metadata.labels?.[key];
  /** Pods of a workload settled on its current template that keep failing: what serves is failing. */
  const failing: { reason: FailureReason; message: string }[] = [];
  /** Failures of those pods: not of an in-place change (nothing is on its way in). */
  const ofServing = new Set<Rollout>();
  const rollouts: Rollout[] = manifests.flatMap((manifest): Rollout[] => {
    const observed = byKey.get(keyOf(refOf(manifest)));
    if (observed === undefined || (!isDeployment(observed) && !isStatefulSet(observed))) return [];
    const component = manifest.metadata.labels[COMPONENT_LABEL];
    const pods = mine
      .filter(isPod)
      .filter(
        (p) =>
          label(p, COMPONENT_LABEL) === component &&
          p.metadata.namespace === namespace &&
          (component === 'db' || component === 'cache' || label(p, REVISION_ID_LABEL) === input.revisionId),
      );
    const own = isDeployment(observed)
      ? pastOtherRevision(
          deploymentRollout(observed, autoscalerMinimum(manifests, manifest) ?? 0),
          observed.metadata.name ?? '?',
          mine,
          input.revisionId,
        )
      : statefulSetRollout(observed);
    if (own.state === 'complete') return [own];
    const stuck = podFailure(pods);
    if (deployed && settledOnTemplate(observed, isStatefulSet(observed))) {
      // A crash or two (one OOM kill, say) is not a crash loop yet: the serving pods would flip the
      // deployment to UNKNOWN and back for nothing. An image that cannot be pulled is failing at once.
      const looping = mostRestarts(pods) >= SERVING_CRASH_LOOP_RESTARTS;
      if (stuck) ofServing.add(stuck);
      if (stuck?.state === 'failed' && (stuck.reason !== 'crash_loop' || looping))
        failing.push({ reason: stuck.reason, message: stuck.message });
      else if (stuck === null && looping) {
        const restarting = restartingAfterCrash(pods);
        if (restarting !== null) failing.push({ reason: 'crash_loop', message: restarting });
      }
    }
    if (stuck) return [stuck];
    const stalled =
      isStatefulSet(observed) && own.state === 'progressing'
        ? statefulSetStalled(observed, pods, input.now, input.progressDeadlineSeconds)
        : null;
    if (stalled) return [stalled];
    return [own.state === 'failed' ? { ...own, message: `${own.message}${waitingDetail(pods)}` } : own];
  });
  const rollout = combine(rollouts);
  const updateFailure = rollouts.find(
    (r): r is Extract<Rollout, { state: 'failed' }> => r.state === 'failed' && !ofServing.has(r),
  );
  const condition: Omit<ServingCondition, 'revisionId'> | undefined =
    failing[0] !== undefined
      ? { condition: 'crash_loop', ...failing[0] }
      : updateFailure !== undefined
        ? { condition: 'update_failed', reason: updateFailure.reason, message: updateFailure.message }
        : undefined;
  return { rollout, condition };
}
