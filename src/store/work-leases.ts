/**
 * The revision table is the queue (graphile/worker's way): a worker claims a revision with
 * `FOR UPDATE SKIP LOCKED` and holds a lease on it (owner, expiry) that it extends while it works.
 * Another worker takes over work whose lease ran out: its worker died. The same goes for the apps the
 * local data plane runs: the runner of a deployment's active revision holds a lease on the deployment.
 *
 * Owner ids are `<node id>/<process id>`: a node id names one data directory (one machine's data
 * plane), so a restarted service recognises its dead predecessor's leases at once instead of waiting
 * for them to expire.
 *
 * Glossary
 * - working statuses: the own worker's steps in src/domain/states.ts (AWAITING_BUILD, BUILDING,
 *   AWAITING_DEPLOY, DEPLOYING): a worker holds a lease.
 * - claim: the lease taken on a QUEUED revision, `attempts` + 1; the worker then reports its first working
 *   status. A QUEUED revision leased by another live worker is not claimed.
 * - takeover: claiming a revision in a working status whose lease expired or whose owner is dead.
 */
import { sql } from 'kysely';
import type { Clock } from '../clock.ts';
import type { SourceConfig } from '../domain/sources.ts';
import { WORKING_REVISION_STATUSES } from '../domain/states.ts';
import type { Db, RevisionRow } from './schema.ts';
import { sqlNow } from './sql-now.ts';

/** The own worker's steps (src/domain/states.ts); migrations/005's index `revisions_work` covers them and QUEUED. */
const WORKING_STATUSES = WORKING_REVISION_STATUSES;

export interface LeaseOwner {
  /** `<node id>/<process id>` of this worker. */
  id: string;
  /** `<node id>/`: leases with this prefix and another id belong to a dead predecessor. */
  nodePrefix: string;
  /**
   * The time this worker dates and judges leases by. Without one it is PostgreSQL's `now()`, one time
   * for every node that shares the database (the service's own setting); a test passes a clock it moves
   * (test/support/clock.ts) to make a lease run out without waiting for it.
   */
  clock?: Clock;
}

/** The time of `owner`'s lease SQL: its clock's time as a parameter, or the database's `now()`. */
function leaseNow(owner: LeaseOwner) {
  return sqlNow(owner.clock);
}

/** When a lease of `leaseSeconds` taken or extended now by `owner` runs out. */
function leaseExpiry(owner: LeaseOwner, leaseSeconds: number) {
  return sql<Date>`${leaseNow(owner)} + make_interval(secs => ${leaseSeconds})`;
}

export interface ClaimedRevision extends RevisionRow {
  deployment_name: string;
  deployment_app_slug: string;
  deployment_source_config: SourceConfig;
  tracing_project_id: string;
}

/** An owner whose lease may be taken over: expired, or a dead predecessor on this node. */
function takeoverCondition(owner: LeaseOwner, ownerColumn: string, expiresColumn: string) {
  const expires = sql.ref(expiresColumn);
  const holder = sql.ref(ownerColumn);
  return sql<boolean>`(${expires} is null or ${expires} < ${leaseNow(owner)}
    or (${holder} like ${owner.nodePrefix + '%'} and ${holder} <> ${owner.id}))`;
}

/**
 * Claims one revision of a local deployment (no listener) that needs work: its latest revision, QUEUED
 * (unclaimed, or claimed by a worker that is gone) or in a working status to take over. That is the
 * revision `nextWorkRevisionId` of src/domain/desired-state.ts names (test/store/desired-state-claims.test.ts
 * checks this SQL against that function): the target, never an older revision still on its way, so two
 * workers never work one deployment at once (a latest revision that ended without running, or is
 * DEPLOYED, is no work). Beside it, each open pull request's preview revision on its way
 * (`previewWorkRevisionIds`). Oldest first over deployments.
 * Locks the revision (skipping those other workers hold) and shares the deployment row, so a delete
 * waits for the claim and the claim skips a deployment being deleted. Runs in the caller's transaction.
 */
