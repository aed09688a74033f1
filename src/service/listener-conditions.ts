/**
 * The health of the revision serving each of a listener's deployments, as its agent's heartbeats say
 * (docs/listener-protocol.md#heartbeat): the same things the own data plane shows on a deployment.
 * Pods of the serving revision crash-looping make the deployment UNKNOWN (`crash_loop`) and READY again
 * (`recovered`), by the one rule of both data planes (src/domain/conditions.ts); an in-place change of
 * the serving revision that the cluster refuses or that does not roll out (the old pods keep serving) is a
 * `deployment.update_failed` event, and `deployment.update_rolled_out` once it does: when the heartbeat
 * clears the deployment's condition (a failure replaced by a crash loop has not rolled out).
 *
 * Only a change writes anything: each heartbeat is compared with the stored conditions, so repeating
 * one is free.
 */
import type { DeploymentCondition } from '../routes/listener-protocol-schemas.ts';
import type { EventType } from '../domain/event-types.ts';
import { applyCondition } from './lifecycle.ts';
import { listDeploymentEvents, recordEvents } from '../store/events.ts';
import {
  deleteListenerCondition,
  listenerConditionState,
  lockDeploymentsWithConditions,
  saveListenerCondition,
  type ListenerDeploymentState,
} from '../store/listener-conditions.ts';
import type { Db, ListenerCondition, ListenerDeploymentConditionRow } from '../store/schema.ts';

/** One entry of a heartbeat's `deployments`: the serving revision of that deployment is not healthy. */
/** A heartbeat's entry for a deployment whose serving revision is not healthy (the protocol's schema). */
export type DeploymentConditionInput = DeploymentCondition;

type Wanted = {
  revision_id: string;
  condition: ListenerCondition;
  reason: string;
  message: string;
  change: string | null;
};

/**
 * What the heartbeat means for each deployment of the listener: an entry counts only for the
 * deployment's serving (active) revision; a deployment being deleted is left alone.
 */
function wantedOf(
  entries: readonly DeploymentConditionInput[],
  deployment: ListenerDeploymentState,
  listenerId: string,
): Wanted | null {
  if (deployment.listener_id !== listenerId || deployment.status === 'AWAITING_DELETE') return null;
  const entry = entries.find(
    (e) => e.deployment_id === deployment.id && e.revision_id === deployment.active_revision_id,
  );
  return entry
    ? {
        revision_id: entry.revision_id,
        condition: entry.condition,
        reason: entry.reason,
        message: entry.message ?? '',
        change: entry.change ?? null,
      }
    : null;
}

const sameCondition = (stored: ListenerDeploymentConditionRow | undefined, wanted: Wanted | null): boolean =>
  stored === undefined
    ? wanted === null
    : wanted !== null &&
      stored.revision_id === wanted.revision_id &&
      stored.condition === wanted.condition &&
      stored.reason === wanted.reason &&
      // A second refused change while the first is still told: same reason, another change (issue 34).
      (stored.change ?? null) === wanted.change;

const needsWrite = (stored: ListenerDeploymentConditionRow | undefined, wanted: Wanted | null): boolean =>
  !sameCondition(stored, wanted) || (stored !== undefined && wanted !== null && stored.message !== wanted.message);

/**
 * The deployments whose stored condition differs from the heartbeat's, read without locks: usually
 * none, and then the heartbeat locks no deployment at all.
 */
export async function conditionChanges(
  db: Db,
  listenerId: string,
  entries: readonly DeploymentConditionInput[],
): Promise<string[]> {
  const { deployments, conditions } = await listenerConditionState(db, listenerId);
  const stored = new Map(conditions.map((c) => [c.deployment_id, c]));
  const ids = deployments
    .filter((d) => needsWrite(stored.get(d.id), wantedOf(entries, d, listenerId)))
    .map((d) => d.id);
  // A condition whose deployment left the listener (or whose row is being deleted) goes too.
  for (const c of conditions) if (!deployments.some((d) => d.id === c.deployment_id)) ids.push(c.deployment_id);
  return ids;
}

/**
 * Locks the deployments that `conditionChanges` found, in id order. Called before the listener's own
 * lock: every writer locks a deployment before its listener (a delete reads whether the listener was
 * ever seen under the deployment's lock), so a heartbeat must not hold the listener while it waits.
 */
