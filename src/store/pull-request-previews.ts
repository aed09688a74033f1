/**
 * Pull-request previews and deployments' preview settings (migrations/028_pull_request_previews.sql). The
 * webhook service writes a preview's pull-request facts; the status poster writes what it posted.
 */
import { sql } from 'kysely';
import type { CommitStatusState, Db, PullRequestPreviewRow } from './schema.ts';

export interface PreviewSettings {
  max_previews: number | null;
  fork_secrets: boolean;
}

export async function getPreviewSettings(db: Db, deploymentId: string): Promise<PreviewSettings> {
  const row = await db
    .selectFrom('deployment_preview_settings')
    .select(['max_previews', 'fork_secrets'])
    .where('deployment_id', '=', deploymentId)
    .executeTakeFirst();
  return row ?? { max_previews: null, fork_secrets: false };
}

export async function savePreviewSettings(db: Db, deploymentId: string, settings: PreviewSettings): Promise<void> {
  await db
    .insertInto('deployment_preview_settings')
    .values({ deployment_id: deploymentId, ...settings })
    .onConflict((oc) => oc.column('deployment_id').doUpdateSet({ ...settings, updated_at: sql`now()` }))
    .execute();
}

export async function getPreview(db: Db, deploymentId: string, pullRequest: number) {
  return db
    .selectFrom('pull_request_previews')
    .selectAll()
    .where('deployment_id', '=', deploymentId)
    .where('pull_request', '=', pullRequest)
    .executeTakeFirst();
}

/** The previews of a deployment, oldest first. */
export async function listPreviews(db: Db, deploymentId: string): Promise<PullRequestPreviewRow[]> {
  return db
    .selectFrom('pull_request_previews')
    .selectAll()
    .where('deployment_id', '=', deploymentId)
    .orderBy('created_at')
    .orderBy('pull_request')
    .execute();
}

/** The preview of a pull request as the webhook saw it last: a new head commit starts its statuses over. */
export async function savePreview(
  db: Db,
  preview: {
    deploymentId: string;
    pullRequest: number;
    repository: string;
    headSha: string;
    headRepository: string;
    fromFork: boolean;
    revisionId: string | null;
    refusedMessage: string | null;
  },
): Promise<void> {
  const values = {
    repository: preview.repository,
    head_sha: preview.headSha,
    head_repository: preview.headRepository,
    from_fork: preview.fromFork,
    revision_id: preview.revisionId,
    refused_message: preview.refusedMessage,
    status_attempts: 0,
    status_retry_at: null,
  };
  await db
    .insertInto('pull_request_previews')
    .values({ deployment_id: preview.deploymentId, pull_request: preview.pullRequest, ...values })
    .onConflict((oc) =>
      oc.columns(['deployment_id', 'pull_request']).doUpdateSet({ ...values, updated_at: sql`now()` }),
    )
    .execute();
}

export async function deletePreview(db: Db, deploymentId: string, pullRequest: number): Promise<boolean> {
  const result = await db
    .deleteFrom('pull_request_previews')
    .where('deployment_id', '=', deploymentId)
    .where('pull_request', '=', pullRequest)
    .executeTakeFirst();
  return result.numDeletedRows > 0n;
}

/**
 * Previews whose commit status may be due: with what the poster needs to decide (the revision's status,
 * the endpoint's served revision, the latest failure event of the endpoint) and where to post it.
 */
export async function previewsWithStatusFacts(db: Db, now: Date, deploymentId: string | null = null) {
  let query = db
    .selectFrom('pull_request_previews as p')
    .innerJoin('deployments as d', 'd.id', 'p.deployment_id')
    .leftJoin('revisions as r', 'r.id', 'p.revision_id')
    .leftJoin('deployment_endpoints as e', (join) =>
      join
        .onRef('e.deployment_id', '=', 'p.deployment_id')
        .on('e.name', '=', sql<string>`'pr-' || p.pull_request::text`),
    )
    .selectAll('p')
    .select([
      'd.workspace_id',
      'd.name as deployment_name',
      'd.app_slug',
      'd.source_config',
      'd.status as deployment_status',
      'r.status as revision_status',
      'r.failure_message as revision_failure_message',
      'e.served_revision_id',
      sql<string | null>`(select ev.data ->> 'message' from events ev
        where ev.deployment_id = p.deployment_id and ev.type = 'deployment.endpoint_failed'
          and ev.data ->> 'endpoint' = 'pr-' || p.pull_request::text
          and ev.data ->> 'revision_id' = p.revision_id::text
        order by ev.created_at desc limit 1)`.as('endpoint_failure_message'),
    ])
    .where((w) => w.or([w('p.status_retry_at', 'is', null), w('p.status_retry_at', '<=', now)]))
    .where('d.status', '!=', 'AWAITING_DELETE');
  if (deploymentId !== null) query = query.where('p.deployment_id', '=', deploymentId);
  return query.execute();
}

/** Records a status posted for the commit, only while the preview is still at that commit. */
export async function markStatusPosted(
  db: Db,
  deploymentId: string,
  pullRequest: number,
  sha: string,
  state: CommitStatusState,
): Promise<void> {
  await db
    .updateTable('pull_request_previews')
    .set({ status_state: state, status_sha: sha, status_attempts: 0, status_retry_at: null })
    .where('deployment_id', '=', deploymentId)
    .where('pull_request', '=', pullRequest)
    .where('head_sha', '=', sha)
    .execute();
}

/** A post that failed: tried again after `retryAt`. */
export async function markStatusFailed(
  db: Db,
  deploymentId: string,
  pullRequest: number,
  attempts: number,
  retryAt: Date,
): Promise<void> {
  await db
    .updateTable('pull_request_previews')
    .set({ status_attempts: attempts, status_retry_at: retryAt })
    .where('deployment_id', '=', deploymentId)
    .where('pull_request', '=', pullRequest)
    .execute();
}
