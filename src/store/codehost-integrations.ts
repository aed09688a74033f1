/** Code-host integrations of a workspace. */
import type { Db } from './schema.ts';

export async function getIntegration(db: Db, workspaceId: string, id: string) {
  return db.selectFrom('codehost_integrations').selectAll().where('workspace_id', '=', workspaceId).where('id', '=', id).executeTakeFirst();
}
