/** Tag keys, their values, and the values a deployment carries. */
import { randomUUID } from 'node:crypto';
import type { Db } from './schema.ts';

export async function insertTagKey(db: Db, workspaceId: string, key: string, description: string | null) {
  return db
    .insertInto('tag_keys')
    .values({ id: randomUUID(), workspace_id: workspaceId, key, description })
    .onConflict((oc) => oc.columns(['workspace_id', 'key']).doNothing())
    .returningAll()
    .executeTakeFirst();
}

export async function listTagKeys(db: Db, workspaceId: string, limit: number, offset: number) {
  return db
    .selectFrom('tag_keys')
    .selectAll()
    .where('workspace_id', '=', workspaceId)
    .orderBy('created_at', 'desc')
    .orderBy('id', 'desc')
    .limit(limit)
    .offset(offset)
    .execute();
}

export async function getTagKey(db: Db, workspaceId: string, id: string) {
  return db
    .selectFrom('tag_keys')
    .selectAll()
    .where('workspace_id', '=', workspaceId)
    .where('id', '=', id)
    .executeTakeFirst();
}

export async function deleteTagKey(db: Db, id: string): Promise<void> {
  await db.deleteFrom('tag_keys').where('id', '=', id).execute();
}

export async function insertTagValue(db: Db, tagKeyId: string, value: string) {
  return db
    .insertInto('tag_values')
    .values({ id: randomUUID(), tag_key_id: tagKeyId, value })
    .onConflict((oc) => oc.columns(['tag_key_id', 'value']).doNothing())
    .returningAll()
    .executeTakeFirst();
}

export async function listTagValues(db: Db, tagKeyId: string, limit: number, offset: number) {
  return db
    .selectFrom('tag_values')
    .selectAll()
    .where('tag_key_id', '=', tagKeyId)
    .orderBy('created_at', 'desc')
    .orderBy('id', 'desc')
    .limit(limit)
    .offset(offset)
    .execute();
}

export async function deleteTagValue(db: Db, tagKeyId: string, id: string): Promise<boolean> {
  const result = await db
    .deleteFrom('tag_values')
    .where('tag_key_id', '=', tagKeyId)
    .where('id', '=', id)
    .executeTakeFirst();
  return result.numDeletedRows > 0n;
}

/** Of the given ids, those that are tag values of the workspace. */
export async function existingTagValueIds(db: Db, workspaceId: string, ids: string[]): Promise<string[]> {
  if (ids.length === 0) return [];
  const rows = await db
    .selectFrom('tag_values as v')
    .innerJoin('tag_keys as k', 'k.id', 'v.tag_key_id')
    .select('v.id')
    .where('k.workspace_id', '=', workspaceId)
    .where('v.id', 'in', ids)
    .execute();
  return rows.map((r) => r.id);
}

export async function replaceDeploymentTags(db: Db, deploymentId: string, tagValueIds: string[]): Promise<void> {
  await db.deleteFrom('deployment_tags').where('deployment_id', '=', deploymentId).execute();
  if (tagValueIds.length > 0) {
    await db
      .insertInto('deployment_tags')
      .values(tagValueIds.map((id) => ({ deployment_id: deploymentId, tag_value_id: id })))
      .execute();
  }
}

/** A page of the deployment's tag values, by key then value (one value per key and value: a total order). */
export async function deploymentTags(db: Db, deploymentId: string, limit: number, offset: number) {
  return db
    .selectFrom('deployment_tags as t')
    .innerJoin('tag_values as v', 'v.id', 't.tag_value_id')
    .innerJoin('tag_keys as k', 'k.id', 'v.tag_key_id')
    .select(['v.id as tag_value_id', 'v.value', 'k.id as tag_key_id', 'k.key'])
    .where('t.deployment_id', '=', deploymentId)
    .orderBy('k.key')
    .orderBy('v.value')
    .limit(limit)
    .offset(offset)
    .execute();
}
