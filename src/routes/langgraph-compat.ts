/**
 * What LangChain's `langgraph deploy` CLI calls besides the deployment endpoints (docs/langgraph.md):
 * its log endpoints, in its request and answer shape, over the same log store as
 * `GET .../revisions/{id}/logs`; and the image path (`internal_docker`, `push-token`), which needs a
 * registry and a container engine this service does not have, answered with the way that works.
 *
 * `registerLangGraphRequestShapes` adapts what the CLI sends to the deployment routes before their
 * validation: `langgraph_config_path` is read as framework_config_path, and an image deployment is
 * refused with a message that names `--remote`.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyInstance, preValidationAsyncHookHandler } from 'fastify';
import type { Kysely } from 'kysely';
import { Type, type Static } from 'typebox';
import { applyConfigPathAlias } from '../domain/sources.ts';
import { AppError, ValidationError, notFound, type ValidationIssue } from '../errors.ts';
import { workspaceOf } from '../http/authenticate.ts';
import { Nullable, StringEnum, Uuid, errorResponses } from '../http/schema-helpers.ts';
import { getDeployment } from '../store/deployments.ts';
import {
  LOG_LEVELS,
  currentLogRevision,
  getLogSubject,
  searchRevisionLogs,
  type LogLevel,
} from '../store/revision-logs.ts';
import type { Database, RevisionLogType } from '../store/schema.ts';

/** The image sources of LangChain's CLI (`langgraph deploy` without `--remote`, or with `--push-to`). */
const IMAGE_SOURCES = ['internal_docker', 'external_docker'];
export const USE_REMOTE_BUILD =
  'This service builds deployments from source and runs no container registry, so an image cannot be pushed to it. ' +
  'Deploy with `langgraph deploy --remote`: the CLI uploads the project and the service builds and runs it.';

/**
 * Hooks on the deployment routes (registered before them): the CLI's field name and its image path.
 * Attached per route through onRoute, so no other route pays for them.
 */
export function registerLangGraphRequestShapes(app: FastifyInstance): void {
  const adapt: preValidationAsyncHookHandler = async (request) => {
    const body = request.body;
    if (body === null || typeof body !== 'object' || Array.isArray(body)) return;
    const fields = body as Record<string, unknown>;
    const source = request.method === 'POST' ? fields.source : fields.revision_source;
    if (typeof source === 'string' && IMAGE_SOURCES.includes(source))
      throw new AppError('invalid_request', USE_REMOTE_BUILD);
    if ('source_revision_config' in fields)
      fields.source_revision_config = applyConfigPathAlias(fields.source_revision_config);
  };
  app.addHook('onRoute', (route) => {
    const methods = Array.isArray(route.method) ? route.method : [route.method];
    const create = route.url === '/v2/deployments' && methods.includes('POST');
    const patch = route.url === '/v2/deployments/:deployment_id' && methods.includes('PATCH');
    if (!create && !patch) return;
    const existing =
      route.preValidation === undefined
        ? []
        : Array.isArray(route.preValidation)
          ? route.preValidation
          : [route.preValidation];
    route.preValidation = [adapt, ...existing];
  });
}

// ----- offsets -----------------------------------------------------------------------------------

// An offset is the id of the last line of the previous page, wrapped so that clients treat it as opaque.
const OFFSET_PREFIX = 'lg:';
const OFFSET_ID = /^(0|[1-9][0-9]{0,18})$/;
const MAX_ID = 9223372036854775807n;

const encodeOffset = (id: string): string => Buffer.from(`${OFFSET_PREFIX}${id}`).toString('base64url');

function decodeOffset(offset: string): string {
  if (/^[A-Za-z0-9_-]{1,200}$/.test(offset)) {
    const text = Buffer.from(offset, 'base64url').toString('utf8');
    const id = text.startsWith(OFFSET_PREFIX) ? text.slice(OFFSET_PREFIX.length) : '';
    if (OFFSET_ID.test(id) && BigInt(id) <= MAX_ID && encodeOffset(id) === offset) return id;
  }
  throw new ValidationError([
    {
      type: 'value_error',
      loc: ['body', 'offset'],
      msg: 'Value error, not an offset returned by this endpoint: pass next_offset unchanged',
      input: offset,
    },
  ]);
}

// ISO 8601 as the CLI's --start-time / --end-time take it; without a zone it is UTC.
const ISO_TIME = /^\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)?(Z|[+-]\d{2}:?\d{2})?$/i;

