/** Agent credentials: deployment-scoped secrets (stored hashed) that running agents present. */
import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import { json, type AgentCredentialRow, type Db } from './schema.ts';

export type CredentialView = Omit<AgentCredentialRow, 'credential_hash'>;

const VISIBLE = ['id', 'workspace_id', 'deployment_id', 'name', 'agent_ids', 'credential_prefix', 'created_by', 'created_at', 'last_used_at', 'revoked_at'] as const;

/** Whether the deployment exists in the workspace (credentials are minted only for those). */
export async function deploymentExists(db: Db, workspaceId: string, deploymentId: string): Promise<boolean> {
  const row = await db.selectFrom('deployments').select('id').where('workspace_id', '=', workspaceId).where('id', '=', deploymentId).executeTakeFirst();
  return row !== undefined;
}

export async function insertCredential(
  db: Db,
  credential: { workspaceId: string; deploymentId: string; name: string; agentIds: string[] | null; hash: Buffer; prefix: string; createdBy: string },
): Promise<CredentialView> {
  return db
    .insertInto('agent_credentials')
    .values({
      id: randomUUID(),
      workspace_id: credential.workspaceId,
      deployment_id: credential.deploymentId,
      name: credential.name,
      agent_ids: json(credential.agentIds),
      credential_hash: credential.hash,
      credential_prefix: credential.prefix,
      created_by: credential.createdBy,
    })
    .returning(VISIBLE)
    .executeTakeFirstOrThrow();
}

export async function listCredentials(db: Db, workspaceId: string, deploymentId: string): Promise<CredentialView[]> {
  return db
    .selectFrom('agent_credentials')
    .select(VISIBLE)
    .where('workspace_id', '=', workspaceId)
    .where('deployment_id', '=', deploymentId)
    .orderBy('created_at', 'desc')
    .orderBy('id', 'desc')
    .execute();
}

export async function revokeCredential(db: Db, workspaceId: string, deploymentId: string, id: string): Promise<boolean> {
  const result = await db
    .updateTable('agent_credentials')
    .set({ revoked_at: sql<Date>`now()` })
    .where('workspace_id', '=', workspaceId)
    .where('deployment_id', '=', deploymentId)
    .where('id', '=', id)
    .where('revoked_at', 'is', null)
    .executeTakeFirst();
  return result.numUpdatedRows > 0n;
}

/** The unrevoked credential with this hash, marking it used. */
export async function useCredential(db: Db, hash: Buffer): Promise<CredentialView | undefined> {
  return db
    .updateTable('agent_credentials')
    .set({ last_used_at: sql<Date>`now()` })
    .where('credential_hash', '=', hash)
    .where('revoked_at', 'is', null)
    .returning(VISIBLE)
    .executeTakeFirst();
}
