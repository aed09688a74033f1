/**
 * Agent connections: an agent (named by the caller) linked to an OAuth token of its workspace, and the
 * fresh access token a deployed agent fetches through one with its agent credential. docs/oauth.md.
 */
import type { Kysely } from 'kysely';
import { AppError, notFound } from '../errors.ts';
import {
  deleteConnection,
  getConnection,
  insertConnection,
  listConnections,
  type ConnectionView,
} from '../store/agent-connections.ts';
import { recordEvents } from '../store/events.ts';
import { getToken } from '../store/oauth-tokens.ts';
import type { Database } from '../store/schema.ts';
import type { PresentedCredential } from '../store/agent-credentials.ts';
import type { AccessToken, OAuthTokenService } from './oauth-tokens.ts';

export interface AgentConnectionServiceDeps {
  db: Kysely<Database>;
  tokens: OAuthTokenService;
}

export function createAgentConnectionService({ db, tokens }: AgentConnectionServiceDeps) {
  return {
    async connect(workspaceId: string, agentId: string, tokenId: string, byKey: string): Promise<ConnectionView> {
      return db.transaction().execute(async (tx) => {
        if (!(await getToken(tx, workspaceId, tokenId)))
          throw new AppError('invalid_reference', `oauth_token_id: OAuth token ID ${tokenId} not found.`);
        const id = await insertConnection(tx, { workspaceId, agentId, tokenId, createdBy: byKey });
        if (id === null)
          throw new AppError('conflict', `Agent '${agentId}' is already connected to OAuth token ${tokenId}.`);
        await recordEvents(tx, [
          {
            workspaceId,
            subjectType: 'agent_connection',
            subjectId: id,
            type: 'agent_connection.created',
            data: { agent_id: agentId, oauth_token_id: tokenId, by_key: byKey },
          },
        ]);
        return (await getConnection(tx, workspaceId, agentId, id))!;
      });
    },

    /** An agent without connections has an empty list. */
    list: (workspaceId: string, agentId: string): Promise<ConnectionView[]> =>
      listConnections(db, workspaceId, agentId),

    /** The connection goes; its token stays. */
    async remove(workspaceId: string, agentId: string, id: string, byKey: string): Promise<void> {
      await db.transaction().execute(async (tx) => {
        if (!(await getConnection(tx, workspaceId, agentId, id))) throw notFound('Agent connection', id);
        await deleteConnection(tx, id);
        await recordEvents(tx, [
          {
            workspaceId,
            subjectType: 'agent_connection',
            subjectId: id,
            type: 'agent_connection.deleted',
            data: { agent_id: agentId, by_key: byKey },
          },
        ]);
      });
    },

    /**
     * A usable access token of the connection, for a deployed agent presenting its agent credential
     * (never an API key); refreshed first when it expired or is about to (src/service/oauth-tokens.ts).
     */
    /** `credential`: the agent credential presented, authorized for `agentId` (AgentCredentialService.authorize). */
    async accessToken(
      credential: PresentedCredential,
      agentId: string,
      connectionId: string,
    ): Promise<{ token: AccessToken; connection: ConnectionView }> {
      const connection = await getConnection(db, credential.workspace_id, agentId, connectionId);
      if (!connection) throw notFound('Agent connection', connectionId);
      const token = await tokens.accessToken(credential.workspace_id, connection.oauth_token_id);
      return { token, connection };
    },
  };
}

export type AgentConnectionService = ReturnType<typeof createAgentConnectionService>;
