/** Workspaces and API keys (admin keys only). Every change is an audit event (subject workspace or api_key). */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { Kysely } from 'kysely';
import { Type } from 'typebox';
import { displayPrefix, generateApiKey, hashApiKey } from '../auth/api-keys.ts';
import { AppError, notFound } from '../errors.ts';
import { DateTime, ListEnvelope, Nullable, PageQuery, StringEnum, Uuid, errorResponses, pageOf, envelope } from '../http/schema-helpers.ts';
import { recordEvents } from '../store/events.ts';
import type { Database, Db } from '../store/schema.ts';
import { createApiKey, createWorkspace, firstWorkspaceIds, listApiKeys, listWorkspaces, revokeApiKey, workspaceInOrganization } from '../store/tenancy.ts';

const Workspace = Type.Object({ id: Uuid(), organization_id: Uuid(), name: Type.String(), created_at: DateTime() });
const ApiKey = Type.Object({
  id: Uuid(),
  organization_id: Uuid(),
  workspace_id: Nullable(Uuid({ description: 'null for an organization key.' })),
  name: Type.String(),
  role: StringEnum(['admin', 'member'] as const),
  key_prefix: Type.String({ description: 'The first characters of the key, to tell keys apart.' }),
  created_at: DateTime(),
  revoked_at: Nullable(DateTime()),
});
const CreatedApiKey = Type.Object({ ...ApiKey.properties, key: Type.String({ description: 'The key itself, shown only in this response.' }) });
const NAME = { minLength: 1, maxLength: 128, pattern: '^\\S(.*\\S)?$' };

const iso = (d: Date | null) => (d === null ? null : d.toISOString());
const keyResponse = <K extends { created_at: Date; revoked_at: Date | null }>(k: K) => ({ ...k, created_at: k.created_at.toISOString(), revoked_at: iso(k.revoked_at) });

/**
 * Where an API key's audit event goes (events belong to a workspace): the key's own workspace; for an
 * organization-wide key, the workspace the request acts in (X-Tenant-Id), else the organization's first.
 */
async function auditWorkspace(db: Db, keyWorkspaceId: string | null, caller: { workspaceId: string | null; organizationId: string }): Promise<string> {
  const id = keyWorkspaceId ?? caller.workspaceId ?? (await firstWorkspaceIds(db, caller.organizationId))[0];
  // An organization always has a workspace (the first start makes one, and none is ever deleted).
  if (id === undefined) throw new Error(`Organization ${caller.organizationId} has no workspace to record an event in`);
  return id;
}

/** The fields of a key its audit event names (revokeApiKey, in src/store/tenancy.ts, returns none). */
async function keyForAudit(db: Db, id: string): Promise<{ name: string; role: string; workspace_id: string | null }> {
  return db.selectFrom('api_keys').select(['name', 'role', 'workspace_id']).where('id', '=', id).executeTakeFirstOrThrow();
}

/** What an API key event records: never the key, its hash or its prefix. */
const keyEventData = (key: { name: string; role: string; workspace_id: string | null }, byKey: string) => ({ name: key.name, role: key.role, workspace_id: key.workspace_id, by_key: byKey });

/** Workspaces span the organization: a key bound to one workspace may neither make nor see them. */
function requireOrganizationKey(caller: { keyWorkspaceId: string | null }): void {
  if (caller.keyWorkspaceId !== null) throw new AppError('forbidden', 'Workspaces are managed with an organization API key; this key belongs to one workspace.');
}

