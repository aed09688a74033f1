/**
 * Upload URLs, as LangChain's `langgraph deploy --remote` uses them (docs/langgraph.md): it asks for a
 * URL, PUTs the tarball there without an API key, then patches the deployment with the returned
 * `object_path` as source_tarball_path. The URL carries its own token: random, bound to that one
 * object of that deployment's workspace, good for one PUT within UPLOAD_URL_TTL_MS. An expired,
 * forged or reused token is 403 and nothing is stored; what is stored is stored exactly as
 * `POST /v2/uploads` stores it (src/routes/tarball-upload.ts).
 */
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { Kysely } from 'kysely';
import { Type } from 'typebox';
import { AppError, notFound } from '../errors.ts';
import { workspaceOf } from '../http/authenticate.ts';
import { DateTime, Uuid, errorResponses } from '../http/schema-helpers.ts';
import { getDeployment } from '../store/deployments.ts';
import type { Database } from '../store/schema.ts';
import { consumeUploadToken, insertUploadToken } from '../store/upload-tokens.ts';
import { Upload, acceptTarballBodies, requireTarballContentType, storeTarball, uploadPath } from './tarball-upload.ts';

/** Long enough to pack and send 200 MiB on a slow line, short enough that a leaked URL soon means nothing. */
export const UPLOAD_URL_TTL_MS = 15 * 60 * 1000;

const hashToken = (token: string): Buffer => createHash('sha256').update(token).digest();

const INVALID_URL =
  'This upload URL is not valid: it has expired, was used already, or was not issued by this service. Ask for a new one (run the deploy again).';

export interface UploadUrlDeps {
  db: Kysely<Database>;
  dataDir: string;
  limitBytes: number;
  /** The service's public address: upload URLs are absolute, on it. */
  publicUrl: string;
}

export const uploadUrlRoutes: FastifyPluginAsyncTypebox<UploadUrlDeps> = async (
  app,
  { db, dataDir, limitBytes, publicUrl },
) => {
  acceptTarballBodies(app);

  app.post(
    '/v2/deployments/:deployment_id/upload-url',
    {
      schema: {
        operationId: 'createUploadUrl',
        tags: ['deployments'],
        summary: 'Get a single-use URL to upload a source tarball',
        description: `PUT the gzipped tarball to upload_url (Content-Type application/gzip, no API key) within ${UPLOAD_URL_TTL_MS / 60_000} minutes, once; then patch the deployment with source_revision_config.source_tarball_path = object_path.`,
        params: Type.Object({ deployment_id: Uuid() }),
        response: {
          200: Type.Object(
            {
              upload_url: Type.String({ description: 'Absolute URL that authenticates the one PUT it allows.' }),
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
      const workspaceId = workspaceOf(request);
      const { deployment_id: deploymentId } = request.params;
      if (!(await getDeployment(db, workspaceId, deploymentId))) throw notFound('Deployment', deploymentId);
      const id = randomUUID();
      const token = randomBytes(32).toString('base64url');
      const expiresAt = new Date(Date.now() + UPLOAD_URL_TTL_MS);
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
      return { upload_url: url.toString(), object_path: uploadPath(id), expires_at: expiresAt.toISOString() };
    },
  );

  app.put(
    '/v2/uploads/:upload_id',
    {
      bodyLimit: limitBytes,
      // The URL is the credential: no API key (LangChain's CLI sends none with the upload).
      config: { auth: 'none' },
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
      const granted = await consumeUploadToken(
        db,
        request.params.upload_id.toLowerCase(),
        hashToken(request.query.token),
      );
      if (!granted) throw new AppError('forbidden', INVALID_URL);
      const id = request.params.upload_id.toLowerCase();
      return storeTarball({ db, dataDir, limitBytes }, request.body as NodeJS.ReadableStream, granted.workspace_id, id);
    },
  );
};