export async function lockForConditions(db: Db, workspaceId: string, ids: readonly string[]) {
  return lockDeploymentsWithConditions(db, workspaceId, ids);
}

/** Writes the conditions of the locked deployments, with their events and status changes. */
export async function applyConditions(
  db: Db,
  listenerId: string,
  entries: readonly DeploymentConditionInput[],
  locked: Awaited<ReturnType<typeof lockForConditions>>,
): Promise<void> {
  const stored = new Map(locked.conditions.map((c) => [c.deployment_id, c]));
  for (const deployment of locked.deployments) {
    const before = stored.get(deployment.id);
    const wanted = wantedOf(entries, deployment, listenerId);
    if (!needsWrite(before, wanted)) continue;
    if (wanted === null) await deleteListenerCondition(db, deployment.id);
    else
      await saveListenerCondition(db, {
        deploymentId: deployment.id,
        workspaceId: deployment.workspace_id,
        listenerId,
        revisionId: wanted.revision_id,
        condition: wanted.condition,
        reason: wanted.reason,
        message: wanted.message,
        change: wanted.change,
      });
    if (sameCondition(before, wanted)) continue; // only the message changed: nothing to tell
    await tellChange(db, listenerId, deployment, before, wanted);
  }
  // Conditions of deployments that are no longer the listener's.
  for (const c of locked.conditions)
    if (!locked.deployments.some((d) => d.id === c.deployment_id)) await deleteListenerCondition(db, c.deployment_id);
}

/**
 * Whether the deployment's last word on an in-place change of `revisionId` is a
 * `deployment.update_failed` (not followed by `deployment.update_rolled_out`): read from its events,
 * newest first, only when a crash loop clears.
 */
async function updateFailureOutstanding(
  db: Db,
  deployment: ListenerDeploymentState,
  revisionId: string,
): Promise<boolean> {
  const page = 100;
  for (let offset = 0; ; offset += page) {
    const events = await listDeploymentEvents(db, deployment.workspace_id, deployment.id, page, offset, 'desc');
    const last = events.find((e) => e.type === 'deployment.update_failed' || e.type === 'deployment.update_rolled_out');
    if (last) return last.type === 'deployment.update_failed' && last.data.revision_id === revisionId;
    if (events.length < page) return false;
  }
}

async function tellChange(
  db: Db,
  listenerId: string,
  deployment: ListenerDeploymentState,
  before: ListenerDeploymentConditionRow | undefined,
  wanted: Wanted | null,
): Promise<void> {
  const event = (type: EventType, data: Record<string, unknown>) =>
    recordEvents(db, [
      {
        workspaceId: deployment.workspace_id,
        subjectType: 'deployment',
        subjectId: deployment.id,
        deploymentId: deployment.id,
        type,
        data: { ...data, listener_id: listenerId },
      },
    ]);
  const serving = deployment.active_revision_id;
  if (wanted?.condition === 'update_failed') {
    await event('deployment.update_failed', {
      revision_id: wanted.revision_id,
      reason: wanted.reason,
      message: wanted.message,
    });
  } else if (wanted === null && before !== undefined && before.revision_id === serving) {
    // Every condition cleared: an in-place change still told as failed has rolled out now. The agent
    // tells `update_failed` until the change after it finished rolling out, and `crash_loop` before it,
    // so a failure replaced by a crash loop is still outstanding, not rolled out.
    if (before.condition === 'update_failed' || (await updateFailureOutstanding(db, deployment, before.revision_id)))
      await event('deployment.update_rolled_out', { revision_id: before.revision_id });
  }
  // The rule of each condition is the conditions' table (src/domain/conditions.ts), the own data plane's too.
  if (wanted?.condition === 'crash_loop') {
    await applyCondition(db, deployment, 'crash_loop', {
      message: wanted.message,
      failure_reason: wanted.reason,
      revision_id: wanted.revision_id,
      listener_id: listenerId,
    });
  } else if (before?.condition === 'crash_loop') {
    await applyCondition(db, deployment, 'recovered', {
      message: 'The listener reports the serving revision healthy again.',
      revision_id: serving,
      listener_id: listenerId,
    });
  }
}
