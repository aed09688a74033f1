/**
 * The local data plane's copy of an uploaded source tarball: its bytes are in the database
 * (src/store/uploads.ts), whichever replica received it, and are written to a file of the revision's
 * work directory for extraction (which reads the archive twice, src/dataplane/archive-extraction.ts).
 */
import { createWriteStream } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { findUploadByPath, readUploadChunks } from '../store/uploads.ts';
import type { Db } from '../store/schema.ts';
import { RevisionFailure } from './revision-build.ts';

/** Upload paths are made by the service; a legacy file is only ever looked for at one of these. */
const UPLOAD_PATH = /^uploads\/[0-9a-f-]{36}\.tar\.gz$/;

/** Where an upload made before uploads were stored in the database is, on the replica that received it. */
export const legacyUploadFile = (dataDir: string, uploadPath: string): string | null =>
  UPLOAD_PATH.test(uploadPath) ? path.join(dataDir, uploadPath) : null;

/** Writes upload `uploadPath` of the workspace to `destFile`. */
export async function copyUpload(
  db: Db,
  dataDir: string,
  workspaceId: string,
  uploadPath: string,
  destFile: string,
): Promise<void> {
  const upload = await findUploadByPath(db, workspaceId, uploadPath);
  if (!upload)
    throw new RevisionFailure(
      'BUILD_FAILED',
      'source_missing',
      `The upload ${uploadPath} no longer exists: upload the source again and patch the deployment with the new path.`,
    );
  const chunks = readUploadChunks(db, upload.id);
  const first = await chunks.next();
  if (first.done) {
    // An upload made by an earlier version has a row but no chunks: its bytes are a file in the data
    // directory of the replica that received it, here when that replica also runs this worker.
    const legacy = legacyUploadFile(dataDir, uploadPath);
    if (!legacy) throw new Error(`${uploadPath} is not an upload path`);
    await fs.copyFile(legacy, destFile).catch((error: unknown) => {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
      throw new RevisionFailure(
        'BUILD_FAILED',
        'source_missing',
        `The upload ${uploadPath} was made before uploads were stored in the database, and its file is not ` +
          `in this worker's data directory (another replica received it): upload the source again.`,
      );
    });
    return;
  }
  await pipeline(
    Readable.from(
      (async function* () {
        yield first.value;
        yield* chunks;
      })(),
    ),
    createWriteStream(destFile, { mode: 0o600 }),
  );
}
