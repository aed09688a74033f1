/** The audit trail of a deployment: every transition and change of it and of its revisions. */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import { workspaceOf } from '../http/authenticate.ts';
import {
  DateTime,
  ListEnvelope,
  Nullable,
  PageQuery,
  StringEnum,
  Uuid,
  errorResponses,
  pageOf,
  envelope,
} from '../http/schema-helpers.ts';
import type { DeploymentService } from '../service/deployments.ts';
import { needs } from '../http/route-needs.ts';

const Event = Type.Object(
  {
    id: Type.String({ description: 'Increasing; events of one deployment come in this order.' }),
    subject_type: Type.String(),
    subject_id: Uuid(),
    type: Type.String({ description: 'e.g. deployment.created, revision.status_changed' }),
    from_status: Nullable(Type.String()),
    to_status: Nullable(Type.String()),
    data: Type.Object({}, { additionalProperties: true }),
    created_at: DateTime(),
  },
  { title: 'DeploymentEvent' },
);

export const eventRoutes: FastifyPluginAsyncTypebox<{ deployments: DeploymentService }> = async (
  app,
  { deployments },
) => {
  app.get(
    '/v2/deployments/:deployment_id/events',
    {
      config: needs({ auth: 'workspace' }),
      schema: {
        operationId: 'listDeploymentEvents',
        tags: ['deployments'],
        summary: 'List the events of a deployment',
        description:
          'Oldest first (or newest first with order=desc): creation, every revision and deployment status ' +
          'transition, updates, scaling.',
        params: Type.Object({ deployment_id: Uuid() }),
        querystring: Type.Object({
          ...PageQuery,
          limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 100 })),
          order: Type.Optional(
            StringEnum(['asc', 'desc'], {
              default: 'asc',
              description: 'asc: oldest first (to follow along); desc: newest first (what happened lately).',
            }),
          ),
        }),
        response: {
          200: ListEnvelope(Event, 'A page of events, oldest first unless order=desc.'),
          ...errorResponses(401, 403, 404, 422),
        },
      },
    },
    async (request) => {
      const { limit, offset } = pageOf(request.query, 100);
      const rows = await deployments.listEvents(
        workspaceOf(request),
        request.params.deployment_id,
        { limit, offset },
        request.query.order,
      );
      return envelope(
        rows.map((e) => ({ ...e, id: String(e.id), created_at: e.created_at.toISOString() })),
        offset,
      );
    },
  );
};
