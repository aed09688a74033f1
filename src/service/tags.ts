/**
 * The small tag model behind the tag_value_ids filter of the deployment list: keys, their values, and
 * the values a deployment carries (src/routes/tags.ts is the HTTP side).
 */
import type { Kysely } from 'kysely';
import { AppError, notFound } from '../errors.ts';
import { getDeployment, lockDeployment } from '../store/deployments.ts';
import { recordEvents } from '../store/events.ts';
import type { Database } from '../store/schema.ts';
import {
  deleteTagKey,
  deleteTagValue,
  deploymentTags,
  existingTagValueIds,
  getTagKey,
  insertTagKey,
  insertTagValue,
  listTagKeys,
  listTagValues,
  replaceDeploymentTags,
} from '../store/tags.ts';
import type { Page } from './page.ts';

export interface TagServiceDeps {
  db: Kysely<Database>;
}

export function createTagService({ db }: TagServiceDeps) {
  async function key(workspaceId: string, keyId: string) {
    const row = await getTagKey(db, workspaceId, keyId);
    if (!row) throw notFound('Tag key', keyId);
    return row;
  }

  return {
    async createKey(workspaceId: string, input: { key: string; description?: string | null }) {
      const row = await insertTagKey(db, workspaceId, input.key, input.description ?? null);
      if (!row) throw new AppError('conflict', `A tag key '${input.key}' already exists.`);
      return row;
    },

    listKeys: (workspaceId: string, page: Page) => listTagKeys(db, workspaceId, page.limit, page.offset),

    /** The key goes with its values. */
    async removeKey(workspaceId: string, keyId: string): Promise<void> {
      await deleteTagKey(db, (await key(workspaceId, keyId)).id);
    },

    async addValue(workspaceId: string, keyId: string, value: string) {
      const found = await key(workspaceId, keyId);
      const row = await insertTagValue(db, found.id, value);
      if (!row) throw new AppError('conflict', `Tag key '${found.key}' already has the value '${value}'.`);
      return row;
    },

    async listValues(workspaceId: string, keyId: string, page: Page) {
      return listTagValues(db, (await key(workspaceId, keyId)).id, page.limit, page.offset);
    },

    async removeValue(workspaceId: string, keyId: string, valueId: string): Promise<void> {
      const found = await getTagKey(db, workspaceId, keyId);
      if (!found || !(await deleteTagValue(db, found.id, valueId))) throw notFound('Tag value', valueId);
    },

    /** Replaces the deployment's whole set of tag values; answers the first `page` of the new set. */
    async setDeploymentTags(workspaceId: string, deploymentId: string, tagValueIds: readonly string[], page: Page) {
      // The schema's uniqueItems compares the strings as sent; the same id in two letter cases is one value.
      const ids = [...new Set(tagValueIds.map((v) => v.toLowerCase()))];
      return db.transaction().execute(async (tx) => {
        // Locked in this transaction: a delete running at the same time either waits for the tags or
        // has removed the row, and then this is a 404 (never a foreign-key failure answered as 500).
        if (!(await lockDeployment(tx, workspaceId, deploymentId))) throw notFound('Deployment', deploymentId);
        const known = new Set(await existingTagValueIds(tx, workspaceId, ids));
        const unknown = ids.find((v) => !known.has(v));
        if (unknown) throw new AppError('invalid_reference', `tag_value_ids: Tag value ID ${unknown} not found.`);
        await replaceDeploymentTags(tx, deploymentId, ids);
        await recordEvents(tx, [
          {
            workspaceId,
            subjectType: 'deployment',
            subjectId: deploymentId,
            deploymentId,
            type: 'deployment.tags_set',
            data: { tag_value_ids: ids },
          },
        ]);
        return deploymentTags(tx, deploymentId, page.limit, page.offset);
      });
    },

    async listDeploymentTags(workspaceId: string, deploymentId: string, page: Page) {
      if (!(await getDeployment(db, workspaceId, deploymentId))) throw notFound('Deployment', deploymentId);
      return deploymentTags(db, deploymentId, page.limit, page.offset);
    },
  };
}

export type TagService = ReturnType<typeof createTagService>;
