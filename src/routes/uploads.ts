/**
 * Source uploads for internal_source deployments: the client sends a gzipped tarball and gets back the
 * `source_tarball_path` to use in source_revision_config. Only paths made here are accepted there.
 */
import { createHash, randomUUID } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { Kysely } from 'kysely';
import { Type } from 'typebox';
import { AppError } from '../errors.ts';
import { workspaceOf } from '../http/authenticate.ts';
import { DateTime, Uuid, errorResponses } from '../http/schema-helpers.ts';
import type { Database } from '../store/schema.ts';
import { insertUpload } from '../store/uploads.ts';

const TARBALL_TYPES = ['application/gzip', 'application/x-gzip', 'application/octet-stream', 'application/x-tar+gzip'];
const GZIP_MAGIC = Buffer.from([0x1f, 0x8b]);

const Upload = Type.Object({ id: Uuid(), source_tarball_path: Type.String(), size_bytes: Type.Integer(), sha256: Type.String(), created_at: DateTime() });

export const uploadRoutes: FastifyPluginAsyncTypebox<{ db: Kysely<Database>; dataDir: string; limitBytes: number }> = async (app, { db, dataDir, limitBytes }) => {
  // The body stays a stream: a tarball can be far larger than the JSON body limit.
  app.addContentTypeParser(TARBALL_TYPES, (_request, payload, done) => done(null, payload));

  app.post(
    '/v2/uploads',
    {
      bodyLimit: limitBytes,
      // Other content types (JSON, text) would be parsed by their own parsers, with this route's large
      // body limit, and reach the handler as something other than a stream: refuse them before that.
      onRequest: async (request) => {
        const contentType = (request.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
        if (!TARBALL_TYPES.includes(contentType)) {
          throw new AppError('unsupported_media_type', `Send the tarball as ${TARBALL_TYPES[0]}, not ${contentType || 'without Content-Type'}.`);
        }
      },
      schema: {
        tags: ['deployments'],
        summary: 'Upload a source tarball',
        description: 'Body: a gzipped tarball (Content-Type application/gzip). The returned source_tarball_path goes into source_revision_config of an internal_source deployment.',
        // Documents the body for OpenAPI; the schema has no type, so the stream passes validation as it is.
        body: { content: { 'application/gzip': { schema: { description: 'A gzipped tarball of the source.', contentMediaType: 'application/gzip' } } } },
        response: { 201: Upload, ...errorResponses(400, 401, 403, 413, 415) },
      },
    },
    async (request, reply) => {
      const workspaceId = workspaceOf(request);
      const id = randomUUID();
      const relative = `uploads/${id}.tar.gz`;
      const file = path.join(dataDir, relative);
      await fs.mkdir(path.dirname(file), { recursive: true, mode: 0o700 });
      const hash = createHash('sha256');
      let size = 0;
      let head = Buffer.alloc(0);
      const meter = new Transform({
        transform(chunk: Buffer, _encoding, callback) {
          size += chunk.length;
          if (size > limitBytes) return callback(new AppError('payload_too_large', `The tarball is larger than ${limitBytes} bytes.`));
          if (head.length < 2) head = Buffer.concat([head, chunk.subarray(0, 2)]);
          hash.update(chunk);
          callback(null, chunk);
        },
      });
      try {
        await pipeline(request.body as NodeJS.ReadableStream, meter, createWriteStream(file, { mode: 0o600 }));
        if (size === 0 || !head.subarray(0, 2).equals(GZIP_MAGIC)) throw new AppError('invalid_request', 'The body is not a gzipped tarball.');
      } catch (error) {
        await fs.rm(file, { force: true });
        throw error;
      }
      const row = await insertUpload(db, { id, workspaceId, path: relative, sizeBytes: size, sha256: hash.digest('hex') });
      return reply.status(201).send({ id, source_tarball_path: row.path, size_bytes: size, sha256: row.sha256, created_at: row.created_at.toISOString() });
    },
  );
};
