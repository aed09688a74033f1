/**
 * Agent credentials: deployment-scoped secrets (stored hashed) that running agents present.
 *
 * Least privilege: a credential reaches only the agents it names in `agent_ids`. Null names no list but
 * the deployment's own agents: the agent whose id is the deployment's name, and those whose id starts
 * with it and a slash (`support-agent`, `support-agent/triage`). That is what the local data plane mints
 * for a running app (src/dataplane/local-runtime.ts), which knows its deployment but not its agents;
 * deployment names are unique in a workspace, never change and hold no slash, so no other deployment
 * can own those ids. Credentials made through the API must name their agents.
 */
import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import { json, type AgentCredentialRow, type Db } from './schema.ts';

export type CredentialView = Omit<AgentCredentialRow, 'credential_hash'>;

/** A credential presented by an agent, with the name of its deployment (what a null agent_ids means). */
export interface PresentedCredential extends CredentialView {
  deployment_name: string;
}

/** Whether the credential may fetch tokens of `agentId`'s connections (see the rule above). */
export function credentialReaches(
  credential: Pick<PresentedCredential, 'agent_ids' | 'deployment_name'>,
  agentId: string,
): boolean {
  if (credential.agent_ids !== null) return credential.agent_ids.includes(agentId);
  return agentId === credential.deployment_name || agentId.startsWith(`${credential.deployment_name}/`);
}

const VISIBLE = [
  'id',
  'workspace_id',
  'deployment_id',
  'name',
  'agent_ids',
  'credential_prefix',
  'created_by',
  'created_at',
  'last_used_at',
  'revoked_at',
] as const;

/** Whether the deployment exists in the workspace (credentials are minted only for those). */
export async function deploymentExists(db: Db, workspaceId: string, deploymentId: string): Promise<boolean> {
  const row = await db
    .selectFrom('deployments')
    .select('id')
    .where('workspace_id', '=', workspaceId)
    .where('id', '=', deploymentId)
    .executeTakeFirst();
  return row !== undefined;
}

export async function insertCredential(
  db: Db,
  /** `agentIds` null: the deployment's own agents (see above). */
  credential: {
    workspaceId: string;
    deploymentId: string;
    name: string;
    agentIds: string[] | null;
    hash: Buffer;
    prefix: string;
    createdBy: string;
  },
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

export async function listCredentials(
  db: Db,
  workspaceId: string,
  deploymentId: string,
  page: { limit: number; offset: number },
): Promise<CredentialView[]> {
  return db
    .selectFrom('agent_credentials')
    .select(VISIBLE)
    .where('workspace_id', '=', workspaceId)
    .where('deployment_id', '=', deploymentId)
    .orderBy('created_at', 'desc')
    .orderBy('id', 'desc')
    .limit(page.limit)
    .offset(page.offset)
    .execute();
}

export async function revokeCredential(
  db: Db,
  workspaceId: string,
  deploymentId: string,
  id: string,
): Promise<boolean> {
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
export async function useCredential(db: Db, hash: Buffer): Promise<PresentedCredential | undefined> {
  return db
    .updateTable('agent_credentials')
    .from('deployments')
    .set({ last_used_at: sql<Date>`now()` })
    .whereRef('deployments.id', '=', 'agent_credentials.deployment_id')
    .where('agent_credentials.credential_hash', '=', hash)
    .where('agent_credentials.revoked_at', 'is', null)
    .returning([
      ...VISIBLE.map((column) => `agent_credentials.${column}` as const),
      'deployments.name as deployment_name',
    ])
    .executeTakeFirst();
}
