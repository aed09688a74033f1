/**
 * Source uploads for internal_source deployments: the client sends a gzipped tarball and gets back the
 * `source_tarball_path` to use in source_revision_config. Only paths made here are accepted there.
 * Storing the tarball is src/service/uploads.ts; receiving it is src/routes/tarball-upload.ts, shared
 * with upload URLs.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import { workspaceOf } from '../http/authenticate.ts';
import { errorResponses } from '../http/schema-helpers.ts';
import type { UploadService } from '../service/uploads.ts';
import { Upload, acceptTarballBodies, requireTarballContentType, uploadResponse } from './tarball-upload.ts';
import { needs } from '../http/route-needs.ts';

const UploadLimits = Type.Object(
  {
    max_bytes: Type.Integer({ description: 'The largest tarball this service takes, in bytes.' }),
    setting: Type.String({ description: "The service's setting of that limit (an environment variable)." }),
  },
  { title: 'UploadLimits' },
);

export const uploadRoutes: FastifyPluginAsyncTypebox<{
  uploads: UploadService;
  /** The route's body limit; the service counts the stream against the same limit. */
  limitBytes: number;
}> = async (app, { uploads, limitBytes }) => {
  acceptTarballBodies(app);

  app.get(
    '/v2/uploads/limits',
    {
      config: needs({ auth: 'workspace' }),
      schema: {
        operationId: 'getUploadLimits',
        tags: ['deployments'],
        summary: 'How large an upload may be',
        description:
          'The largest source tarball this service takes (POST /v2/uploads and upload URLs answer 413 over it), ' +
          'so that a client can refuse a larger one before it creates or sends anything.',
        response: { 200: UploadLimits, ...errorResponses(401, 403) },
      },
    },
    async () => ({ max_bytes: limitBytes, setting: 'SLIPWAY_UPLOAD_LIMIT_BYTES' }),
  );

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
