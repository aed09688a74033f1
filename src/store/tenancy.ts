/** Organizations, workspaces and API keys. */
import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import type { Db } from './schema.ts';

export interface KeyRecord {
  id: string;
  organization_id: string;
  workspace_id: string | null;
  role: 'admin' | 'member';
  name: string;
}

export async function findActiveKeyByHash(db: Db, hash: Buffer): Promise<KeyRecord | undefined> {
  return db
    .selectFrom('api_keys')
    .select(['id', 'organization_id', 'workspace_id', 'role', 'name'])
    .where('key_hash', '=', hash)
    .where('revoked_at', 'is', null)
    .executeTakeFirst();
}

/** Up to two workspace ids of an organization: enough to tell "exactly one" from "several". */
export async function firstWorkspaceIds(db: Db, organizationId: string): Promise<string[]> {
  const rows = await db
    .selectFrom('workspaces')
    .select('id')
    .where('organization_id', '=', organizationId)
    .orderBy('created_at')
    .limit(2)
    .execute();
  return rows.map((r) => r.id);
}

/** Every workspace id of an organization (the audience of an organization-wide event). */
export async function workspaceIdsOf(db: Db, organizationId: string): Promise<string[]> {
  const rows = await db
    .selectFrom('workspaces')
    .select('id')
    .where('organization_id', '=', organizationId)
    .orderBy('created_at')
    .execute();
  return rows.map((r) => r.id);
}

export async function workspaceInOrganization(db: Db, workspaceId: string, organizationId: string): Promise<boolean> {
  const row = await db
    .selectFrom('workspaces')
    .select('id')
    .where('id', '=', workspaceId)
    .where('organization_id', '=', organizationId)
    .executeTakeFirst();
  return row !== undefined;
}

export async function createOrganization(db: Db, name: string): Promise<{ id: string; name: string }> {
  const id = randomUUID();
  await db.insertInto('organizations').values({ id, name }).execute();
  return { id, name };
}

export async function createWorkspace(db: Db, organizationId: string, name: string) {
  return db
    .insertInto('workspaces')
    .values({ id: randomUUID(), organization_id: organizationId, name })
    .returningAll()
    .executeTakeFirstOrThrow();
}

/** A workspace made through the API; null when the organization already has one of that name. */
export async function insertWorkspace(db: Db, organizationId: string, name: string) {
  const row = await db
    .insertInto('workspaces')
    .values({ id: randomUUID(), organization_id: organizationId, name })
    // (organization_id, name) is unique: a concurrent twin loses here, and the transaction stays usable.
    .onConflict((oc) => oc.columns(['organization_id', 'name']).doNothing())
    .returningAll()
    .executeTakeFirst();
  return row ?? null;
}

export async function listWorkspaces(db: Db, organizationId: string, limit: number, offset: number) {
  return db
    .selectFrom('workspaces')
    .selectAll()
    .where('organization_id', '=', organizationId)
    .orderBy('created_at', 'desc')
    .orderBy('id', 'desc')
    .limit(limit)
    .offset(offset)
    .execute();
}

export async function createApiKey(
  db: Db,
  key: {
    organizationId: string;
    workspaceId: string | null;
    name: string;
    role: 'admin' | 'member';
    hash: Buffer;
    prefix: string;
  },
) {
  return db
    .insertInto('api_keys')
    .values({
      id: randomUUID(),
      organization_id: key.organizationId,
      workspace_id: key.workspaceId,
      name: key.name,
      role: key.role,
      key_hash: key.hash,
      key_prefix: key.prefix,
    })
    .returning(['id', 'organization_id', 'workspace_id', 'name', 'role', 'key_prefix', 'created_at', 'revoked_at'])
    .executeTakeFirstOrThrow();
}

/** Keys visible to a caller: the whole organization's for an organization key, else the workspace's. */
export async function listApiKeys(
  db: Db,
  scope: { organizationId: string; workspaceId: string | null },
  limit: number,
  offset: number,
) {
  let query = db
    .selectFrom('api_keys')
    .select(['id', 'organization_id', 'workspace_id', 'name', 'role', 'key_prefix', 'created_at', 'revoked_at'])
    .where('organization_id', '=', scope.organizationId);
  if (scope.workspaceId !== null) query = query.where('workspace_id', '=', scope.workspaceId);
  return query.orderBy('created_at', 'desc').orderBy('id', 'desc').limit(limit).offset(offset).execute();
}

export async function revokeApiKey(
  db: Db,
  scope: { organizationId: string; workspaceId: string | null },
  id: string,
): Promise<boolean> {
  let query = db
    .updateTable('api_keys')
    .set({ revoked_at: sql<Date>`now()` })
    .where('id', '=', id)
    .where('organization_id', '=', scope.organizationId)
    .where('revoked_at', 'is', null);
  if (scope.workspaceId !== null) query = query.where('workspace_id', '=', scope.workspaceId);
  const result = await query.executeTakeFirst();
  return result.numUpdatedRows > 0n;
}

/** The fields of a key its audit event names (revokeApiKey returns none). */
export async function apiKeyAuditFields(
  db: Db,
  id: string,
): Promise<{ name: string; role: 'admin' | 'member'; workspace_id: string | null }> {
  return db
    .selectFrom('api_keys')
    .select(['name', 'role', 'workspace_id'])
    .where('id', '=', id)
    .executeTakeFirstOrThrow();
}

export async function defaultWorkspace(db: Db): Promise<{ id: string; organization_id: string } | undefined> {
  return db
    .selectFrom('workspaces')
    .select(['id', 'organization_id'])
    .orderBy('created_at')
    .orderBy('id')
    .limit(1)
    .executeTakeFirst();
}

/** Makes sure a key with this hash exists as an admin key of the workspace (bootstrap key from config). */
export async function ensureKey(
  db: Db,
  key: { organizationId: string; workspaceId: string; name: string; hash: Buffer; prefix: string },
): Promise<void> {
  await db
    .insertInto('api_keys')
    .values({
      id: randomUUID(),
      organization_id: key.organizationId,
      workspace_id: key.workspaceId,
      name: key.name,
      role: 'admin',
      key_hash: key.hash,
      key_prefix: key.prefix,
    })
    .onConflict((oc) => oc.column('key_hash').doUpdateSet({ revoked_at: null, role: 'admin' }))
    .execute();
}
