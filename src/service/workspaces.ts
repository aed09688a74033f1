/** Workspaces of an organization (admin keys only); every change is an audit event of subject workspace. */
import type { Kysely } from 'kysely';
import { AppError } from '../errors.ts';
import { recordEvents } from '../store/events.ts';
import type { Database } from '../store/schema.ts';
import { insertWorkspace, listWorkspaces } from '../store/tenancy.ts';
import type { KeyActor } from './key-actor.ts';
import type { Page } from './page.ts';

export interface WorkspaceServiceDeps {
  db: Kysely<Database>;
}

/** Workspaces span the organization: a key bound to one workspace may neither make nor see them. */
function requireOrganizationKey(actor: KeyActor): void {
  if (actor.keyWorkspaceId !== null)
    throw new AppError(
      'forbidden',
      'Workspaces are managed with an organization API key; this key belongs to one workspace.',
    );
}

export function createWorkspaceService({ db }: WorkspaceServiceDeps) {
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
  };
}

export type WorkspaceService = ReturnType<typeof createWorkspaceService>;
