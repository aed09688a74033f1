/**
 * Upload URLs, as LangChain's `langgraph deploy --remote` uses them (docs/langgraph.md): it asks for a
 * URL, PUTs the tarball there without an API key, then patches the deployment with the returned
 * `object_path` as source_tarball_path. The URL carries its own token: random, bound to that one
 * object of that deployment's workspace, good for one PUT within UPLOAD_URL_TTL_MS. An expired,
 * forged or reused token is 403 and nothing is stored; what is stored is stored exactly as
 * `POST /v2/uploads` stores it (src/service/uploads.ts).
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import { workspaceOf } from '../http/authenticate.ts';
import { DateTime, ShownOnceString, Uuid, errorResponses } from '../http/schema-helpers.ts';
import { UPLOAD_URL_TTL_MS, type UploadService } from '../service/uploads.ts';
import { Upload, acceptTarballBodies, requireTarballContentType, uploadResponse } from './tarball-upload.ts';
import { needs } from '../http/route-needs.ts';

export interface UploadUrlDeps {
  uploads: UploadService;
  /** The PUT's body limit; the service counts the stream against the same limit. */
  limitBytes: number;
}

export const uploadUrlRoutes: FastifyPluginAsyncTypebox<UploadUrlDeps> = async (app, { uploads, limitBytes }) => {
  acceptTarballBodies(app);

  app.post(
    '/v2/deployments/:deployment_id/upload-url',
    {
      config: needs({ auth: 'workspace', idempotent: true }),
      schema: {
        operationId: 'createUploadUrl',
        tags: ['deployments'],
        summary: 'Get a single-use URL to upload a source tarball',
        description:
          `PUT the gzipped tarball to upload_url (Content-Type application/gzip, no API key) ` +
          `within ${UPLOAD_URL_TTL_MS / 60_000} minutes, once; then patch the deployment with ` +
          `source_revision_config.source_tarball_path = object_path.`,
        params: Type.Object({ deployment_id: Uuid() }),
        response: {
          200: Type.Object(
            {
              upload_url: ShownOnceString({
                description: 'Absolute URL that authenticates the one PUT it allows (its token is shown only here).',
              }),
              object_path: Type.String({ description: 'The source_tarball_path of the upload once it is stored.' }),
              expires_at: DateTime(),
            },
            { title: 'UploadUrl' },
          ),
          ...errorResponses(401, 403, 404, 422),
        },
      },
    },
    async (request) => {
      const url = await uploads.issueUrl(workspaceOf(request), request.params.deployment_id);
      return { ...url, expires_at: url.expires_at.toISOString() };
    },
  );

  app.put(
    '/v2/uploads/:upload_id',
    {
      bodyLimit: limitBytes,
      // The URL is the credential: no API key (LangChain's CLI sends none with the upload).
      config: needs({ auth: 'none' }),
      onRequest: requireTarballContentType,
      schema: {
        operationId: 'uploadSourceToUrl',
        tags: ['deployments'],
        summary: 'Upload a source tarball to an upload URL',
        description:
          'The upload_url of POST /v2/deployments/{id}/upload-url. Body: a gzipped tarball (Content-Type application/gzip).',
        params: Type.Object({ upload_id: Uuid() }),
        querystring: Type.Object({
          token: Type.String({ minLength: 1, maxLength: 200, description: 'The token of the upload URL.' }),
        }),
        body: {
          content: {
            'application/gzip': {
              schema: { description: 'A gzipped tarball of the source.', contentMediaType: 'application/gzip' },
            },
          },
        },
        response: { 200: Upload, ...errorResponses(400, 403, 413, 415, 422) },
      },
    },
    async (request) => {
      const stored = await uploads.uploadToUrl(
        request.params.upload_id,
        request.query.token,
        request.body as NodeJS.ReadableStream,
      );
      return uploadResponse(stored);
    },
  );
};
