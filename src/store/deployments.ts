/** Deployments, read together with their latest revision's source revision config. */
import { sql } from 'kysely';
import type { DeploymentStatus } from '../domain/states.ts';
import type { DeploymentType, Source, SourceConfig, SourceRevisionConfig } from '../domain/sources.ts';
import type { SecretReference } from '../domain/deployment-plan.ts';
import { json, type Db, type DeploymentRow, type StoredSecret } from './schema.ts';

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

function viewQuery(db: Db) {
  return db
    .selectFrom('deployments as d')
    .leftJoin('revisions as r', 'r.id', 'd.latest_revision_id')
    .selectAll('d')
    .select(sql<SourceRevisionConfig | null>`r.source_revision_config`.as('latest_revision_config'));
}

export async function getDeployment(db: Db, workspaceId: string, id: string): Promise<DeploymentView | undefined> {
  return viewQuery(db).where('d.workspace_id', '=', workspaceId).where('d.id', '=', id).executeTakeFirst();
}

/** Locks the deployment row for the rest of the transaction (patches of one deployment serialise). */
export async function lockDeployment(db: Db, workspaceId: string, id: string): Promise<DeploymentRow | undefined> {
  return db.selectFrom('deployments').selectAll().where('workspace_id', '=', workspaceId).where('id', '=', id).forUpdate().executeTakeFirst();
}

const likePattern = (text: string): string => `%${text.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;

/**
 * A page in two steps (a "deferred join"): the ids of the page first, from the index that serves the
 * filter and the order (an index-only scan when the filter is in the index), then only those rows with
 * their latest revision. Skipping `offset` rows then costs index entries, not heap rows and joins; a
 * page never reads the workspace's whole table (docs/performance.md, migrations/004_list_indexes.sql).
 */
export async function listDeployments(db: Db, workspaceId: string, filter: DeploymentFilter, limit: number, offset: number): Promise<DeploymentView[]> {
  let page = db.selectFrom('deployments as d').select(['d.id', 'd.created_at']).where('d.workspace_id', '=', workspaceId);
  if (filter.name !== undefined) page = page.where('d.name', '=', filter.name);
  if (filter.nameContains !== undefined) page = page.where('d.name', 'ilike', likePattern(filter.nameContains));
  if (filter.status !== undefined) page = page.where('d.status', '=', filter.status);
  if (filter.remoteReconciled !== undefined) page = page.where('d.remote_reconciled', '=', filter.remoteReconciled);
  if (filter.imageVersion !== undefined) page = page.where('d.image_version', '=', filter.imageVersion);
  if (filter.deploymentType !== undefined) page = page.where('d.deployment_type', '=', filter.deploymentType);
  if (filter.deploymentIds !== undefined) page = page.where('d.id', 'in', filter.deploymentIds);
  const tagValueIds = filter.tagValueIds;
  if (tagValueIds !== undefined) {
    // A deployment matches when it carries every listed tag value (the ids are distinct, and so are a
    // deployment's tag rows). Found from the tag side (deployment_tags_value), not row by row.
    page = page.where('d.id', 'in', (eb) =>
      eb
        .selectFrom('deployment_tags as t')
        .select('t.deployment_id')
        .where('t.tag_value_id', 'in', tagValueIds)
        .groupBy('t.deployment_id')
        .having(eb.fn.countAll(), '=', tagValueIds.length),
    );
  }
  const ids = page.orderBy('d.created_at', 'desc').orderBy('d.id', 'desc').limit(limit).offset(offset);
  return db
    .selectFrom(ids.as('p'))
    .innerJoin('deployments as d', 'd.id', 'p.id')
    .leftJoin('revisions as r', 'r.id', 'd.latest_revision_id')
    .selectAll('d')
    .select(sql<SourceRevisionConfig | null>`r.source_revision_config`.as('latest_revision_config'))
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
      updated_at: sql<Date>`now()`,
    })
    .where('id', '=', id)
    .execute();
}

export async function deleteDeploymentRow(db: Db, id: string): Promise<void> {
  await db.deleteFrom('deployments').where('id', '=', id).execute();
}
