/** Revisions of deployments. */
import { sql } from 'kysely';
import type { RevisionStatus } from '../domain/states.ts';
import type { Source, SourceConfig, SourceRevisionConfig } from '../domain/sources.ts';
import { json, type Db, type RevisionRow, type RevisionSnapshot, type StoredSecret } from './schema.ts';

export interface RevisionView extends RevisionRow {
  remote_reconciled: boolean;
}

function viewQuery(db: Db) {
  return db
    .selectFrom('revisions as r')
    .innerJoin('deployments as d', 'd.id', 'r.deployment_id')
    .selectAll('r')
    .select('d.remote_reconciled');
}

export async function getRevision(
  db: Db,
  workspaceId: string,
  deploymentId: string,
  id: string,
): Promise<RevisionView | undefined> {
  return viewQuery(db)
    .where('r.workspace_id', '=', workspaceId)
    .where('r.deployment_id', '=', deploymentId)
    .where('r.id', '=', id)
    .executeTakeFirst();
}

export async function listRevisions(
  db: Db,
  workspaceId: string,
  deploymentId: string,
  filter: { statuses?: RevisionStatus[]; remoteReconciled?: boolean },
  limit: number,
  offset: number,
): Promise<RevisionView[]> {
  let query = viewQuery(db).where('r.workspace_id', '=', workspaceId).where('r.deployment_id', '=', deploymentId);
  if (filter.statuses !== undefined) query = query.where('r.status', 'in', filter.statuses);
  if (filter.remoteReconciled !== undefined) query = query.where('d.remote_reconciled', '=', filter.remoteReconciled);
  return query.orderBy('r.created_at', 'desc').orderBy('r.id', 'desc').limit(limit).offset(offset).execute();
}

export interface NewRevision {
  id: string;
  deploymentId: string;
  workspaceId: string;
  status: RevisionStatus;
  source: Source;
  config: SourceRevisionConfig;
  snapshot: RevisionSnapshot;
  secrets: StoredSecret[];
  /** A pull request's preview (migrations/028_pull_request_previews.sql); absent for the deployment's own. */
  previewPullRequest?: number;
}

export async function insertRevision(db: Db, r: NewRevision): Promise<void> {
  await db
    .insertInto('revisions')
    .values({
      id: r.id,
      deployment_id: r.deploymentId,
      workspace_id: r.workspaceId,
      // The deployment row is locked by the caller, so max+1 cannot race.
      number: sql<number>`(select coalesce(max(number), 0) + 1 from revisions where deployment_id = ${r.deploymentId})`,
      // The time of the insert under that lock, never before the previous revision's: the list order
      // (created_at) then always agrees with number and with latest_revision_id, however many patches
      // run at once (now() would be each transaction's start, which is not lock order).
      created_at: sql<Date>`greatest(clock_timestamp(),
        (select max(created_at) + interval '1 microsecond' from revisions where deployment_id = ${r.deploymentId}))`,
      status: r.status,
      source: r.source,
      source_revision_config: json(r.config),
      snapshot: json(r.snapshot),
      secrets: json(r.secrets),
      preview_pull_request: r.previewPullRequest ?? null,
    })
    .execute();
}

/** Revisions of a deployment in the given statuses, locked for a transition. */
export async function lockRevisionsInStatus(db: Db, deploymentId: string, statuses: readonly RevisionStatus[]) {
  return db
    .selectFrom('revisions')
    .select(['id', 'status', 'workspace_id', 'deployment_id', 'preview_pull_request'])
    .where('deployment_id', '=', deploymentId)
    .where('status', 'in', statuses)
    .forUpdate()
    .execute();
}

export async function lockRevision(db: Db, id: string) {
  return db.selectFrom('revisions').selectAll().where('id', '=', id).forUpdate().executeTakeFirst();
}

export async function setRevisionStatus(
  db: Db,
  id: string,
  status: RevisionStatus,
  failure: { reason: string; message: string } | null,
): Promise<void> {
  await db
    .updateTable('revisions')
    .set({
      status,
      failure_reason: failure?.reason ?? null,
      failure_message: failure?.message ?? null,
      status_changed_at: sql<Date>`now()`,
      updated_at: sql<Date>`now()`,
    })
    .where('id', '=', id)
    .execute();
}

/** The revision, locked, if the worker `leaseOwner` still holds its lease. */
/** The deployment of a revision the own data plane runs (a deployment without a listener). */
/** The pull request a revision previews (revisions.preview_pull_request); null for the deployment's own or one gone. */
export async function previewPullRequestOf(db: Db, revisionId: string): Promise<number | null> {
  const row = await db
    .selectFrom('revisions')
    .select('preview_pull_request')
    .where('id', '=', revisionId)
    .executeTakeFirst();
  return row?.preview_pull_request ?? null;
}

export async function findLocalRevision(
  db: Db,
  revisionId: string,
): Promise<{ deployment_id: string; workspace_id: string } | undefined> {
  return db
    .selectFrom('revisions as r')
    .innerJoin('deployments as d', 'd.id', 'r.deployment_id')
    .select(['r.deployment_id', 'd.workspace_id'])
    .where('r.id', '=', revisionId)
    .where('d.listener_id', 'is', null)
    .executeTakeFirst();
}

export async function getRevisionStatus(db: Db, id: string): Promise<RevisionStatus | undefined> {
  const row = await db.selectFrom('revisions').select('status').where('id', '=', id).executeTakeFirst();
  return row?.status;
}

/** A deployment's revisions, newest (highest number) first. */
export async function revisionStatusesOf(db: Db, deploymentId: string) {
  return db
    .selectFrom('revisions')
    .select(['id', 'status'])
    .where('deployment_id', '=', deploymentId)
    .orderBy('number', 'desc')
    .execute();
}

/** The commit a code-host revision's `repo_ref` resolved to when its source was fetched. */
export async function setRevisionCommitSha(db: Db, id: string, sha: string): Promise<void> {
  await db
    .updateTable('revisions')
    .set({ source_revision_config: sql`source_revision_config || ${json({ repo_commit_sha: sha })}::jsonb` })
    .where('id', '=', id)
    .execute();
}

/** The active revisions of these deployments, each with its deployment's source config, in one query. */
export async function activeRevisionsOf(
  db: Db,
  deploymentIds: string[],
): Promise<(RevisionRow & { deployment_source_config: SourceConfig })[]> {
  return db
    .selectFrom('deployments as d')
    .innerJoin('revisions as r', 'r.id', 'd.active_revision_id')
    .selectAll('r')
    .select('d.source_config as deployment_source_config')
    .where('d.id', 'in', deploymentIds)
    .execute();
}
