/**
 * What listener agents say about the revision serving each of their deployments when it is not
 * healthy (docs/listener-protocol.md#heartbeat): one row per such deployment, none for a healthy one.
 */
import { sql } from 'kysely';
import type { Db, DeploymentRow, ListenerCondition, ListenerDeploymentConditionRow } from './schema.ts';

export type ListenerDeploymentState = Pick<
  DeploymentRow,
  'id' | 'workspace_id' | 'status' | 'active_revision_id' | 'listener_id'
>;

/** The listener's deployments (unlocked: what a heartbeat compares first) and their stored conditions. */
export async function listenerConditionState(
  db: Db,
  listenerId: string,
): Promise<{ deployments: ListenerDeploymentState[]; conditions: ListenerDeploymentConditionRow[] }> {
  const [deployments, conditions] = await Promise.all([
    db
      .selectFrom('deployments')
      .select(['id', 'workspace_id', 'status', 'active_revision_id', 'listener_id'])
      .where('listener_id', '=', listenerId)
      .execute(),
    db.selectFrom('listener_deployment_conditions').selectAll().where('listener_id', '=', listenerId).execute(),
  ]);
  return { deployments, conditions };
}

/**
 * Locks these deployments of the workspace, in id order (so that two heartbeats never wait on each
 * other crosswise), and reads their conditions: the rows change only under their deployment's lock.
 */
export async function lockDeploymentsWithConditions(
  db: Db,
  workspaceId: string,
  ids: readonly string[],
): Promise<{ deployments: ListenerDeploymentState[]; conditions: ListenerDeploymentConditionRow[] }> {
  if (ids.length === 0) return { deployments: [], conditions: [] };
  const deployments = await db
    .selectFrom('deployments')
    .select(['id', 'workspace_id', 'status', 'active_revision_id', 'listener_id'])
    .where('workspace_id', '=', workspaceId)
    .where('id', 'in', [...ids])
    .orderBy('id')
    .forUpdate()
    .execute();
  const conditions =
    deployments.length === 0
      ? []
      : await db
          .selectFrom('listener_deployment_conditions')
          .selectAll()
          .where(
            'deployment_id',
            'in',
            deployments.map((d) => d.id),
          )
          .execute();
  return { deployments, conditions };
}

export async function saveListenerCondition(
  db: Db,
  row: {
    deploymentId: string;
    workspaceId: string;
    listenerId: string;
    revisionId: string;
    condition: ListenerCondition;
    reason: string;
    message: string;
    change: string | null;
  },
): Promise<void> {
  const values = {
    listener_id: row.listenerId,
    revision_id: row.revisionId,
    condition: row.condition,
    reason: row.reason,
    message: row.message,
    change: row.change,
  };
  await db
    .insertInto('listener_deployment_conditions')
    .values({ deployment_id: row.deploymentId, workspace_id: row.workspaceId, ...values })
    .onConflict((oc) => oc.column('deployment_id').doUpdateSet({ ...values, updated_at: sql<Date>`now()` }))
    .execute();
}

export async function deleteListenerCondition(db: Db, deploymentId: string): Promise<void> {
  await db.deleteFrom('listener_deployment_conditions').where('deployment_id', '=', deploymentId).execute();
}
