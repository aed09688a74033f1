/**
 * Source uploads for internal_source deployments: the client sends a gzipped tarball and gets back the
 * `source_tarball_path` to use in source_revision_config. Only paths made here are accepted there.
 * Storing the tarball is src/service/uploads.ts; receiving it is src/routes/tarball-upload.ts, shared
 * with upload URLs.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { workspaceOf } from '../http/authenticate.ts';
import { errorResponses } from '../http/schema-helpers.ts';
import type { UploadService } from '../service/uploads.ts';
import { Upload, acceptTarballBodies, requireTarballContentType, uploadResponse } from './tarball-upload.ts';
import { needs } from '../http/route-needs.ts';

export const uploadRoutes: FastifyPluginAsyncTypebox<{
  uploads: UploadService;
  /** The route's body limit; the service counts the stream against the same limit. */
  limitBytes: number;
}> = async (app, { uploads, limitBytes }) => {
  acceptTarballBodies(app);

  app.post(
    '/v2/uploads',
    {
      config: needs({ auth: 'workspace', etag: true }),
      bodyLimit: limitBytes,
      onRequest: requireTarballContentType,
      schema: {
        operationId: 'uploadSource',
        tags: ['deployments'],
        summary: 'Upload a source tarball',
        description:
          'Body: a gzipped tarball (Content-Type application/gzip). The returned source_tarball_path ' +
          'goes into source_revision_config of an internal_source deployment.',
        // Documents the body for OpenAPI; the schema has no type, so the stream passes validation as it is.
        body: {
          content: {
            'application/gzip': {
              schema: { description: 'A gzipped tarball of the source.', contentMediaType: 'application/gzip' },
            },
          },
        },
        response: { 201: Upload, ...errorResponses(400, 401, 403, 413, 415, 422) },
      },
    },
    async (request, reply) => {
      const stored = await uploads.upload(workspaceOf(request), request.body as NodeJS.ReadableStream);
      return reply.status(201).send(uploadResponse(stored));
    },
  );
};
