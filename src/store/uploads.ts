/**
 * Uploaded source tarballs: a source_uploads row, and its bytes as upload_chunks rows in `seq` order
 * (migrations/014_upload_chunks.sql). An upload made before chunks existed has none: its bytes are a
 * file in the data directory of the replica that received it (src/dataplane/upload-source.ts).
 */
import { sql } from 'kysely';
import type { Db } from './schema.ts';

/** Chunks read per query when an upload is streamed back: a few MiB in memory at most. */
const READ_BATCH = 4;

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

export async function insertUploadChunk(db: Db, uploadId: string, seq: number, data: Buffer): Promise<void> {
  await db.insertInto('upload_chunks').values({ upload_id: uploadId, seq, data }).execute();
}

/** The upload's bytes, chunk by chunk in order, a few chunks per query; nothing for an upload without chunks. */
export async function* readUploadChunks(db: Db, uploadId: string): AsyncGenerator<Buffer> {
  for (let next = 0; ;) {
    const rows = await db
      .selectFrom('upload_chunks')
      .select(['seq', 'data'])
      .where('upload_id', '=', uploadId)
      .where('seq', '>=', next)
      .orderBy('seq')
      .limit(READ_BATCH)
      .execute();
    for (const row of rows) yield row.data;
    if (rows.length < READ_BATCH) return;
    next = rows[rows.length - 1]!.seq + 1;
  }
}

export async function findUploadByPath(db: Db, workspaceId: string, path: string) {
  return db
    .selectFrom('source_uploads')
    .selectAll()
    .where('workspace_id', '=', workspaceId)
    .where('path', '=', path)
    .executeTakeFirst();
}

/**
 * Deletes the uploads that only this deployment's revisions used (rows and, on delete cascade, their
 * chunks), as the deployment goes; returns them, for a file an upload made before chunks also has.
 */
export async function deleteUploadsOnlyUsedBy(db: Db, deploymentId: string): Promise<{ id: string; path: string }[]> {
  const deleted = await sql<{ id: string; path: string }>`
    delete from source_uploads u
    where u.path in (select r.source_revision_config->>'source_tarball_path' from revisions r where r.deployment_id = ${deploymentId})
      and not exists (select 1 from revisions o where o.deployment_id <> ${deploymentId} and o.source_revision_config->>'source_tarball_path' = u.path)
    returning u.id, u.path`.execute(db);
  return deleted.rows;
}
