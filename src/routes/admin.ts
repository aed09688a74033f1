/** Workspaces and API keys (admin keys only). Every change is an audit event (subject workspace or api_key). */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import {
  DateTime,
  ListEnvelope,
  Nullable,
  PageQuery,
  ShownOnceString,
  StringEnum,
  Uuid,
  errorResponses,
  pageOf,
  envelope,
} from '../http/schema-helpers.ts';
import type { ApiKeyService } from '../service/api-keys.ts';
import type { WorkspaceService } from '../service/workspaces.ts';
import { needs } from '../http/route-needs.ts';

const Workspace = Type.Object(
  { id: Uuid(), organization_id: Uuid(), name: Type.String(), created_at: DateTime() },
  { title: 'Workspace' },
);
const QuotaFields = {
  memory_mb: Nullable(
    Type.Integer({ minimum: 0, maximum: 1024 * 1024 * 1024, description: 'Memory of all its instances, in MiB.' }),
  ),
  cpu: Nullable(Type.Number({ minimum: 0, maximum: 1_000_000, description: 'CPU cores of all its instances.' })),
  instances: Nullable(
    Type.Integer({ minimum: 0, maximum: 1_000_000, description: 'Instances of all its deployments.' }),
  ),
  deployments: Nullable(Type.Integer({ minimum: 0, maximum: 1_000_000, description: 'Deployments it may have.' })),
  database_storage_gi: Nullable(
    Type.Number({
      minimum: 0,
      maximum: 1_000_000,
      description: "Database storage of all its deployments, in GiB (each deployment's db_storage_gi).",
    }),
  ),
};
const WorkspaceQuota = Type.Object(QuotaFields, {
  title: 'WorkspaceQuota',
  description:
    "Totals the workspace's deployments on the service's own data plane may ask for (listeners' deployments run on " +
    "their own clusters and are not counted); null: no quota beyond the operator's maxima. Set by an organization admin.",
});
const WorkspaceUsage = Type.Object(
  {
    memory_mb: Type.Number(),
    cpu: Type.Number(),
    instances: Type.Integer(),
    deployments: Type.Integer(),
    database_storage_gi: Type.Number(),
    database_size_bytes: Type.Integer({
      description:
        "What the deployments' databases hold, in bytes, as the data plane last measured them (every " +
        'SLIPWAY_DATABASE_CHECK_SECONDS); 0 before any was measured.',
    }),
  },
  {
    title: 'WorkspaceUsage',
    description:
      "What the workspace's deployments on the own data plane ask for now, as the quota counts it: each deployment's " +
      'min_scale web instances (1 when the spec is silent; 0 for a paused deployment, whose one health-checked instance while a revision deploys is not counted) and queue_min_scale worker instances, times their memory and CPU limits ' +
      "(the service's defaults when the spec is silent), and each one's db_storage_gi (the operator's default when " +
      "silent, at most the operator's maximum). Deployments being deleted are not counted.",
  },
);
const WorkspaceDetail = Type.Object(
  { ...Workspace.properties, quota: WorkspaceQuota, usage: WorkspaceUsage },
  { title: 'WorkspaceDetail' },
);
const ApiKey = Type.Object(
  {
    id: Uuid(),
    organization_id: Uuid(),
    workspace_id: Nullable(Uuid({ description: 'null for an organization key.' })),
    name: Type.String(),
    role: StringEnum(['admin', 'member'] as const),
    key_prefix: Type.String({ description: 'The first characters of the key, to tell keys apart.' }),
    created_at: DateTime(),
    revoked_at: Nullable(DateTime()),
  },
  { title: 'ApiKey' },
);
const CreatedApiKey = Type.Object(
  { ...ApiKey.properties, key: ShownOnceString({ description: 'The key itself, shown only in this response.' }) },
  { title: 'ApiKeyCreated' },
);
const NAME = { minLength: 1, maxLength: 128, pattern: '^\\S(.*\\S)?$' };

const detailResponse = <W extends { created_at: Date }>(w: W) => ({ ...w, created_at: w.created_at.toISOString() });
const iso = (d: Date | null) => (d === null ? null : d.toISOString());
const keyResponse = <K extends { created_at: Date; revoked_at: Date | null }>(k: K) => ({
  ...k,
  created_at: k.created_at.toISOString(),
  revoked_at: iso(k.revoked_at),
});

export interface AdminRouteDeps {
  workspaces: WorkspaceService;
  apiKeys: ApiKeyService;
}

