/** API keys (admin keys only). Every change is an audit event of subject api_key; no event holds the key. */
import type { Kysely } from 'kysely';
import { newCredential } from '../auth/credentials.ts';
import { AppError, notFound } from '../errors.ts';
import { recordEvents } from '../store/events.ts';
import type { Database, Db } from '../store/schema.ts';
import {
  apiKeyAuditFields,
  createApiKey,
  firstWorkspaceIds,
  listApiKeys,
  revokeApiKey,
  workspaceInOrganization,
} from '../store/tenancy.ts';
import type { KeyActor } from './key-actor.ts';
import type { Page } from './page.ts';

export interface ApiKeyServiceDeps {
  db: Kysely<Database>;
}

export interface CreateApiKeyInput {
  name: string;
  role?: 'admin' | 'member';
  /** Absent: the workspace the request acts in; null: an organization key. */
  workspace_id?: string | null;
}

/**
 * Where an API key's audit event goes (events belong to a workspace): the key's own workspace; for an
 * organization-wide key, the workspace the request acts in (X-Tenant-Id), else the organization's first.
 */
async function auditWorkspace(db: Db, keyWorkspaceId: string | null, actor: KeyActor): Promise<string> {
  const id = keyWorkspaceId ?? actor.workspaceId ?? (await firstWorkspaceIds(db, actor.organizationId))[0];
  // An organization always has a workspace (the first start makes one, and none is ever deleted).
  if (id === undefined) throw new Error(`Organization ${actor.organizationId} has no workspace to record an event in`);
  return id;
}

/** What an API key event records: never the key, its hash or its prefix. */
const keyEventData = (key: { name: string; role: string; workspace_id: string | null }, byKey: string) => ({
  name: key.name,
  role: key.role,
  workspace_id: key.workspace_id,
  by_key: byKey,
});

export function createApiKeyService({ db }: ApiKeyServiceDeps) {
  return {
    /** A new key; `key` is the only copy of the secret. */
    async create(actor: KeyActor, input: CreateApiKeyInput) {
      const workspaceId = input.workspace_id === undefined ? actor.workspaceId : input.workspace_id;
      if (actor.keyWorkspaceId !== null && workspaceId !== actor.keyWorkspaceId) {
        throw new AppError('forbidden', 'A workspace key can only create keys for its own workspace.');
      }
      if (workspaceId !== null && !(await workspaceInOrganization(db, workspaceId, actor.organizationId))) {
        throw new AppError('invalid_reference', `workspace_id: Workspace ID ${workspaceId} not found.`);
      }
      const { value: key, hash: keyHash, prefix: keyPrefix } = newCredential('apiKey');
      const row = await db.transaction().execute(async (tx) => {
        const created = await createApiKey(tx, {
          organizationId: actor.organizationId,
          workspaceId,
          name: input.name,
          role: input.role ?? 'member',
          hash: keyHash,
          prefix: keyPrefix,
        });
        await recordEvents(tx, [
          {
            workspaceId: await auditWorkspace(tx, created.workspace_id, actor),
            subjectType: 'api_key',
            subjectId: created.id,
            type: 'api_key.created',
            data: keyEventData(created, actor.keyId),
          },
        ]);
        return created;
      });
      return { row, key };
    },

    /** The whole organization's keys for an organization key, else its workspace's. */
    list: (actor: KeyActor, page: Page) =>
      listApiKeys(
        db,
        { organizationId: actor.organizationId, workspaceId: actor.keyWorkspaceId },
        page.limit,
        page.offset,
      ),

    async revoke(actor: KeyActor, id: string): Promise<void> {
      await db.transaction().execute(async (tx) => {
        const scope = { organizationId: actor.organizationId, workspaceId: actor.keyWorkspaceId };
        if (!(await revokeApiKey(tx, scope, id))) throw notFound('API key', id);
        const key = await apiKeyAuditFields(tx, id);
        await recordEvents(tx, [
          {
            workspaceId: await auditWorkspace(tx, key.workspace_id, actor),
            subjectType: 'api_key',
            subjectId: id,
            type: 'api_key.revoked',
            data: keyEventData(key, actor.keyId),
          },
        ]);
      });
    },
  };
}

export type ApiKeyService = ReturnType<typeof createApiKeyService>;
