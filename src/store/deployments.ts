/** Deployments, read together with their latest revision's source revision config. */
import { sql, type SelectQueryBuilder } from 'kysely';
import type { DeploymentStatus } from '../domain/states.ts';
import type { DeploymentType, Source, SourceConfig, SourceRevisionConfig } from '../domain/sources.ts';
import type { SecretReference } from '../domain/deployment-plan.ts';
import { json, type Database, type Db, type DeploymentRow, type DeploymentTable, type StoredSecret } from './schema.ts';

export interface DeploymentView extends DeploymentRow {
  latest_revision_config: SourceRevisionConfig | null;
}

export interface DeploymentFilter {
  name?: string;
  nameContains?: string;
  status?: DeploymentStatus;
  remoteReconciled?: boolean;
  tagValueIds?: string[];
  imageVersion?: string;
  deploymentType?: DeploymentType;
  deploymentIds?: string[];
}

/**
 * The latest revision's source revision config, read by a scalar subquery rather than a join: the same
 * rows, planned in about half the time (planning is most of PostgreSQL's work for these small reads;
 * docs/performance.md).
 */
const latestRevisionConfig =
  sql<SourceRevisionConfig | null>`(select r.source_revision_config from revisions as r where r.id = d.latest_revision_id)`.as(
    'latest_revision_config',
  );

function viewQuery(db: Db) {
  return db.selectFrom('deployments as d').selectAll('d').select(latestRevisionConfig);
}

export async function getDeployment(db: Db, workspaceId: string, id: string): Promise<DeploymentView | undefined> {
  return viewQuery(db).where('d.workspace_id', '=', workspaceId).where('d.id', '=', id).executeTakeFirst();
}

/** Locks the deployment row for the rest of the transaction (patches of one deployment serialise). */
export async function lockDeployment(db: Db, workspaceId: string, id: string): Promise<DeploymentRow | undefined> {
  return db
    .selectFrom('deployments')
    .selectAll()
    .where('workspace_id', '=', workspaceId)
    .where('id', '=', id)
    .forUpdate()
    .executeTakeFirst();
}

/** Locks the deployment row by id alone, for the data planes (which know no workspace to ask for). */
export async function lockDeploymentById(db: Db, id: string): Promise<DeploymentRow | undefined> {
  return db.selectFrom('deployments').selectAll().where('id', '=', id).forUpdate().executeTakeFirst();
}

