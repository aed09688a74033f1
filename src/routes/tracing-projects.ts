/** Tracing projects, made with deployments of the same name. */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import { workspaceOf } from '../http/authenticate.ts';
import { DateTime, ListEnvelope, PageQuery, Uuid, errorResponses, pageOf, envelope } from '../http/schema-helpers.ts';
import type { TracingProjectService } from '../service/tracing-projects.ts';
import { needs } from '../http/route-needs.ts';

const TracingProject = Type.Object(
  { id: Uuid(), name: Type.String(), tenant_id: Uuid(), created_at: DateTime() },
  { title: 'TracingProject' },
);

export const tracingProjectRoutes: FastifyPluginAsyncTypebox<{ tracingProjects: TracingProjectService }> = async (
  app,
  { tracingProjects },
) => {
  app.get(
    '/v2/tracing-projects',
    {
      config: needs({ auth: 'workspace' }),
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
      const rows = await tracingProjects.list(workspaceOf(request), { limit, offset });
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
