/**
 * Source uploads for internal_source deployments: a gzipped tarball stored in the database (its
 * source_uploads row and its bytes in upload_chunks), named `uploads/<id>.tar.gz`, which a deployment's
 * source_tarball_path then names. Nothing is kept on the receiving replica, so an upload received by
 * any api replica is there for the worker wherever it runs (the body is only spooled to a private file
 * while it arrives). It arrives with an API key
 * (`POST /v2/uploads`) or on a single-use upload URL (docs/langgraph.md), whose token is random, bound
 * to that one object of that deployment's workspace, and good for one PUT within UPLOAD_URL_TTL_MS. The
 * body stays a stream, counted against the upload limit, then written a chunk at a time in one
 * transaction with its row: a failed upload leaves neither row nor chunk nor file.
 */
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { Kysely } from 'kysely';
import { systemClock, type Clock } from '../clock.ts';
import { AppError, notFound } from '../errors.ts';
import { getDeployment } from '../store/deployments.ts';
import type { Database } from '../store/schema.ts';
import { consumeUploadToken, insertUploadToken } from '../store/upload-tokens.ts';
import { insertUpload, insertUploadChunk } from '../store/uploads.ts';

/** Long enough to pack and send 200 MiB on a slow line, short enough that a leaked URL soon means nothing. */
export const UPLOAD_URL_TTL_MS = 15 * 60 * 1000;

/** The size of an upload_chunks row: few rows per upload, little memory per upload in progress. */
export const UPLOAD_CHUNK_BYTES = 1024 * 1024;

const GZIP_MAGIC = Buffer.from([0x1f, 0x8b]);

const INVALID_URL =
  'This upload URL is not valid: it has expired, was used already, or was not issued by this service. ' +
  'Ask for a new one (run the deploy again).';

const hashToken = (token: string): Buffer => createHash('sha256').update(token).digest();

/**
 * The name of upload `id`: what source_tarball_path names. Uploads made before they were stored in the
 * database are files at this path under the data directory of the replica that received them.
 */
export const uploadPath = (id: string): string => `uploads/${id}.tar.gz`;

/** A size in MiB as people read it: `200 MiB`, `1.5 MiB`. */
export const mebibytes = (bytes: number): string => `${Number((bytes / 1024 / 1024).toFixed(1))} MiB`;

/** The 413 of a tarball over the limit: how large it may be, the setting, and how to send less. */
export const tooLargeMessage = (limitBytes: number): string =>
  `The tarball is larger than this service takes: ${mebibytes(limitBytes)} (${limitBytes} bytes, its setting SLIPWAY_UPLOAD_LIMIT_BYTES). ` +
  'Leave files out of the upload (slipway deploy packs what .gitignore and .slipwayignore leave in), or have the operator raise the limit.';

export interface UploadServiceDeps {
  db: Kysely<Database>;
  /** Where a body is spooled (`tmp/`) while it arrives; the upload itself is kept in the database. */
  dataDir: string;
  /** The largest tarball stored, in bytes. */
  limitBytes: number;
  /** The service's public address: upload URLs are absolute, on it. */
  publicUrl: string;
  /**
   * What upload URLs are dated and judged by: their expiry is set by it, and checked by it when given
   * (else by the database's `now()`, src/store/upload-tokens.ts). Tests move it instead of waiting.
   */
  now?: Clock;
}

/** A stored upload. */
export interface UploadView {
  id: string;
  path: string;
  size_bytes: number;
  sha256: string;
  created_at: Date;
}

/** A single-use upload URL and the path its upload will have. */
export interface UploadUrl {
  upload_url: string;
  object_path: string;
  expires_at: Date;
}

export function createUploadService({ db, dataDir, limitBytes, publicUrl, now }: UploadServiceDeps) {
  /**
   * Stores the stream as upload `id` of the workspace with its row; on any failure nothing is left.
   * The body is first spooled to a private file of this replica, metered and hashed, so that the one
   * transaction that writes the row and its chunks holds a database connection for as long as a local
   * copy takes, never for as long as a slow client takes to send 200 MiB.
   */
  async function store(body: NodeJS.ReadableStream, workspaceId: string, id: string): Promise<UploadView> {
    const spoolDir = path.join(dataDir, 'tmp');
    await fs.mkdir(spoolDir, { recursive: true, mode: 0o700 });
    const spool = path.join(spoolDir, `upload-${id}`);
    const hash = createHash('sha256');
    let size = 0;
    let head = Buffer.alloc(0);
    const meter = new Transform({
      transform(chunk: Buffer, _encoding, callback) {
        size += chunk.length;
        if (size > limitBytes) return callback(new AppError('payload_too_large', tooLargeMessage(limitBytes)));
        if (head.length < 2) head = Buffer.concat([head, chunk.subarray(0, 2)]);
        hash.update(chunk);
        callback(null, chunk);
      },
    });
    try {
      await pipeline(body, meter, createWriteStream(spool, { mode: 0o600, flags: 'wx' }));
      if (size === 0 || !head.subarray(0, 2).equals(GZIP_MAGIC))
        throw new AppError('invalid_request', 'The body is not a gzipped tarball.');
      const sha256 = hash.digest('hex');
      return await db.transaction().execute(async (tx) => {
        const row = await insertUpload(tx, { id, workspaceId, path: uploadPath(id), sizeBytes: size, sha256 });
        let seq = 0;
        for await (const chunk of createReadStream(spool, { highWaterMark: UPLOAD_CHUNK_BYTES }))
          await insertUploadChunk(tx, id, seq++, chunk as Buffer);
        return { id, path: row.path, size_bytes: size, sha256, created_at: row.created_at };
      });
    } finally {
      await fs.rm(spool, { force: true });
    }
  }

  return {
    /** Stores a tarball sent with an API key of the workspace, as a new upload. */
    upload: (workspaceId: string, body: NodeJS.ReadableStream): Promise<UploadView> =>
      store(body, workspaceId, randomUUID()),

    /** A single-use URL to PUT one tarball for the deployment, without an API key. */
    async issueUrl(workspaceId: string, deploymentId: string): Promise<UploadUrl> {
      if (!(await getDeployment(db, workspaceId, deploymentId))) throw notFound('Deployment', deploymentId);
      const id = randomUUID();
      const token = randomBytes(32).toString('base64url');
      const expiresAt = new Date((now ?? systemClock)().getTime() + UPLOAD_URL_TTL_MS);
      await insertUploadToken(db, {
        id,
        workspaceId,
        deploymentId,
        tokenHash: hashToken(token),
        objectPath: uploadPath(id),
        expiresAt,
      });
      const url = new URL(`v2/uploads/${id}`, publicUrl.endsWith('/') ? publicUrl : `${publicUrl}/`);
      url.searchParams.set('token', token);
      return { upload_url: url.toString(), object_path: uploadPath(id), expires_at: expiresAt };
    },

    /**
     * Stores the tarball PUT to an upload URL: an expired, forged or reused token is 403 and nothing is
     * stored; what is stored is stored exactly as `upload` stores it.
     */
    async uploadToUrl(uploadId: string, token: string, body: NodeJS.ReadableStream): Promise<UploadView> {
      const id = uploadId.toLowerCase();
      const granted = await consumeUploadToken(db, id, hashToken(token), now);
      if (!granted) throw new AppError('forbidden', INVALID_URL);
      return store(body, granted.workspace_id, id);
    },
  };
}

export type UploadService = ReturnType<typeof createUploadService>;
