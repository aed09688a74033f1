/**
 * Receiving a source tarball, shared by `POST /v2/uploads` (API key) and the PUT of an upload URL
 * (src/routes/upload-urls.ts): the body stays a stream, is counted against the upload limit, must be
 * gzip, and lands under the data directory as `uploads/<id>.tar.gz` with its row; a failed upload
 * leaves neither file nor row.
 */
import { createHash } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Kysely } from 'kysely';
import { Type } from 'typebox';
import { AppError } from '../errors.ts';
import { DateTime, Uuid } from '../http/schema-helpers.ts';
import type { Database } from '../store/schema.ts';
import { insertUpload } from '../store/uploads.ts';

export const TARBALL_TYPES = [
  'application/gzip',
  'application/x-gzip',
  'application/octet-stream',
  'application/x-tar+gzip',
];
const GZIP_MAGIC = Buffer.from([0x1f, 0x8b]);

export const Upload = Type.Object(
  {
    id: Uuid(),
    source_tarball_path: Type.String(),
    size_bytes: Type.Integer(),
    sha256: Type.String(),
    created_at: DateTime(),
  },
  { title: 'Upload' },
);

/** Where upload `id` is kept, relative to the data directory: what source_tarball_path names. */
export const uploadPath = (id: string): string => `uploads/${id}.tar.gz`;

/** The body of a tarball route stays a stream: a tarball can be far larger than the JSON body limit. */
export function acceptTarballBodies(app: FastifyInstance): void {
  app.addContentTypeParser(TARBALL_TYPES, (_request, payload, done) => done(null, payload));
}

/**
 * An onRequest check for tarball routes. Other content types (JSON, text) would be parsed by their own
 * parsers, with the route's large body limit, and reach the handler as something other than a stream:
 * refuse them before that (and before anything else about the request is looked at).
 */
export async function requireTarballContentType(request: FastifyRequest): Promise<void> {
  const contentType = (request.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
  if (!TARBALL_TYPES.includes(contentType)) {
    throw new AppError(
      'unsupported_media_type',
      `Send the tarball as ${TARBALL_TYPES[0]}, not ${contentType || 'without Content-Type'}.`,
    );
  }
}

export interface TarballStore {
  db: Kysely<Database>;
  dataDir: string;
  limitBytes: number;
}

/** Writes the stream as upload `id` of the workspace and records it; on any failure nothing is left. */
export async function storeTarball(store: TarballStore, body: NodeJS.ReadableStream, workspaceId: string, id: string) {
  const { db, dataDir, limitBytes } = store;
  const relative = uploadPath(id);
  const file = path.join(dataDir, relative);
  await fs.mkdir(path.dirname(file), { recursive: true, mode: 0o700 });
  const hash = createHash('sha256');
  let size = 0;
  let head = Buffer.alloc(0);
  const meter = new Transform({
    transform(chunk: Buffer, _encoding, callback) {
      size += chunk.length;
      if (size > limitBytes)
        return callback(new AppError('payload_too_large', `The tarball is larger than ${limitBytes} bytes.`));
      if (head.length < 2) head = Buffer.concat([head, chunk.subarray(0, 2)]);
      hash.update(chunk);
      callback(null, chunk);
    },
  });
  try {
    // 'wx': an upload never overwrites another one's file.
    await pipeline(body, meter, createWriteStream(file, { mode: 0o600, flags: 'wx' }));
    if (size === 0 || !head.subarray(0, 2).equals(GZIP_MAGIC))
      throw new AppError('invalid_request', 'The body is not a gzipped tarball.');
    // Inside the try: a file no row names would never be used or removed, so a failed insert removes it.
    const row = await insertUpload(db, {
      id,
      workspaceId,
      path: relative,
      sizeBytes: size,
      sha256: hash.digest('hex'),
    });
    return {
      id,
      source_tarball_path: row.path,
      size_bytes: size,
      sha256: row.sha256,
      created_at: row.created_at.toISOString(),
    };
  } catch (error) {
    // EEXIST: the file is another upload's (ids are random, so this does not happen): leave it be.
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') await fs.rm(file, { force: true });
    throw error;
  }
}