export const adminRoutes: FastifyPluginAsyncTypebox<{ db: Kysely<Database> }> = async (app, { db }) => {
  const admin = { auth: 'organization' as const, admin: true };

  app.post(
    '/v2/workspaces',
    { config: admin, schema: { tags: ['admin'], summary: 'Create a workspace in the key\'s organization', body: Type.Object({ name: Type.String(NAME) }), response: { 201: Workspace, ...errorResponses(401, 403, 409, 422) } } },
    async (request, reply) => {
      requireOrganizationKey(request.caller);
      const { organizationId } = request.caller;
      const row = await db.transaction().execute(async (tx) => {
        const created = await createWorkspace(tx, organizationId, request.body.name).catch((error: { code?: string }) => {
          if (error.code === '23505') throw new AppError('conflict', `A workspace named '${request.body.name}' already exists.`);
          throw error;
        });
        await recordEvents(tx, [{ workspaceId: created.id, subjectType: 'workspace', subjectId: created.id, type: 'workspace.created', data: { name: created.name, by_key: request.caller.keyId } }]);
        return created;
      });
      return reply.status(201).send({ ...row, created_at: row.created_at.toISOString() });
    },
  );

  app.get(
    '/v2/workspaces',
    { config: admin, schema: { tags: ['admin'], summary: 'List the organization\'s workspaces', querystring: Type.Object(PageQuery), response: { 200: ListEnvelope(Workspace, 'A page of workspaces.'), ...errorResponses(401, 403, 422) } } },
    async (request) => {
      requireOrganizationKey(request.caller);
      const { limit, offset } = pageOf(request.query);
      const rows = await listWorkspaces(db, request.caller.organizationId, limit, offset);
      return envelope(rows.map((w) => ({ ...w, created_at: w.created_at.toISOString() })), offset);
    },
  );

  app.post(
    '/v2/api-keys',
    {
      config: admin,
      schema: {
        tags: ['admin'],
        summary: 'Create an API key',
        description: 'workspace_id null makes an organization key (only an organization key may). The key is shown once.',
        body: Type.Object({ name: Type.String(NAME), role: Type.Optional(StringEnum(['admin', 'member'] as const)), workspace_id: Type.Optional(Nullable(Uuid())) }),
        response: { 201: CreatedApiKey, ...errorResponses(400, 401, 403, 422) },
      },
    },
    async (request, reply) => {
      const caller = request.caller;
      const workspaceId = request.body.workspace_id === undefined ? caller.workspaceId : request.body.workspace_id;
      if (caller.keyWorkspaceId !== null && workspaceId !== caller.keyWorkspaceId) {
        throw new AppError('forbidden', 'A workspace key can only create keys for its own workspace.');
      }
      if (workspaceId !== null && !(await workspaceInOrganization(db, workspaceId, caller.organizationId))) {
        throw new AppError('invalid_reference', `workspace_id: Workspace ID ${workspaceId} not found.`);
      }
      const key = generateApiKey();
      const row = await db.transaction().execute(async (tx) => {
        const created = await createApiKey(tx, { organizationId: caller.organizationId, workspaceId, name: request.body.name, role: request.body.role ?? 'member', hash: hashApiKey(key), prefix: displayPrefix(key) });
        await recordEvents(tx, [{ workspaceId: await auditWorkspace(tx, created.workspace_id, caller), subjectType: 'api_key', subjectId: created.id, type: 'api_key.created', data: keyEventData(created, caller.keyId) }]);
        return created;
      });
      return reply.status(201).send({ ...keyResponse(row), key });
    },
  );

  app.get(
    '/v2/api-keys',
    { config: admin, schema: { tags: ['admin'], summary: 'List API keys', description: 'Never the keys themselves.', querystring: Type.Object(PageQuery), response: { 200: ListEnvelope(ApiKey, 'A page of API keys.'), ...errorResponses(401, 403, 422) } } },
    async (request) => {
      const { limit, offset } = pageOf(request.query);
      const rows = await listApiKeys(db, { organizationId: request.caller.organizationId, workspaceId: request.caller.keyWorkspaceId }, limit, offset);
      return envelope(rows.map(keyResponse), offset);
    },
  );

  app.delete(
    '/v2/api-keys/:api_key_id',
    { config: admin, schema: { tags: ['admin'], summary: 'Revoke an API key', params: Type.Object({ api_key_id: Uuid() }), response: { 204: Type.Null(), ...errorResponses(401, 403, 404, 422) } } },
    async (request, reply) => {
      const { caller } = request;
      const id = request.params.api_key_id;
      await db.transaction().execute(async (tx) => {
        const scope = { organizationId: caller.organizationId, workspaceId: caller.keyWorkspaceId };
        if (!(await revokeApiKey(tx, scope, id))) throw notFound('API key', id);
        const key = await keyForAudit(tx, id);
        await recordEvents(tx, [{ workspaceId: await auditWorkspace(tx, key.workspace_id, caller), subjectType: 'api_key', subjectId: id, type: 'api_key.revoked', data: keyEventData(key, caller.keyId) }]);
      });
      return reply.status(204).send(null);
    },
  );
};
