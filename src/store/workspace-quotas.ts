/** A workspace's quota and what its deployments on the own data plane ask for (src/domain/resource-maxima.ts). */
import type { WorkspaceQuota } from '../domain/resource-maxima.ts';
import type { Db } from './schema.ts';

const QUOTA_COLUMNS = [
  'quota_memory_mb',
  'quota_cpu',
  'quota_instances',
  'quota_deployments',
  'quota_database_storage_gi',
] as const;

type QuotaRow = {
  quota_memory_mb: number | null;
  quota_cpu: number | null;
  quota_instances: number | null;
  quota_deployments: number | null;
  quota_database_storage_gi: number | null;
};

const quotaOf = (row: QuotaRow): WorkspaceQuota => ({
  memory_mb: row.quota_memory_mb,
  cpu: row.quota_cpu,
  instances: row.quota_instances,
  deployments: row.quota_deployments,
  database_storage_gi: row.quota_database_storage_gi,
});

/**
 * The workspace's quota, its row locked until the transaction ends: every write checked against the
 * quota takes this lock first, so two creates in one workspace cannot both fit in the last room.
 */
export async function lockWorkspaceQuota(db: Db, workspaceId: string): Promise<WorkspaceQuota | undefined> {
  const row = await db
    .selectFrom('workspaces')
    .select(QUOTA_COLUMNS)
    .where('id', '=', workspaceId)
    .forUpdate()
    .executeTakeFirst();
  return row && quotaOf(row);
}

/** A workspace of the organization with its quota; undefined when the organization has no such workspace. */
export async function getWorkspaceWithQuota(db: Db, organizationId: string, workspaceId: string) {
  const row = await db
    .selectFrom('workspaces')
    .select(['id', 'organization_id', 'name', 'created_at', ...QUOTA_COLUMNS])
    .where('id', '=', workspaceId)
    .where('organization_id', '=', organizationId)
    .executeTakeFirst();
  if (!row) return undefined;
  const { id, organization_id, name, created_at } = row;
  return { id, organization_id, name, created_at, quota: quotaOf(row) };
}

/** Sets the fields of the quota given (null removes one); the quota as it is now, undefined when no such workspace. */
export async function updateWorkspaceQuota(
  db: Db,
  organizationId: string,
  workspaceId: string,
  quota: Partial<WorkspaceQuota>,
): Promise<WorkspaceQuota | undefined> {
  const set: Partial<QuotaRow> = {};
  if (quota.memory_mb !== undefined) set.quota_memory_mb = quota.memory_mb;
  if (quota.cpu !== undefined) set.quota_cpu = quota.cpu;
  if (quota.instances !== undefined) set.quota_instances = quota.instances;
  if (quota.deployments !== undefined) set.quota_deployments = quota.deployments;
  if (quota.database_storage_gi !== undefined) set.quota_database_storage_gi = quota.database_storage_gi;
  const row =
    Object.keys(set).length === 0
      ? await db
          .selectFrom('workspaces')
          .select(QUOTA_COLUMNS)
          .where('id', '=', workspaceId)
          .where('organization_id', '=', organizationId)
          .executeTakeFirst()
      : await db
          .updateTable('workspaces')
          .set(set)
          .where('id', '=', workspaceId)
          .where('organization_id', '=', organizationId)
          .returning(QUOTA_COLUMNS)
          .executeTakeFirst();
  return row && quotaOf(row);
}

/**
 * The resource specs of the workspace's deployments on the own data plane that count against its quota:
 * every one but those being deleted, and but `exceptId` (the one being patched).
 */
export async function quotaCountedSpecs(
  db: Db,
  workspaceId: string,
  exceptId: string | null = null,
): Promise<(Record<string, unknown> | null)[]> {
  let query = db
    .selectFrom('deployments')
    .select('source_config')
    .where('workspace_id', '=', workspaceId)
    .where('listener_id', 'is', null)
    .where('status', '!=', 'AWAITING_DELETE');
  if (exceptId !== null) query = query.where('id', '!=', exceptId);
  const rows = await query.execute();
  return rows.map((r) => r.source_config.resource_spec ?? null);
}

/**
 * What the databases of the workspace's deployments on the own data plane held at their last measure
 * (src/dataplane/app-database-storage.ts), in bytes; 0 when none was measured.
 */
export async function measuredDatabaseBytes(db: Db, workspaceId: string): Promise<number> {
  const row = await db
    .selectFrom('deployment_runtimes as r')
    .innerJoin('deployments as d', 'd.id', 'r.deployment_id')
    .select((eb) => eb.fn.coalesce(eb.fn.sum<string>('r.database_size_bytes'), eb.val('0')).as('bytes'))
    .where('d.workspace_id', '=', workspaceId)
    .where('d.listener_id', 'is', null)
    .where('d.status', '!=', 'AWAITING_DELETE')
    .executeTakeFirst();
  return Number(row?.bytes ?? 0);
}
