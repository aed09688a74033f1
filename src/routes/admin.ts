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
