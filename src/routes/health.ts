/** Liveness and readiness, without an API key. */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { sql, type Kysely } from 'kysely';
import { Type } from 'typebox';
import { AppError } from '../errors.ts';
import { errorResponses } from '../http/schema-helpers.ts';
import type { Database } from '../store/schema.ts';
import { needs } from '../http/route-needs.ts';

export const healthRoutes: FastifyPluginAsyncTypebox<{ db: Kysely<Database> }> = async (app, { db }) => {
  app.get(
    '/healthz',
    {
      config: needs({ auth: 'none' }),
      schema: {
        operationId: 'checkHealth',
        tags: ['operations'],
        summary: 'The process is up',
        response: { 200: Type.Object({ status: Type.Literal('ok') }) },
      },
    },
    async () => ({ status: 'ok' as const }),
  );
  app.get(
    '/readyz',
    {
      config: needs({ auth: 'none' }),
      schema: {
        operationId: 'checkReadiness',
        tags: ['operations'],
        summary: 'The database answers',
        response: { 200: Type.Object({ status: Type.Literal('ready') }), ...errorResponses(503) },
      },
    },
    async (request) => {
      try {
        await sql`select 1`.execute(db);
      } catch (error) {
        request.log.warn({ err: error }, 'readiness check failed');
        throw new AppError('unavailable', 'The database is not reachable.');
      }
      return { status: 'ready' as const };
    },
  );
};
