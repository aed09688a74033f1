/** Tracing projects, made with deployments of the same name. */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { Kysely } from 'kysely';
import { Type } from 'typebox';
import { workspaceOf } from '../http/authenticate.ts';
import { DateTime, ListEnvelope, PageQuery, Uuid, errorResponses, pageOf, envelope } from '../http/schema-helpers.ts';
import type { Database } from '../store/schema.ts';
import { listTracingProjects } from '../store/tracing-projects.ts';

const TracingProject = Type.Object(
  { id: Uuid(), name: Type.String(), tenant_id: Uuid(), created_at: DateTime() },
  { title: 'TracingProject' },
);

export const tracingProjectRoutes: FastifyPluginAsyncTypebox<{ db: Kysely<Database> }> = async (app, { db }) => {
  app.get(
    '/v2/tracing-projects',
    {
      schema: {
        operationId: 'listTracingProjects',
        tags: ['tracing'],
        summary: 'List tracing projects',
        querystring: Type.Object(PageQuery),
        response: {
          200: ListEnvelope(TracingProject, 'A page of tracing projects.'),
          ...errorResponses(401, 403, 422),
        },
      },
    },
    async (request) => {
      const { limit, offset } = pageOf(request.query);
      const rows = await listTracingProjects(db, workspaceOf(request), limit, offset);
      return envelope(
        rows.map((p) => ({
          id: p.id,
          name: p.name,
          tenant_id: p.workspace_id,
          created_at: p.created_at.toISOString(),
        })),
        offset,
      );
    },
  );
};
