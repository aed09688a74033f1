/** Deployments and their revisions. */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyRequest } from 'fastify';
import { Type } from 'typebox';
import { DEPLOYMENT_TYPES } from '../domain/sources.ts';
import { DEPLOYMENT_STATUSES, REVISION_STATUSES } from '../domain/states.ts';
import { workspaceOf } from '../http/authenticate.ts';
import {
  DOCUMENTED_AS,
  ListEnvelope,
  PageQuery,
  StringEnum,
  Uuid,
  errorResponses,
  pageOf,
  envelope,
} from '../http/schema-helpers.ts';
import type { DeploymentService } from '../service/deployments.ts';
import type { Db } from '../store/schema.ts';
import { Deployment, DeploymentCreateBody, DeploymentPatchBody, Revision } from './deployment-schemas.ts';
import { createBodyBySource, patchRulesBySource } from './deployment-create-variants.ts';
import { deploymentResponse, revisionResponse } from './deployment-views.ts';
import { adaptLangGraphRequest } from './langgraph-compat.ts';
import { needs } from '../http/route-needs.ts';

const UUID_PATTERN = '[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}';
const UuidList = (description: string) =>
  Type.String({ pattern: `^${UUID_PATTERN}(,${UUID_PATTERN})*$`, maxLength: 100 * 37, description });
const splitList = (value: string | undefined): string[] | undefined =>
  value === undefined ? undefined : [...new Set(value.split(',').map((v) => v.toLowerCase()))];

const DeploymentParams = Type.Object({ deployment_id: Uuid() });
const RevisionParams = Type.Object({ deployment_id: Uuid(), revision_id: Uuid() });

const example = {
  name: 'support-agent',
  source: 'internal_container',
  source_config: { deployment_type: 'dev' },
  source_revision_config: { image_uri: 'registry.example.com/support-agent:1.4.2' },
  secrets: [{ name: 'OPENAI_API_KEY', value: 'sk-...' }],
};

export interface DeploymentRouteDeps {
  deployments: DeploymentService;
}

