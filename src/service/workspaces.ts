/** Workspaces of an organization (admin keys only); every change is an audit event of subject workspace. */
import type { Kysely } from 'kysely';
import type { WorkspaceQuota } from '../domain/resource-maxima.ts';
import { AppError, ValidationError, notFound } from '../errors.ts';
import { recordEvents } from '../store/events.ts';
import type { Database } from '../store/schema.ts';
import { insertWorkspace, listWorkspaces } from '../store/tenancy.ts';
import { getWorkspaceWithQuota, measuredDatabaseBytes, updateWorkspaceQuota } from '../store/workspace-quotas.ts';
import type { KeyActor } from './key-actor.ts';
import type { Page } from './page.ts';
import { workspaceUsage, type ResourcePolicy } from './resource-quotas.ts';

export interface WorkspaceServiceDeps {
  db: Kysely<Database>;
  /** The operator's maxima, which a quota may not exceed, and how use is counted (resourcePolicyOf(config)). */
  resources: ResourcePolicy;
}

/** Workspaces span the organization: a key bound to one workspace may neither make nor see them. */
function requireOrganizationKey(actor: KeyActor): void {
  if (actor.keyWorkspaceId !== null)
    throw new AppError(
      'forbidden',
      'Workspaces are managed with an organization API key; this key belongs to one workspace.',
    );
}

export function createWorkspaceService({ db, resources }: WorkspaceServiceDeps) {
  return {
    async create(actor: KeyActor, name: string) {
      requireOrganizationKey(actor);
      return db.transaction().execute(async (tx) => {
        const created = await insertWorkspace(tx, actor.organizationId, name);
        if (!created) throw new AppError('conflict', `A workspace named '${name}' already exists.`);
        await recordEvents(tx, [
          {
            workspaceId: created.id,
            subjectType: 'workspace',
            subjectId: created.id,
            type: 'workspace.created',
            data: { name: created.name, by_key: actor.keyId },
          },
        ]);
        return created;
      });
    },

    async list(actor: KeyActor, page: Page) {
      requireOrganizationKey(actor);
      return listWorkspaces(db, actor.organizationId, page.limit, page.offset);
    },

    /**
     * One workspace with its quota and what its deployments use. An organization key sees every
     * workspace of its organization; a workspace key only its own (any other is not found).
     */
    async get(actor: KeyActor, workspaceId: string) {
      if (actor.keyWorkspaceId !== null && actor.keyWorkspaceId !== workspaceId)
        throw notFound('Workspace', workspaceId);
      const row = await getWorkspaceWithQuota(db, actor.organizationId, workspaceId);
      if (!row) throw notFound('Workspace', workspaceId);
      const usage = await workspaceUsage(db, resources, workspaceId);
      return { ...row, usage: { ...usage, database_size_bytes: await measuredDatabaseBytes(db, workspaceId) } };
    },

    /**
     * Sets the fields of the workspace's quota given (null removes one); an organization admin's
     * (the route says so). A memory quota over what all apps together get is a 422 naming that total.
     */
    async setQuota(actor: KeyActor, workspaceId: string, quota: Partial<WorkspaceQuota>) {
      requireOrganizationKey(actor);
      const memory = quota.memory_mb;
      if (memory !== undefined && memory !== null && memory > resources.appsMemoryMb) {
        throw new ValidationError([
          {
            type: 'less_than_equal',
            loc: ['body', 'quota', 'memory_mb'],
            msg: `Input should be less than or equal to ${resources.appsMemoryMb}: the operator gives all apps together at most ${resources.appsMemoryMb} MiB of memory (SLIPWAY_APPS_MEMORY_MB)`,
            input: memory,
          },
        ]);
      }
      await db.transaction().execute(async (tx) => {
        const updated = await updateWorkspaceQuota(tx, actor.organizationId, workspaceId, quota);
        if (!updated) throw notFound('Workspace', workspaceId);
        await recordEvents(tx, [
          {
            workspaceId,
            subjectType: 'workspace',
            subjectId: workspaceId,
            type: 'workspace.quota_changed',
            data: { quota: updated, by_key: actor.keyId },
          },
        ]);
      });
      return this.get(actor, workspaceId);
    },
  };
}

export type WorkspaceService = ReturnType<typeof createWorkspaceService>;
