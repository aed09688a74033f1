/**
 * The HTTP side of receiving a source tarball, shared by `POST /v2/uploads` (API key) and the PUT of an
 * upload URL (src/routes/upload-urls.ts): the body stays a stream (src/service/uploads.ts stores it),
 * and only tarball content types reach the handler.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { Type } from 'typebox';
import { AppError } from '../errors.ts';
import { DateTime, Uuid } from '../http/schema-helpers.ts';
import type { UploadView } from '../service/uploads.ts';

export const TARBALL_TYPES = [
  'application/gzip',
  'application/x-gzip',
  'application/octet-stream',
  'application/x-tar+gzip',
];

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

/** The answer for a stored upload. */
export const uploadResponse = (u: UploadView) => ({
  id: u.id,
  source_tarball_path: u.path,
  size_bytes: u.size_bytes,
  sha256: u.sha256,
  created_at: u.created_at.toISOString(),
});
