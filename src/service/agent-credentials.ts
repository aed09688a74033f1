/**
 * Agent credentials: deployment-scoped secrets that deployed agents present to fetch tokens of their
 * connections (src/service/agent-connections.ts). Minted and revoked with an audit event in one
 * transaction; the secret is shown once and stored hashed (src/store/agent-credentials.ts).
 */
import type { Kysely } from 'kysely';
import { hashCredential, newCredential } from '../auth/credentials.ts';
import { AppError, notFound } from '../errors.ts';
import {
  credentialReaches,
  deploymentExists,
  insertCredential,
  listCredentials,
  revokeCredential,
  useCredential,
  type CredentialView,
  type PresentedCredential,
} from '../store/agent-credentials.ts';
import { recordEvents } from '../store/events.ts';
import type { Database } from '../store/schema.ts';

export interface AgentCredentialServiceDeps {
  db: Kysely<Database>;
}

export interface MintAgentCredentialInput {
  name?: string;
  /** Required: least privilege (a credential for every agent would hand out every token of the workspace). */
  agent_ids: string[];
}

export function createAgentCredentialService({ db }: AgentCredentialServiceDeps) {
  return {
    /** A new credential for the deployment; `credential` is the only copy of the secret. */
    async mint(
      workspaceId: string,
      deploymentId: string,
      input: MintAgentCredentialInput,
      byKey: string,
    ): Promise<{ row: CredentialView; credential: string }> {
      const { value: credential, hash: credentialHash, prefix: credentialPrefix } = newCredential('agent');
      const row = await db.transaction().execute(async (tx) => {
        if (!(await deploymentExists(tx, workspaceId, deploymentId))) throw notFound('Deployment', deploymentId);
        const created = await insertCredential(tx, {
          workspaceId,
          deploymentId,
          name: input.name ?? 'agent credential',
          agentIds: input.agent_ids,
          hash: credentialHash,
          prefix: credentialPrefix,
          createdBy: byKey,
        });
        await recordEvents(tx, [
          {
            workspaceId,
            subjectType: 'agent_credential',
            subjectId: created.id,
            deploymentId,
            type: 'agent_credential.created',
            data: { agent_ids: created.agent_ids, by_key: byKey },
          },
        ]);
        return created;
      });
      return { row, credential };
    },

    async list(
      workspaceId: string,
      deploymentId: string,
      page: { limit: number; offset: number },
    ): Promise<CredentialView[]> {
      if (!(await deploymentExists(db, workspaceId, deploymentId))) throw notFound('Deployment', deploymentId);
      return listCredentials(db, workspaceId, deploymentId, page);
    },

    async revoke(workspaceId: string, deploymentId: string, id: string, byKey: string): Promise<void> {
      await db.transaction().execute(async (tx) => {
        if (!(await revokeCredential(tx, workspaceId, deploymentId, id))) throw notFound('Agent credential', id);
        await recordEvents(tx, [
          {
            workspaceId,
            subjectType: 'agent_credential',
            subjectId: id,
            deploymentId,
            type: 'agent_credential.revoked',
            data: { by_key: byKey },
          },
        ]);
      });
    },

    /** The credential an agent presented, when it is valid and reaches `agentId` (marked used). */
    async authorize(presented: string, agentId: string): Promise<PresentedCredential> {
      const credential = await useCredential(db, hashCredential(presented));
      if (!credential) throw new AppError('unauthenticated', 'Invalid agent credential.');
      if (!credentialReaches(credential, agentId)) {
        throw new AppError('forbidden', `This agent credential is not valid for agent '${agentId}'.`);
      }
      return credential;
    },
  };
}

export type AgentCredentialService = ReturnType<typeof createAgentCredentialService>;
