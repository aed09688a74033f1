/** Uploaded source tarballs (the file itself lives under the data directory). */
import type { Db } from './schema.ts';

export async function insertUpload(
  db: Db,
  upload: { id: string; workspaceId: string; path: string; sizeBytes: number; sha256: string },
) {
  return db
    .insertInto('source_uploads')
    .values({
      id: upload.id,
      workspace_id: upload.workspaceId,
      path: upload.path,
      size_bytes: upload.sizeBytes,
      sha256: upload.sha256,
    })
    .returningAll()
    .executeTakeFirstOrThrow();
}

export async function findUploadByPath(db: Db, workspaceId: string, path: string) {
  return db
    .selectFrom('source_uploads')
    .selectAll()
    .where('workspace_id', '=', workspaceId)
    .where('path', '=', path)
    .executeTakeFirst();
}