function parseTime(value: string, field: string): Date {
  const match = ISO_TIME.exec(value.trim());
  const at = match ? Date.parse(match[1] || !value.includes(':') ? value.trim() : `${value.trim()}Z`) : Number.NaN;
  if (Number.isNaN(at)) {
    throw new ValidationError([
      {
        type: 'datetime_parsing',
        loc: ['body', field],
        msg: 'Input should be an ISO 8601 date-time, e.g. 2026-03-08T00:00:00Z',
        input: value,
      },
    ]);
  }
  return new Date(at);
}

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
type LogRequest = Static<typeof LogRequest>;

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

export const langGraphCompatRoutes: FastifyPluginAsyncTypebox<{ db: Kysely<Database> }> = async (app, { db }) => {
  async function page(revisionId: string | null, type: RevisionLogType, body: LogRequest) {
    const level = body.level ? body.level.toUpperCase() : null;
    if (level !== null && !(LOG_LEVELS as readonly string[]).includes(level)) {
      const issue: ValidationIssue = {
        type: 'enum',
        loc: ['body', 'level'],
        msg: `Input should be ${LOG_LEVELS.map((l) => `'${l}'`).join(', ')}`,
        input: body.level,
      };
      throw new ValidationError([issue]);
    }
    const fromId = body.offset ? decodeOffset(body.offset) : null;
    const since = body.start_time ? parseTime(body.start_time, 'start_time') : undefined;
    const until = body.end_time ? parseTime(body.end_time, 'end_time') : undefined;
    if (revisionId === null) return { logs: [], next_offset: body.offset ?? null };
    const rows = await searchRevisionLogs(db, revisionId, type, {
      order: body.order ?? 'desc',
      fromId,
      limit: body.limit ?? 100,
      level: (level ?? undefined) as LogLevel | undefined,
      contains: body.query || undefined,
      since,
      until,
    });
    const last = rows.at(-1);
    return {
      logs: rows.map((row) => ({
        id: row.id,
        timestamp: row.logged_at.getTime(),
        level: row.level,
        message: row.line,
      })),
      next_offset: last ? encodeOffset(last.id) : (body.offset ?? null),
    };
  }

  /** The revision, in the caller's workspace and the deployment; else the 404 a user can act on. */
  async function revisionOf(workspaceId: string, deploymentId: string, revisionId: string): Promise<string> {
    if (await getLogSubject(db, workspaceId, deploymentId, revisionId)) return revisionId;
    if (!(await getDeployment(db, workspaceId, deploymentId))) throw notFound('Deployment', deploymentId);
    throw notFound('Revision', revisionId);
  }

  for (const type of ['build', 'deploy'] as const) {
    app.post(
      `/v1/projects/:deployment_id/revisions/:revision_id/${type}_logs`,
      {
        schema: {
          operationId: type === 'build' ? 'searchRevisionBuildLogs' : 'searchRevisionDeployLogs',
          tags: ['langgraph'],
          summary: `${type === 'build' ? 'Build' : 'Deploy'} logs of a revision, as langgraph deploy reads them`,
          description: `The revision's ${type} log (the same lines as GET .../logs?type=${type}), paged with order, limit and offset, filtered by level, query and time.`,
          params: RevisionParams,
          body: LogRequest,
          response: { 200: LogAnswer, ...errorResponses(401, 403, 404, 422) },
        },
      },
      async (request) => {
        const { deployment_id: deploymentId, revision_id: revisionId } = request.params;
        return page(await revisionOf(workspaceOf(request), deploymentId, revisionId), type, request.body ?? {});
      },
    );
  }

  app.post(
    '/v1/projects/:deployment_id/deploy_logs',
    {
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
      const { deployment_id: deploymentId } = request.params;
      const current = await currentLogRevision(db, workspaceOf(request), deploymentId);
      if (!current) throw notFound('Deployment', deploymentId);
      return page(current.revisionId, 'deploy', request.body ?? {});
    },
  );

  app.post(
    '/v2/deployments/:deployment_id/push-token',
    {
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
      const { deployment_id: deploymentId } = request.params;
      if (!(await getDeployment(db, workspaceOf(request), deploymentId))) throw notFound('Deployment', deploymentId);
      throw new AppError('invalid_request', USE_REMOTE_BUILD);
    },
  );
};
