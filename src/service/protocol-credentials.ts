/**
 * Protocol credentials (docs/langgraph.md, "Who may call MCP and A2A"): what a caller of a deployment's
 * /mcp and /a2a presents when the deployment requires one. Minted and revoked with an audit event in one
 * transaction; the secret is shown once and stored hashed (src/store/protocol-credentials.ts).
 *
 * They open nothing on the service. The deployment's server checks one before a graph runs by asking
 * `verify` with its own agent credential: the answer is yes only for an unrevoked credential of that
 * same deployment, so another deployment's or workspace's credential, an API key or an agent credential
 * is refused alike.
 */
import type { Kysely } from 'kysely';
import {
  hashCredential,
  isCredentialOf,
  newProtocolCredential,
  PROTOCOL_CREDENTIAL_PREFIX,
} from '../auth/credentials.ts';
import { AppError, notFound } from '../errors.ts';
import { deploymentExists, useCredential } from '../store/agent-credentials.ts';
import { recordEvents } from '../store/events.ts';
import {
  insertProtocolCredential,
  listProtocolCredentials,
  revokeProtocolCredential,
  useProtocolCredential,
  type ProtocolCredentialView,
} from '../store/protocol-credentials.ts';
import type { Database } from '../store/schema.ts';

export interface ProtocolCredentialServiceDeps {
  db: Kysely<Database>;
}

export function createProtocolCredentialService({ db }: ProtocolCredentialServiceDeps) {
  return {
    /** A new credential for the deployment; `credential` is the only copy of the secret. */
    async mint(
      workspaceId: string,
      deploymentId: string,
      input: { name?: string },
      byKey: string,
    ): Promise<{ row: ProtocolCredentialView; credential: string }> {
      const { value: credential, hash, prefix } = newProtocolCredential();
      const row = await db.transaction().execute(async (tx) => {
        if (!(await deploymentExists(tx, workspaceId, deploymentId))) throw notFound('Deployment', deploymentId);
        const created = await insertProtocolCredential(tx, {
          workspaceId,
          deploymentId,
          name: input.name ?? 'protocol credential',
          hash,
          prefix,
          createdBy: byKey,
        });
        await recordEvents(tx, [
          {
            workspaceId,
            subjectType: 'protocol_credential',
            subjectId: created.id,
            deploymentId,
            type: 'protocol_credential.created',
            data: { by_key: byKey },
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
    ): Promise<ProtocolCredentialView[]> {
      if (!(await deploymentExists(db, workspaceId, deploymentId))) throw notFound('Deployment', deploymentId);
      return listProtocolCredentials(db, workspaceId, deploymentId, page);
    },

    async revoke(workspaceId: string, deploymentId: string, id: string, byKey: string): Promise<void> {
      await db.transaction().execute(async (tx) => {
        if (!(await revokeProtocolCredential(tx, workspaceId, deploymentId, id)))
          throw notFound('Protocol credential', id);
        await recordEvents(tx, [
          {
            workspaceId,
            subjectType: 'protocol_credential',
            subjectId: id,
            deploymentId,
            type: 'protocol_credential.revoked',
            data: { by_key: byKey },
          },
        ]);
      });
    },

    /** The deployment whose agent credential `agentCredential` is; 401 when it is not a valid one. */
    async deploymentOf(agentCredential: string): Promise<string> {
      const credential = await useCredential(db, hashCredential(agentCredential));
      if (!credential) throw new AppError('unauthenticated', 'Invalid agent credential.');
      return credential.deployment_id;
    },

    /** The unrevoked protocol credential `presented` of `deploymentId` (marked used), or null. */
    async verify(deploymentId: string, presented: string): Promise<ProtocolCredentialView | null> {
      if (!presented.startsWith(PROTOCOL_CREDENTIAL_PREFIX) || isCredentialOf('apiKey', presented)) return null;
      return (await useProtocolCredential(db, deploymentId, hashCredential(presented))) ?? null;
    },
  };
}

export type ProtocolCredentialService = ReturnType<typeof createProtocolCredentialService>;
