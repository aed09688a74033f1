/**
 * What LangChain's `langgraph deploy` CLI calls besides the deployment endpoints (docs/langgraph.md):
 * its log endpoints, in its request and answer shape, over the same log store as
 * `GET .../revisions/{id}/logs`; and the image path (`internal_docker`, `push-token`), which needs a
 * registry and a container engine this service does not have, answered with the way that works.
 *
 * `adaptLangGraphRequest`, a preValidation hook the deployment create and patch routes declare, adapts
 * what the CLI sends to them before their validation: `langgraph_config_path` is read as
 * framework_config_path, and an image deployment is refused with a message that names `--remote`.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { preValidationAsyncHookHandler } from 'fastify';
import { Type } from 'typebox';
import { applyConfigPathAlias } from '../domain/sources.ts';
import { AppError } from '../errors.ts';
import { workspaceOf } from '../http/authenticate.ts';
import { Nullable, StringEnum, Uuid, errorResponses } from '../http/schema-helpers.ts';
import type { DeploymentService } from '../service/deployments.ts';
import { LOG_LEVELS } from '../service/log-search.ts';
import type { LogSearchPage, RevisionLogService } from '../service/revision-logs.ts';
import { needs } from '../http/route-needs.ts';

/** The image sources of LangChain's CLI (`langgraph deploy` without `--remote`, or with `--push-to`). */
const IMAGE_SOURCES = ['internal_docker', 'external_docker'];
export const USE_REMOTE_BUILD =
  'This service builds deployments from source and runs no container registry, so an image cannot be pushed to it. ' +
  'Deploy with `langgraph deploy --remote`: the CLI uploads the project and the service builds and runs it.';

/**
 * The deployment create and patch routes' preValidation (src/routes/deployments.ts): the CLI's field
 * name and its image path.
 */
export const adaptLangGraphRequest: preValidationAsyncHookHandler = async (request) => {
  const body = request.body;
  if (body === null || typeof body !== 'object' || Array.isArray(body)) return;
  const fields = body as Record<string, unknown>;
  const source = request.method === 'POST' ? fields.source : fields.revision_source;
  if (typeof source === 'string' && IMAGE_SOURCES.includes(source))
    throw new AppError('invalid_request', USE_REMOTE_BUILD);
  if ('source_revision_config' in fields)
    fields.source_revision_config = applyConfigPathAlias(fields.source_revision_config);
};

// ----- schemas -----------------------------------------------------------------------------------

const LogRequest = Type.Object(
  {
    order: Type.Optional(
      StringEnum(['asc', 'desc'] as const, { default: 'desc', description: 'asc: oldest first; desc: newest first.' }),
    ),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000, default: 100 })),
    offset: Type.Optional(
      Nullable(
        Type.String({
          maxLength: 200,
          description: 'next_offset of the previous answer: the page goes on from there in the same order.',
        }),
      ),
    ),
    level: Type.Optional(
      Nullable(Type.String({ maxLength: 16, description: `Only lines of this level: ${LOG_LEVELS.join(', ')}.` })),
    ),
    query: Type.Optional(
      Nullable(Type.String({ maxLength: 1000, description: 'Only lines containing this text (case-insensitive).' })),
    ),
    start_time: Type.Optional(
      Nullable(Type.String({ maxLength: 64, description: 'Only lines written at or after this ISO 8601 time.' })),
    ),
    end_time: Type.Optional(
      Nullable(Type.String({ maxLength: 64, description: 'Only lines written at or before this ISO 8601 time.' })),
    ),
  },
  { title: 'LogSearch' },
);

