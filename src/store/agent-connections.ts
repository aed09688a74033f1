/** Agent connections: an agent (named by the caller) linked to an OAuth token of the same workspace. */
import { randomUUID } from 'node:crypto';
import type { Db } from './schema.ts';

/** A connection with what the interface shows of its token. */
export interface ConnectionView {
  id: string;
  workspace_id: string;
  agent_id: string;
  oauth_token_id: string;
  provider_id: string;
  provider_account_label: string | null;
  scopes: string[];
  expires_at: Date | null;
  created_by: string;
  created_at: Date;
}

/** Returns the new id, or null when the agent is already connected to that token. */
export async function insertConnection(
  db: Db,
  connection: { workspaceId: string; agentId: string; tokenId: string; createdBy: string },
): Promise<string | null> {
  const row = await db
    .insertInto('agent_connections')
    .values({
      id: randomUUID(),
      workspace_id: connection.workspaceId,
      agent_id: connection.agentId,
      oauth_token_id: connection.tokenId,
      created_by: connection.createdBy,
    })
    .onConflict((oc) => oc.columns(['agent_id', 'oauth_token_id']).doNothing())
    .returning('id')
    .executeTakeFirst();
  return row?.id ?? null;
}

export async function findConnectionId(db: Db, agentId: string, tokenId: string): Promise<string | undefined> {
  const row = await db
    .selectFrom('agent_connections')
    .select('id')
    .where('agent_id', '=', agentId)
    .where('oauth_token_id', '=', tokenId)
    .executeTakeFirst();
  return row?.id;
}

function views(db: Db) {
  return db
    .selectFrom('agent_connections as c')
    .innerJoin('oauth_tokens as t', 't.id', 'c.oauth_token_id')
    .innerJoin('oauth_providers as p', 'p.id', 't.provider_id')
    .select([
      'c.id',
      'c.workspace_id',
      'c.agent_id',
      'c.oauth_token_id',
      'p.provider_id',
      't.provider_account_label',
      't.scopes',
      't.expires_at',
      'c.created_by',
      'c.created_at',
    ]);
}

export async function listConnections(db: Db, workspaceId: string, agentId: string): Promise<ConnectionView[]> {
  return views(db)
    .where('c.workspace_id', '=', workspaceId)
    .where('c.agent_id', '=', agentId)
    .orderBy('c.created_at', 'desc')
    .orderBy('c.id', 'desc')
    .execute();
}

export async function getConnection(
  db: Db,
  workspaceId: string,
  agentId: string,
  id: string,
): Promise<ConnectionView | undefined> {
  return views(db)
    .where('c.workspace_id', '=', workspaceId)
    .where('c.agent_id', '=', agentId)
    .where('c.id', '=', id)
    .executeTakeFirst();
}

export async function deleteConnection(db: Db, id: string): Promise<void> {
  await db.deleteFrom('agent_connections').where('id', '=', id).execute();
}