export const adminRoutes: FastifyPluginAsyncTypebox<AdminRouteDeps> = async (app, { workspaces, apiKeys }) => {
  // Workspaces span the organization: a key bound to one workspace may neither make nor list them.

  app.post(
    '/v2/workspaces',
    {
      config: needs({ auth: 'organization', admin: 'organization', idempotent: true, etag: true }),
      schema: {
        operationId: 'createWorkspace',
        tags: ['admin'],
        summary: "Create a workspace in the key's organization",
        body: Type.Object({ name: Type.String(NAME) }, { title: 'WorkspaceCreate' }),
        response: { 201: Workspace, ...errorResponses(401, 403, 409, 422) },
      },
    },
    async (request, reply) => {
      const row = await workspaces.create(request.caller, request.body.name);
      return reply.status(201).send({ ...row, created_at: row.created_at.toISOString() });
    },
  );

  app.get(
    '/v2/workspaces',
    {
      config: needs({ auth: 'organization', admin: 'organization' }),
      schema: {
        operationId: 'listWorkspaces',
        tags: ['admin'],
        summary: "List the organization's workspaces",
        querystring: Type.Object(PageQuery),
        response: { 200: ListEnvelope(Workspace, 'A page of workspaces.'), ...errorResponses(401, 403, 422) },
      },
    },
    async (request) => {
      const { limit, offset } = pageOf(request.query);
      const rows = await workspaces.list(request.caller, { limit, offset });
      return envelope(
        rows.map((w) => ({ ...w, created_at: w.created_at.toISOString() })),
        offset,
      );
    },
  );

  app.get(
    '/v2/workspaces/:workspace_id',
    {
      config: needs({ auth: 'organization', etag: true }),
      schema: {
        operationId: 'getWorkspace',
        tags: ['admin'],
        summary: 'A workspace with its quota and use',
        description:
          'An organization key sees any workspace of its organization, a workspace key (member or admin) only its own.',
        params: Type.Object({ workspace_id: Uuid() }),
        response: { 200: WorkspaceDetail, ...errorResponses(401, 403, 404, 422) },
      },
    },
    async (request) => detailResponse(await workspaces.get(request.caller, request.params.workspace_id)),
  );

  app.patch(
    '/v2/workspaces/:workspace_id/quota',
    {
      // Only an organization admin: a workspace's own keys, admins included, cannot raise their quota.
      config: needs({ auth: 'organization', admin: 'organization', idempotent: true, etag: true }),
      schema: {
        operationId: 'setWorkspaceQuota',
        tags: ['admin'],
        summary: "Set a workspace's quota",
        description:
          'Sets the fields given (null removes that quota); the others stay. A memory quota over what the operator ' +
          'gives all apps together is a 422. Existing deployments over a lowered quota keep running; their next ' +
          'change of resource_spec must fit.',
        params: Type.Object({ workspace_id: Uuid() }),
        body: Type.Partial(Type.Object(QuotaFields), { title: 'WorkspaceQuotaUpdate' }),
        response: { 200: WorkspaceDetail, ...errorResponses(401, 403, 404, 422) },
      },
    },
    async (request) =>
      detailResponse(await workspaces.setQuota(request.caller, request.params.workspace_id, request.body)),
  );

  app.post(
    '/v2/api-keys',
    {
      config: needs({ auth: 'organization', admin: true, idempotent: true, etag: true }),
      schema: {
        operationId: 'createApiKey',
        tags: ['admin'],
        summary: 'Create an API key',
        description:
          'workspace_id null makes an organization key (only an organization key may). The key is shown once.',
        body: Type.Object(
          {
            name: Type.String(NAME),
            role: Type.Optional(StringEnum(['admin', 'member'] as const)),
            workspace_id: Type.Optional(Nullable(Uuid())),
          },
          { title: 'ApiKeyCreate' },
        ),
        response: { 201: CreatedApiKey, ...errorResponses(400, 401, 403, 422) },
      },
    },
    async (request, reply) => {
      const { row, key } = await apiKeys.create(request.caller, request.body);
      // no-store: the key is shown once; nothing may keep this answer (an Idempotency-Key replay included).
      return reply
        .status(201)
        .header('cache-control', 'no-store')
        .send({ ...keyResponse(row), key });
    },
  );

  app.get(
    '/v2/api-keys',
    {
      config: needs({ auth: 'organization', admin: true }),
      schema: {
        operationId: 'listApiKeys',
        tags: ['admin'],
        summary: 'List API keys',
        description: 'Never the keys themselves.',
        querystring: Type.Object(PageQuery),
        response: { 200: ListEnvelope(ApiKey, 'A page of API keys.'), ...errorResponses(401, 403, 422) },
      },
    },
    async (request) => {
      const { limit, offset } = pageOf(request.query);
      const rows = await apiKeys.list(request.caller, { limit, offset });
      return envelope(rows.map(keyResponse), offset);
    },
  );

  app.delete(
    '/v2/api-keys/:api_key_id',
    {
      config: needs({ auth: 'organization', admin: true, ifMatch: 'only-star' }),
      schema: {
        operationId: 'revokeApiKey',
        tags: ['admin'],
        summary: 'Revoke an API key',
        params: Type.Object({ api_key_id: Uuid() }),
        response: { 204: Type.Null(), ...errorResponses(401, 403, 404, 422) },
      },
    },
    async (request, reply) => {
      await apiKeys.revoke(request.caller, request.params.api_key_id);
      return reply.status(204).send(null);
    },
  );
};