const LogEntry = Type.Object(
  {
    id: Type.String({ description: "The line's id, unique within the deployment." }),
    timestamp: Type.Integer({ description: 'When the line was written, in milliseconds since the epoch.' }),
    level: StringEnum(LOG_LEVELS, {
      description: 'The level word the line starts with, else ERROR for stderr and INFO for stdout.',
    }),
    message: Type.String(),
  },
  { title: 'LogEntry' },
);
const LogAnswer = Type.Object(
  {
    logs: Type.Array(LogEntry),
    next_offset: Nullable(
      Type.String({
        description: 'Pass as offset for the next page; the given offset (or null) when this page is empty.',
      }),
    ),
  },
  { title: 'LogSearchResult', description: 'A page of log entries in the order asked for.' },
);

const RevisionParams = Type.Object({ deployment_id: Uuid(), revision_id: Uuid() });
const DeploymentParams = Type.Object({ deployment_id: Uuid() });

const logAnswer = (page: LogSearchPage) => ({
  logs: page.lines.map((row) => ({
    id: row.id,
    timestamp: row.logged_at.getTime(),
    level: row.level,
    message: row.line,
  })),
  next_offset: page.next_offset,
});

export interface LangGraphCompatDeps {
  logs: RevisionLogService;
  deployments: DeploymentService;
}

export const langGraphCompatRoutes: FastifyPluginAsyncTypebox<LangGraphCompatDeps> = async (
  app,
  { logs, deployments },
) => {
  for (const type of ['build', 'deploy'] as const) {
    app.post(
      `/v1/projects/:deployment_id/revisions/:revision_id/${type}_logs`,
      {
        config: needs({ auth: 'workspace', idempotent: true }),
        schema: {
          operationId: type === 'build' ? 'searchRevisionBuildLogs' : 'searchRevisionDeployLogs',
          tags: ['langgraph'],
          summary: `${type === 'build' ? 'Build' : 'Deploy'} logs of a revision, as langgraph deploy reads them`,
          description:
            `The revision's ${type} log (the same lines as GET .../logs?type=${type}), paged ` +
            `with order, limit and offset, filtered by level, query and time.`,
          params: RevisionParams,
          body: LogRequest,
          response: { 200: LogAnswer, ...errorResponses(401, 403, 404, 422) },
        },
      },
      async (request) => {
        const { deployment_id: deploymentId, revision_id: revisionId } = request.params;
        const page = await logs.searchRevision(
          workspaceOf(request),
          deploymentId,
          revisionId,
          type,
          request.body ?? {},
        );
        return logAnswer(page);
      },
    );
  }

  app.post(
    '/v1/projects/:deployment_id/deploy_logs',
    {
      config: needs({ auth: 'workspace', idempotent: true }),
      schema: {
        operationId: 'searchDeploymentLogs',
        tags: ['langgraph'],
        summary: 'Deploy logs of a deployment, as langgraph deploy logs reads them',
        description:
          "The app output of the deployment's active revision (its latest one while none is active), in the shape of the revision deploy_logs.",
        params: DeploymentParams,
        body: LogRequest,
        response: { 200: LogAnswer, ...errorResponses(401, 403, 404, 422) },
      },
    },
    async (request) => {
      const page = await logs.searchDeployment(workspaceOf(request), request.params.deployment_id, request.body ?? {});
      return logAnswer(page);
    },
  );

  app.post(
    '/v2/deployments/:deployment_id/push-token',
    {
      config: needs({ auth: 'workspace', idempotent: true }),
      schema: {
        operationId: 'createPushToken',
        tags: ['langgraph'],
        summary: 'Image push token: not available, use langgraph deploy --remote',
        description: `Always 400: ${USE_REMOTE_BUILD}`,
        params: DeploymentParams,
        response: {
          // Documented because the route is served; never answered (see 400).
          200: Type.Object(
            { token: Type.String(), registry_url: Type.String() },
            {
              description:
                "LangSmith's answer (a registry token), which this service never gives: it runs no registry.",
            },
          ),
          ...errorResponses(400, 401, 403, 404, 422),
        },
      },
    },
    async (request) => {
      await deployments.get(workspaceOf(request), request.params.deployment_id);
      throw new AppError('invalid_request', USE_REMOTE_BUILD);
    },
  );
};
