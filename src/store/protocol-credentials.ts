/**
 * Protocol credentials: deployment-scoped secrets (stored hashed) that callers of a deployment's MCP and
 * A2A endpoints present when the deployment requires one (docs/langgraph.md, "Who may call MCP and A2A").
 */
import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import type { Db, ProtocolCredentialRow } from './schema.ts';

export type ProtocolCredentialView = Omit<ProtocolCredentialRow, 'credential_hash'>;

const VISIBLE = [
  'id',
  'workspace_id',
  'deployment_id',
  'name',
  'credential_prefix',
  'created_by',
  'created_at',
  'last_used_at',
  'revoked_at',
] as const;

export async function insertProtocolCredential(
  db: Db,
  credential: {
    workspaceId: string;
    deploymentId: string;
    name: string;
    hash: Buffer;
    prefix: string;
    createdBy: string;
  },
): Promise<ProtocolCredentialView> {
  return db
    .insertInto('protocol_credentials')
    .values({
      id: randomUUID(),
      workspace_id: credential.workspaceId,
      deployment_id: credential.deploymentId,
      name: credential.name,
      credential_hash: credential.hash,
      credential_prefix: credential.prefix,
      created_by: credential.createdBy,
    })
    .returning(VISIBLE)
    .executeTakeFirstOrThrow();
}

export async function listProtocolCredentials(
  db: Db,
  workspaceId: string,
  deploymentId: string,
  page: { limit: number; offset: number },
): Promise<ProtocolCredentialView[]> {
  return db
    .selectFrom('protocol_credentials')
    .select(VISIBLE)
    .where('workspace_id', '=', workspaceId)
    .where('deployment_id', '=', deploymentId)
    .orderBy('created_at', 'desc')
    .orderBy('id', 'desc')
    .limit(page.limit)
    .offset(page.offset)
    .execute();
}

export async function revokeProtocolCredential(
  db: Db,
  workspaceId: string,
  deploymentId: string,
  id: string,
): Promise<boolean> {
  const result = await db
    .updateTable('protocol_credentials')
    .set({ revoked_at: sql<Date>`now()` })
    .where('workspace_id', '=', workspaceId)
    .where('deployment_id', '=', deploymentId)
    .where('id', '=', id)
    .where('revoked_at', 'is', null)
    .executeTakeFirst();
  return result.numUpdatedRows > 0n;
}

/** The unrevoked credential of `deploymentId` with this hash, marking it used; undefined for any other. */
export async function useProtocolCredential(
  db: Db,
  deploymentId: string,
  hash: Buffer,
): Promise<ProtocolCredentialView | undefined> {
  return db
    .updateTable('protocol_credentials')
    .set({ last_used_at: sql<Date>`now()` })
    .where('deployment_id', '=', deploymentId)
    .where('credential_hash', '=', hash)
    .where('revoked_at', 'is', null)
    .returning(VISIBLE)
    .executeTakeFirst();
}