const likePattern = (text: string): string => `%${text.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;

type DeploymentQuery<O> = SelectQueryBuilder<Database & { d: DeploymentTable }, 'd', O>;

function filtered<O>(query: DeploymentQuery<O>, workspaceId: string, filter: DeploymentFilter): DeploymentQuery<O> {
  let q = query.where('d.workspace_id', '=', workspaceId);
  if (filter.name !== undefined) q = q.where('d.name', '=', filter.name);
  if (filter.nameContains !== undefined) q = q.where('d.name', 'ilike', likePattern(filter.nameContains));
  if (filter.status !== undefined) q = q.where('d.status', '=', filter.status);
  if (filter.remoteReconciled !== undefined) q = q.where('d.remote_reconciled', '=', filter.remoteReconciled);
  if (filter.imageVersion !== undefined) q = q.where('d.image_version', '=', filter.imageVersion);
  if (filter.deploymentType !== undefined) q = q.where('d.deployment_type', '=', filter.deploymentType);
  if (filter.deploymentIds !== undefined) q = q.where('d.id', 'in', filter.deploymentIds);
  const tagValueIds = filter.tagValueIds;
  if (tagValueIds !== undefined) {
    // A deployment matches when it carries every listed tag value (the ids are distinct, and so are a
    // deployment's tag rows). Found from the tag side (deployment_tags_value), not row by row.
    q = q.where('d.id', 'in', (eb) =>
      eb
        .selectFrom('deployment_tags as t')
        .select('t.deployment_id')
        .where('t.tag_value_id', 'in', tagValueIds)
        .groupBy('t.deployment_id')
        .having(eb.fn.countAll(), '=', tagValueIds.length),
    );
  }
  return q;
}

/**
 * Every filter is served by an index that also gives the order (migrations/001 and 004), so a page
 * reads about a page of index entries, never the workspace's whole table (docs/performance.md).
 *
 * The first page, by far the most asked for, is one plain statement. A later page is two steps (a
 * "deferred join"): the ids of the page from the index (an index-only scan when the filter is in the
 * index), then only those rows. Skipping `offset` rows then costs index entries, not heap rows and
 * revision lookups: eight times cheaper at offset 9,000, and more so further on.
 */
export async function listDeployments(
  db: Db,
  workspaceId: string,
  filter: DeploymentFilter,
  limit: number,
  offset: number,
): Promise<DeploymentView[]> {
  if (offset === 0) {
    return filtered(viewQuery(db), workspaceId, filter)
      .orderBy('d.created_at', 'desc')
      .orderBy('d.id', 'desc')
      .limit(limit)
      .execute();
  }
  const ids = filtered(db.selectFrom('deployments as d').select(['d.id', 'd.created_at']), workspaceId, filter)
    .orderBy('d.created_at', 'desc')
    .orderBy('d.id', 'desc')
    .limit(limit)
    .offset(offset);
  return db
    .selectFrom(ids.as('p'))
    .innerJoin('deployments as d', 'd.id', 'p.id')
    .selectAll('d')
    .select(latestRevisionConfig)
    .orderBy('p.created_at', 'desc')
    .orderBy('p.id', 'desc')
    .execute();
}

export interface NewDeployment {
  id: string;
  workspaceId: string;
  name: string;
  source: Source;
  sourceConfig: SourceConfig;
  deploymentType: DeploymentType;
  listenerId: string | null;
  status: DeploymentStatus;
  secrets: StoredSecret[];
  secretReferences: SecretReference[] | null;
  tracingProjectId: string;
  latestRevisionId: string | null;
  imageVersion: string | null;
}

/** Inserts unless the name is taken in the workspace; null means taken (a unique constraint decides). */
export async function insertDeployment(db: Db, d: NewDeployment): Promise<boolean> {
  const row = await db
    .insertInto('deployments')
    .values({
      id: d.id,
      workspace_id: d.workspaceId,
      name: d.name,
      source: d.source,
      source_config: json(d.sourceConfig),
      deployment_type: d.deploymentType,
      listener_id: d.listenerId,
      status: d.status,
      secrets: json(d.secrets),
      secret_references: json(d.secretReferences),
      tracing_project_id: d.tracingProjectId,
      latest_revision_id: d.latestRevisionId,
      image_version: d.imageVersion,
    })
    .onConflict((oc) => oc.columns(['workspace_id', 'name']).doNothing())
    .returning('id')
    .executeTakeFirst();
  return row !== undefined;
}

export interface DeploymentChange {
  sourceConfig?: SourceConfig;
  secrets?: StoredSecret[];
  secretReferences?: SecretReference[] | null;
  latestRevisionId?: string;
  imageVersion?: string | null;
  status?: DeploymentStatus;
  deleteTracingProject?: boolean;
}

export async function updateDeployment(db: Db, id: string, change: DeploymentChange): Promise<void> {
  await db
    .updateTable('deployments')
    .set({
      ...(change.sourceConfig !== undefined ? { source_config: json(change.sourceConfig) } : {}),
      ...(change.secrets !== undefined ? { secrets: json(change.secrets) } : {}),
      ...(change.secretReferences !== undefined ? { secret_references: json(change.secretReferences) } : {}),
      ...(change.latestRevisionId !== undefined ? { latest_revision_id: change.latestRevisionId } : {}),
      ...(change.imageVersion !== undefined ? { image_version: change.imageVersion } : {}),
      ...(change.status !== undefined ? { status: change.status } : {}),
      ...(change.deleteTracingProject !== undefined ? { delete_tracing_project: change.deleteTracingProject } : {}),
      updated_at: sql<Date>`now()`,
    })
    .where('id', '=', id)
    .execute();
}

/** Whether the local data plane made anything for the deployment that a teardown must remove. */
export async function hasLocalResources(db: Db, id: string): Promise<boolean> {
  const found = await db
    .selectNoFrom((eb) => [
      eb
        .or([
          eb.exists(eb.selectFrom('deployment_runtimes').select('deployment_id').where('deployment_id', '=', id)),
          eb.exists(eb.selectFrom('revisions').select('id').where('deployment_id', '=', id).where('attempts', '>', 0)),
        ])
        .as('found'),
    ])
    .executeTakeFirstOrThrow();
  return Boolean(found.found);
}

export async function deleteDeploymentRow(db: Db, id: string): Promise<void> {
  await db.deleteFrom('deployments').where('id', '=', id).execute();
}

/**
 * The revision that serves the deployment; the own data plane also sets the stable URL it switched to.
 * Written only by `activateRevision` (src/service/lifecycle.ts).
 */
export async function setActiveRevision(
  db: Db,
  deploymentId: string,
  revisionId: string,
  customUrl?: string,
): Promise<void> {
  await db
    .updateTable('deployments')
    .set({
      active_revision_id: revisionId,
      ...(customUrl !== undefined
        ? { source_config: sql`jsonb_set(source_config, '{custom_url}', to_jsonb(${customUrl}::text))` }
        : {}),
      updated_at: sql<Date>`now()`,
    })
    .where('id', '=', deploymentId)
    .execute();
}

/**
 * Sets the stable URL (`custom_url`) of every deployment of the own data plane that has one to
 * `<prefix><app_slug><suffix>` (its URL on this service's app edge) where it names another address:
 * after a restore on another apps port or domain, what the service shows is where the apps answer.
 * Returns how many changed.
 */
export async function moveAppUrls(db: Db, prefix: string, suffix: string): Promise<number> {
  const url = sql<string>`${prefix} || app_slug || ${suffix}`;
  const result = await db
    .updateTable('deployments')
    .set({
      source_config: sql`jsonb_set(source_config, '{custom_url}', to_jsonb(${url}))`,
      updated_at: sql<Date>`now()`,
    })
    .where('listener_id', 'is', null)
    .where('app_slug', 'is not', null)
    .where(sql<boolean>`source_config ? 'custom_url'`)
    .where(sql<boolean>`source_config ->> 'custom_url' is distinct from ${url}`)
    .executeTakeFirst();
  return Number(result.numUpdatedRows);
}

export async function activeRevisionId(db: Db, deploymentId: string): Promise<string | null | undefined> {
  const row = await db
    .selectFrom('deployments')
    .select('active_revision_id')
    .where('id', '=', deploymentId)
    .executeTakeFirst();
  return row?.active_revision_id;
}

/** What the own data plane checks of a deployment it runs: its status, serving revision and current source config. */
export async function runningDeploymentState(db: Db, deploymentId: string) {
  return db
    .selectFrom('deployments')
    .select(['status', 'active_revision_id', 'source_config'])
    .where('id', '=', deploymentId)
    .executeTakeFirst();
}
