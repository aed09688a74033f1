/** What the local data plane made for a deployment (its database and agent credential), sealed. */
import type { DatabaseStorageState } from '../domain/database-storage.ts';
import type { Db, DeploymentRuntimeRow } from './schema.ts';
import { desiredResourceSpec } from '../domain/desired-state.ts';

export async function getDeploymentRuntime(db: Db, deploymentId: string): Promise<DeploymentRuntimeRow | undefined> {
  return db.selectFrom('deployment_runtimes').selectAll().where('deployment_id', '=', deploymentId).executeTakeFirst();
}

export interface DeploymentRuntimeChange {
  databaseName?: string;
  roleName?: string;
  databasePasswordSealed?: string;
  agentCredentialId?: string;
  agentCredentialSealed?: string;
}

/** Inserts or completes the row; fields not given keep their value. */
export async function saveDeploymentRuntime(
  db: Db,
  deploymentId: string,
  workspaceId: string,
  change: DeploymentRuntimeChange,
): Promise<void> {
  const values = {
    ...(change.databaseName !== undefined ? { database_name: change.databaseName } : {}),
    ...(change.roleName !== undefined ? { role_name: change.roleName } : {}),
    ...(change.databasePasswordSealed !== undefined ? { database_password_sealed: change.databasePasswordSealed } : {}),
    ...(change.agentCredentialId !== undefined ? { agent_credential_id: change.agentCredentialId } : {}),
    ...(change.agentCredentialSealed !== undefined ? { agent_credential_sealed: change.agentCredentialSealed } : {}),
  };
  await db
    .insertInto('deployment_runtimes')
    .values({ deployment_id: deploymentId, workspace_id: workspaceId, ...values })
    .onConflict((oc) => oc.column('deployment_id').doUpdateSet(values))
    .execute();
}

/** An app database the local data plane measures against its limit, with what its deployment asks. */
export interface MeasuredAppDatabase {
  deploymentId: string;
  workspaceId: string;
  databaseName: string;
  roleName: string;
  state: DatabaseStorageState;
  stateSizeBytes: number | null;
  /** The size recorded last (recordDatabaseSize), null before the first measure. */
  sizeBytes: number | null;
  resourceSpec: Record<string, unknown> | null;
}

/**
 * The databases of deployments on the own data plane, but those being deleted (their database is about
 * to be dropped). Only names the data plane made are here: never the service's own database.
 */
export async function appDatabasesToMeasure(db: Db): Promise<MeasuredAppDatabase[]> {
  const rows = await db
    .selectFrom('deployment_runtimes as r')
    .innerJoin('deployments as d', 'd.id', 'r.deployment_id')
    .select([
      'r.deployment_id',
      'r.workspace_id',
      'r.database_name',
      'r.role_name',
      'r.database_storage_state',
      'r.database_state_size_bytes',
      'r.database_size_bytes',
      'd.source_config',
    ])
    .where('d.listener_id', 'is', null)
    .where('d.status', '!=', 'AWAITING_DELETE')
    .where('r.database_name', 'is not', null)
    .where('r.role_name', 'is not', null)
    .orderBy('r.deployment_id')
    .execute();
  return rows.map((r) => ({
    deploymentId: r.deployment_id,
    workspaceId: r.workspace_id,
    databaseName: r.database_name!,
    roleName: r.role_name!,
    state: r.database_storage_state,
    stateSizeBytes: r.database_state_size_bytes === null ? null : Number(r.database_state_size_bytes),
    sizeBytes: r.database_size_bytes === null ? null : Number(r.database_size_bytes),
    // The deployment's current spec, by the desired-state rule (whichever revision runs).
    resourceSpec: desiredResourceSpec(r),
  }));
}

/** Keeps what a measure found of a deployment's database (GET of a workspace sums it). */
export async function recordDatabaseSize(db: Db, deploymentId: string, sizeBytes: number, at: Date): Promise<void> {
  await db
    .updateTable('deployment_runtimes')
    .set({ database_size_bytes: sizeBytes, database_measured_at: at })
    .where('deployment_id', '=', deploymentId)
    .execute();
}

/**
 * Moves the database's storage state from `from` to `to`, remembering the size it changed at; false when
 * it was no longer `from` (another replica's measure changed it first): the one writer of the state,
 * so each change is made, and recorded, once.
 */
export async function changeDatabaseStorageState(
  db: Db,
  deploymentId: string,
  from: DatabaseStorageState,
  to: DatabaseStorageState,
  sizeBytes: number,
): Promise<boolean> {
  const changed = await db
    .updateTable('deployment_runtimes')
    .set({ database_storage_state: to, database_state_size_bytes: sizeBytes })
    .where('deployment_id', '=', deploymentId)
    .where('database_storage_state', '=', from)
    .executeTakeFirst();
  return changed.numUpdatedRows > 0n;
}
