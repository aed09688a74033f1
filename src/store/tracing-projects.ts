/** Tracing projects: one per deployment name in a workspace, kept when the deployment goes. */
import { randomUUID } from 'node:crypto';
import type { Db } from './schema.ts';

/** The project of this name in the workspace, created if missing (a deleted deployment's is reused). */
export async function ensureTracingProject(db: Db, workspaceId: string, name: string): Promise<string> {
  const row = await db
    .insertInto('tracing_projects')
    .values({ id: randomUUID(), workspace_id: workspaceId, name })
    // The no-op update makes RETURNING yield the existing row too.
    .onConflict((oc) => oc.columns(['workspace_id', 'name']).doUpdateSet((eb) => ({ name: eb.ref('excluded.name') })))
    .returning('id')
    .executeTakeFirstOrThrow();
  return row.id;
}

export async function listTracingProjects(db: Db, workspaceId: string, limit: number, offset: number) {
  return db
    .selectFrom('tracing_projects')
    .selectAll()
    .where('workspace_id', '=', workspaceId)
    .orderBy('created_at', 'desc')
    .orderBy('id', 'desc')
    .limit(limit)
    .offset(offset)
    .execute();
}

export async function deleteTracingProject(db: Db, id: string): Promise<void> {
  await db.deleteFrom('tracing_projects').where('id', '=', id).execute();
}

export async function tracingProjectName(db: Db, id: string): Promise<string | undefined> {
  const row = await db.selectFrom('tracing_projects').select('name').where('id', '=', id).executeTakeFirst();
  return row?.name;
}
