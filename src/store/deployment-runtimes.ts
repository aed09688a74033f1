/** What the local data plane made for a deployment (its database and agent credential), sealed. */
import type { Db, DeploymentRuntimeRow } from './schema.ts';

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