export async function claimRevision(
  tx: Db,
  owner: LeaseOwner,
  leaseSeconds: number,
): Promise<ClaimedRevision | undefined> {
  const working = sql.join(WORKING_STATUSES.map((s) => sql.lit(s)));
  const found = await sql<ClaimedRevision>`
    select r.*, d.name as deployment_name, d.app_slug as deployment_app_slug, d.source_config as deployment_source_config, d.tracing_project_id
    from revisions r
    join deployments d on d.id = r.deployment_id
    where d.listener_id is null
      and d.status <> 'AWAITING_DELETE'
      and (
        (r.id = d.latest_revision_id and r.preview_pull_request is null)
        -- An open pull request's preview, beside the deployment's own (previewWorkRevisionIds).
        or exists (
          select 1 from pull_request_previews p
          where p.deployment_id = d.id and p.pull_request = r.preview_pull_request and p.revision_id = r.id)
      )
      and (
        (r.status = 'QUEUED'
          -- Claimed by another live worker that has not reported its first step yet.
          and (r.lease_owner is null or ${takeoverCondition(owner, 'r.lease_owner', 'r.lease_expires_at')}))
        or (r.status in (${working}) and ${takeoverCondition(owner, 'r.lease_owner', 'r.lease_expires_at')})
      )
    order by r.created_at, r.id
    limit 1
    for update of r skip locked
    for share of d skip locked`.execute(tx);
  const revision = found.rows[0];
  if (!revision) return undefined;
  await tx
    .updateTable('revisions')
    .set({
      lease_owner: owner.id,
      lease_expires_at: leaseExpiry(owner, leaseSeconds),
      attempts: sql<number>`attempts + 1`,
    })
    .where('id', '=', revision.id)
    .execute();
  return { ...revision, lease_owner: owner.id, attempts: revision.attempts + 1 };
}

/** Extends the lease; false when it is no longer ours (taken over, or the revision left the working statuses). */
export async function extendRevisionLease(
  db: Db,
  owner: LeaseOwner,
  revisionId: string,
  leaseSeconds: number,
): Promise<boolean> {
  const result = await db
    .updateTable('revisions')
    .set({ lease_expires_at: leaseExpiry(owner, leaseSeconds) })
    .where('id', '=', revisionId)
    .where('lease_owner', '=', owner.id)
    .where('status', 'in', [...WORKING_STATUSES])
    .executeTakeFirst();
  return result.numUpdatedRows > 0n;
}

/** Lets the revision's lease go (only when `owner` holds it, when given). */
export async function releaseRevisionLease(db: Db, revisionId: string, owner?: LeaseOwner): Promise<void> {
  let query = db
    .updateTable('revisions')
    .set({ lease_owner: null, lease_expires_at: null })
    .where('id', '=', revisionId);
  if (owner !== undefined) query = query.where('lease_owner', '=', owner.id);
  await query.execute();
}

export interface RunnableDeployment {
  id: string;
  workspace_id: string;
  name: string;
  app_slug: string;
  status: string;
  active_revision_id: string;
  tracing_project_id: string;
}

/**
 * Claims local deployments whose active revision nobody runs (no runner, an expired runner lease, or
 * a dead predecessor's), for this worker to start. Each claimed row gets this worker as its runner.
 * What runs is `servingRevisionId` of src/domain/desired-state.ts (test/store/desired-state-claims.test.ts
 * checks this SQL against that function).
 */
export async function claimRunnableDeployments(
  tx: Db,
  owner: LeaseOwner,
  leaseSeconds: number,
  limit: number,
): Promise<RunnableDeployment[]> {
  const found = await sql<RunnableDeployment>`
    select id, workspace_id, name, app_slug, status, active_revision_id, tracing_project_id from deployments d
    where listener_id is null and active_revision_id is not null and status <> 'AWAITING_DELETE'
      and (runner_owner is null or ${takeoverCondition(owner, 'd.runner_owner', 'd.runner_expires_at')})
    limit ${limit}
    for update skip locked`.execute(tx);
  if (found.rows.length === 0) return [];
  await tx
    .updateTable('deployments')
    .set({ runner_owner: owner.id, runner_expires_at: leaseExpiry(owner, leaseSeconds) })
    .where(
      'id',
      'in',
      found.rows.map((d) => d.id),
    )
    .execute();
  return found.rows;
}