export const deploymentRoutes: FastifyPluginAsyncTypebox<DeploymentRouteDeps> = async (app, { deployments }) => {
  /** If-Match is checked against this: the deployment as its GET shows it, read in the write's transaction. */
  const current = async (request: FastifyRequest, tx: Db) =>
    deploymentResponse(
      await deployments.get(workspaceOf(request), (request.params as { deployment_id: string }).deployment_id, tx),
    );

  app.post(
    '/v2/deployments',
    {
      config: needs({ auth: 'workspace', idempotent: true, etag: true }),
      // What LangChain's `langgraph deploy` sends, read as this route reads it (src/routes/langgraph-compat.ts).
      preValidation: adaptLangGraphRequest,
      schema: {
        operationId: 'createDeployment',
        tags: ['deployments'],
        summary: 'Create a deployment',
        description:
          'Creates the deployment, its tracing project of the same name and, when the source revision config is usable, revision 1. ' +
          'A codehost deployment asks the code host for its repository first: 502 when the host fails (docs/codehost.md).',
        body: {
          ...DeploymentCreateBody,
          examples: [example],
          [DOCUMENTED_AS]: createBodyBySource(DeploymentCreateBody),
        },
        response: { 201: Deployment, ...errorResponses(400, 401, 403, 409, 422, 502) },
      },
    },
    async (request, reply) => {
      const view = await deployments.create(workspaceOf(request), request.body);
      return reply.status(201).send(deploymentResponse(view));
    },
  );

  app.get(
    '/v2/deployments',
    {
      config: needs({ auth: 'workspace' }),
      schema: {
        operationId: 'listDeployments',
        tags: ['deployments'],
        summary: 'List deployments',
        description:
          'Newest first. Filters combine with AND; tag_value_ids matches deployments carrying every listed value.',
        querystring: Type.Object({
          ...PageQuery,
          name: Type.Optional(Type.String({ maxLength: 63, description: 'Exact name.' })),
          // Empty is no filter: `langgraph deploy list` sends `name_contains=` when given no text.
          name_contains: Type.Optional(
            Type.String({
              maxLength: 63,
              description: 'Case-insensitive substring of the name; empty matches every name.',
            }),
          ),
          status: Type.Optional(StringEnum(DEPLOYMENT_STATUSES)),
          remote_reconciled: Type.Optional(
            Type.Boolean({
              description: 'Only deployments reconciled by a listener (true) or by the service (false).',
            }),
          ),
          tag_value_ids: Type.Optional(UuidList('Comma-separated tag value ids.')),
          image_version: Type.Optional(Type.String({ maxLength: 255 })),
          deployment_type: Type.Optional(StringEnum(DEPLOYMENT_TYPES)),
          deployment_ids: Type.Optional(UuidList('Comma-separated deployment ids.')),
        }),
        response: { 200: ListEnvelope(Deployment, 'A page of deployments.'), ...errorResponses(401, 403, 422) },
      },
    },
    async (request) => {
      const q = request.query;
      const { limit, offset } = pageOf(q);
      const rows = await deployments.list(
        workspaceOf(request),
        {
          name: q.name,
          nameContains: q.name_contains || undefined,
          status: q.status,
          remoteReconciled: q.remote_reconciled,
          tagValueIds: splitList(q.tag_value_ids),
          imageVersion: q.image_version,
          deploymentType: q.deployment_type,
          deploymentIds: splitList(q.deployment_ids),
        },
        { limit, offset },
      );
      return envelope(rows.map(deploymentResponse), offset);
    },
  );

  app.get(
    '/v2/deployments/:deployment_id',
    {
      config: needs({ auth: 'workspace', etag: true }),
      schema: {
        operationId: 'getDeployment',
        tags: ['deployments'],
        summary: 'Get a deployment',
        params: DeploymentParams,
        response: { 200: Deployment, ...errorResponses(401, 403, 404, 422) },
      },
    },
    async (request) => deploymentResponse(await deployments.get(workspaceOf(request), request.params.deployment_id)),
  );

  app.patch(
    '/v2/deployments/:deployment_id',
    {
      config: needs({ auth: 'workspace', idempotent: true, etag: true, ifMatch: current }),
      preValidation: adaptLangGraphRequest,
      schema: {
        operationId: 'patchDeployment',
        tags: ['deployments'],
        summary: 'Patch a deployment',
        description:
          'A source_revision_config (even unchanged) or changed secrets make a new revision; a source_config alone does not.\n\n' +
          patchRulesBySource(),
        params: DeploymentParams,
        body: {
          ...DeploymentPatchBody,
          examples: [{ source_revision_config: { image_uri: 'registry.example.com/support-agent:1.5.0' } }],
        },
        response: { 200: Deployment, ...errorResponses(400, 401, 403, 404, 422) },
      },
    },
    async (request) =>
      deploymentResponse(
        await deployments.patch(workspaceOf(request), request.params.deployment_id, request.body, {
          precondition: request.precondition,
        }),
      ),
  );

  app.delete(
    '/v2/deployments/:deployment_id',
    {
      config: needs({ auth: 'workspace', ifMatch: current }),
      schema: {
        operationId: 'deleteDeployment',
        tags: ['deployments'],
        summary: 'Delete a deployment',
        description:
          'Interrupts unfinished revisions and tears the deployment down. Its tracing project stays unless delete_tracing_project=true.',
        params: DeploymentParams,
        querystring: Type.Object({ delete_tracing_project: Type.Optional(Type.Boolean({ default: false })) }),
        response: { 204: Type.Null(), ...errorResponses(401, 403, 404, 422) },
      },
    },
    async (request, reply) => {
      await deployments.remove(workspaceOf(request), request.params.deployment_id, {
        deleteTracingProject: request.query.delete_tracing_project ?? false,
        precondition: request.precondition,
      });
      return reply.status(204).send(null);
    },
  );

  registerRevisionRoutes(app, deployments);
};

