/** Listeners: compute infrastructure registered by a workspace. */
import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import { json, type Db, type ListenerRow } from './schema.ts';

export async function insertListener(
  db: Db,
  listener: { workspaceId: string; computeType: string; computeId: string; namespaces: string[]; version: string | null },
): Promise<ListenerRow | null> {
  const row = await db
    .insertInto('listeners')
    .values({
      id: randomUUID(),
      workspace_id: listener.workspaceId,
      compute_type: listener.computeType,
      compute_id: listener.computeId,
      compute_config: json({ k8s_namespaces: listener.namespaces }),
      version: listener.version,
    })
    // (workspace_id, compute_id) is unique: a concurrent twin loses here, never by a read-then-write.
    .onConflict((oc) => oc.columns(['workspace_id', 'compute_id']).doNothing())
    .returningAll()
    .executeTakeFirst();
  return row ?? null;
}

export async function getListener(db: Db, workspaceId: string, id: string): Promise<ListenerRow | undefined> {
  return db.selectFrom('listeners').selectAll().where('workspace_id', '=', workspaceId).where('id', '=', id).executeTakeFirst();
}

export async function lockListener(db: Db, workspaceId: string, id: string): Promise<ListenerRow | undefined> {
  return db.selectFrom('listeners').selectAll().where('workspace_id', '=', workspaceId).where('id', '=', id).forUpdate().executeTakeFirst();
}

export async function shareLockListener(db: Db, workspaceId: string, id: string): Promise<ListenerRow | undefined> {
  return db.selectFrom('listeners').selectAll().where('workspace_id', '=', workspaceId).where('id', '=', id).forShare().executeTakeFirst();
}

export async function listListeners(db: Db, workspaceId: string, limit: number, offset: number): Promise<ListenerRow[]> {
  return db.selectFrom('listeners').selectAll().where('workspace_id', '=', workspaceId).orderBy('created_at', 'desc').orderBy('id', 'desc').limit(limit).offset(offset).execute();
}

export async function updateListener(db: Db, id: string, change: { namespaces?: string[]; version?: string | null }): Promise<ListenerRow> {
  return db
    .updateTable('listeners')
    .set({
      ...(change.namespaces ? { compute_config: json({ k8s_namespaces: change.namespaces }) } : {}),
      ...(change.version !== undefined ? { version: change.version } : {}),
      updated_at: sql<Date>`now()`,
    })
    .where('id', '=', id)
    .returningAll()
    .executeTakeFirstOrThrow();
}

export async function deploymentsUsingListener(db: Db, id: string): Promise<{ name: string; k8s_namespace: string | null }[]> {
  return db
    .selectFrom('deployments')
    .select(['name', sql<string | null>`source_config->'listener_config'->>'k8s_namespace'`.as('k8s_namespace')])
    .where('listener_id', '=', id)
    .execute();
}

export async function deleteListener(db: Db, id: string): Promise<void> {
  await db.deleteFrom('listeners').where('id', '=', id).execute();
}