/** Extends this worker's runner leases; returns the ids it still holds. */
export async function extendRunnerLeases(
  db: Db,
  owner: LeaseOwner,
  deploymentIds: string[],
  leaseSeconds: number,
): Promise<string[]> {
  if (deploymentIds.length === 0) return [];
  const rows = await db
    .updateTable('deployments')
    .set({ runner_expires_at: leaseExpiry(owner, leaseSeconds) })
    .where('id', 'in', deploymentIds)
    .where('runner_owner', '=', owner.id)
    .returning('id')
    .execute();
  return rows.map((r) => r.id);
}

/**
 * The rows of the deployments among `deploymentIds` that `owner` runs, with what the desired-state rule
 * (src/domain/desired-state.ts) reads: the worker takes their serving revision and resource spec from
 * that rule, as the listener protocol does (a deployment being deleted serves nothing).
 */
export async function runnerDeployments(db: Db, owner: LeaseOwner, deploymentIds: string[]) {
  if (deploymentIds.length === 0) return [];
  return db
    .selectFrom('deployments')
    .select(['id', 'status', 'listener_id', 'source_config', 'active_revision_id'])
    .where('id', 'in', deploymentIds)
    .where('runner_owner', '=', owner.id)
    .execute();
}

export async function setRunner(db: Db, owner: LeaseOwner, deploymentId: string, leaseSeconds: number): Promise<void> {
  await db
    .updateTable('deployments')
    .set({ runner_owner: owner.id, runner_expires_at: leaseExpiry(owner, leaseSeconds) })
    .where('id', '=', deploymentId)
    .execute();
}

/**
 * Claims one deployment whose deletion the own worker ends (`pendingDeletionFinisher` of
 * src/domain/deletion.ts is 'local': awaiting delete, no listener; a listener confirms its own
 * deployments' deletion through the listener protocol; test/store/work-leases.test.ts checks this
 * SQL against that function) and whose teardown this worker may do: nobody runs it, or this worker
 * does, or its runner is dead. Runs in the caller's transaction, which holds the row.
 */
export async function claimDeploymentToDelete(tx: Db, owner: LeaseOwner, skip: readonly string[] = []) {
  const found = await sql<{
    id: string;
    workspace_id: string;
    name: string;
    tracing_project_id: string;
    delete_tracing_project: boolean;
    status: string;
    runner_owner: string | null;
  }>`
    select id, workspace_id, name, tracing_project_id, delete_tracing_project, status, runner_owner from deployments d
    where status = 'AWAITING_DELETE' and listener_id is null
      and (runner_owner is null or runner_owner = ${owner.id} or ${takeoverCondition(owner, 'd.runner_owner', 'd.runner_expires_at')})
      and not (d.id = any(${sql.val([...skip])}::uuid[]))
      and not exists (select 1 from revisions r where r.deployment_id = d.id and r.lease_owner is not null
                        and r.lease_owner <> ${owner.id} and r.lease_expires_at > ${leaseNow(owner)})
    order by updated_at
    limit 1
    for update skip locked`.execute(tx);
  return found.rows[0];
}

/**
 * Whether `owner` holds the deployment: it runs it (the runner lease) or works on one of its revisions
 * (a revision's lease). The own data plane's reports about a deployment rest on this.
 */
export async function holdsDeploymentLease(db: Db, owner: LeaseOwner, deploymentId: string): Promise<boolean> {
  const found = await sql<{ held: boolean }>`
    select exists (select 1 from deployments where id = ${deploymentId} and runner_owner = ${owner.id})
      or exists (select 1 from revisions where deployment_id = ${deploymentId} and lease_owner = ${owner.id}) as held`.execute(
    db,
  );
  return found.rows[0]?.held === true;
}

/** Whether `owner` holds the revision's lease (it works on it). */
export async function holdsRevisionLease(db: Db, owner: LeaseOwner, revisionId: string): Promise<boolean> {
  const row = await db
    .selectFrom('revisions')
    .select('id')
    .where('id', '=', revisionId)
    .where('lease_owner', '=', owner.id)
    .executeTakeFirst();
  return row !== undefined;
}