type RouteApp = Parameters<FastifyPluginAsyncTypebox>[0];

/** A deployment's revisions: listed, read, redeployed and interrupted. */
function registerRevisionRoutes(app: RouteApp, deployments: DeploymentService): void {
  const statusList = `^(${REVISION_STATUSES.join('|')})(,(${REVISION_STATUSES.join('|')}))*$`;
  app.get(
    '/v2/deployments/:deployment_id/revisions',
    {
      config: needs({ auth: 'workspace' }),
      schema: {
        operationId: 'listRevisions',
        tags: ['revisions'],
        summary: 'List revisions of a deployment',
        params: DeploymentParams,
        querystring: Type.Object({
          ...PageQuery,
          status: Type.Optional(
            Type.String({
              pattern: statusList,
              maxLength: 400,
              description: `Comma-separated revision statuses: ${REVISION_STATUSES.join(', ')}.`,
            }),
          ),
          remote_reconciled: Type.Optional(Type.Boolean()),
        }),
        response: {
          200: ListEnvelope(Revision, 'A page of revisions, newest first.'),
          ...errorResponses(401, 403, 404, 422),
        },
      },
    },
    async (request) => {
      const workspaceId = workspaceOf(request);
      const { deployment_id: deploymentId } = request.params;
      const { limit, offset } = pageOf(request.query);
      const asked = splitList(request.query.status)?.map((s) => s.toUpperCase());
      const statuses = asked && REVISION_STATUSES.filter((s) => asked.includes(s));
      const rows = await deployments.listRevisions(
        workspaceId,
        deploymentId,
        { statuses, remoteReconciled: request.query.remote_reconciled },
        { limit, offset },
      );
      return envelope(rows.map(revisionResponse), offset);
    },
  );

  app.get(
    '/v2/deployments/:deployment_id/revisions/:revision_id',
    {
      config: needs({ auth: 'workspace', etag: true }),
      schema: {
        operationId: 'getRevision',
        tags: ['revisions'],
        summary: 'Get a revision',
        params: RevisionParams,
        response: { 200: Revision, ...errorResponses(401, 403, 404, 422) },
      },
    },
    async (request) =>
      revisionResponse(
        await deployments.getRevision(workspaceOf(request), request.params.deployment_id, request.params.revision_id),
      ),
  );

  app.post(
    '/v2/deployments/:deployment_id/revisions/:revision_id/redeploy',
    {
      config: needs({ auth: 'workspace', idempotent: true, etag: true }),
      schema: {
        operationId: 'redeployRevision',
        tags: ['revisions'],
        summary: 'Redeploy a revision',
        description:
          'Makes a new revision with exactly what the given revision ran: source revision config, secrets and resource spec. ' +
          "A pull request's preview revision is not redeployed (400 `preview_revision_reserved`).",
        params: RevisionParams,
        response: { 201: Deployment, ...errorResponses(400, 401, 403, 404, 422) },
      },
    },
    async (request, reply) => {
      const view = await deployments.redeploy(
        workspaceOf(request),
        request.params.deployment_id,
        request.params.revision_id,
      );
      return reply.status(201).send(deploymentResponse(view));
    },
  );

  app.post(
    '/v2/deployments/:deployment_id/revisions/:revision_id/interrupt',
    {
      config: needs({ auth: 'workspace', idempotent: true, etag: true }),
      schema: {
        operationId: 'interruptRevision',
        tags: ['revisions'],
        summary: 'Interrupt a revision',
        description: 'Cancels a revision that has not reached a final state; it ends INTERRUPTED.',
        params: RevisionParams,
        response: { 200: Revision, ...errorResponses(401, 403, 404, 409, 422) },
      },
    },
    async (request) =>
      revisionResponse(
        await deployments.interrupt(workspaceOf(request), request.params.deployment_id, request.params.revision_id),
      ),
  );
}
