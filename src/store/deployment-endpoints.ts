/**
 * Endpoints of deployments (migrations/027_deployment_endpoints.sql): the API writes which revision each
 * should serve, the own data plane's worker writes which one it serves.
 */
import { sql } from 'kysely';
import type { SplitRollbackSettings } from '../domain/endpoint-splits.ts';
import type { Db, DeploymentEndpointRow } from './schema.ts';

/** A deployment's endpoints, by name. */
export async function listEndpoints(db: Db, deploymentId: string): Promise<DeploymentEndpointRow[]> {
  return db
    .selectFrom('deployment_endpoints')
    .selectAll()
    .where('deployment_id', '=', deploymentId)
    .orderBy('name')
    .execute();
}

export async function getEndpoint(db: Db, deploymentId: string, name: string) {
  return db
    .selectFrom('deployment_endpoints')
    .selectAll()
    .where('deployment_id', '=', deploymentId)
    .where('name', '=', name)
    .executeTakeFirst();
}

export async function countEndpoints(db: Db, deploymentId: string): Promise<number> {
  const row = await db
    .selectFrom('deployment_endpoints')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where('deployment_id', '=', deploymentId)
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

/** Creates the endpoint or moves it to `revisionId`; answers the row as it is now. */
export async function putEndpoint(
  db: Db,
  deploymentId: string,
  name: string,
  revisionId: string,
): Promise<DeploymentEndpointRow> {
  return db
    .insertInto('deployment_endpoints')
    .values({ deployment_id: deploymentId, name, revision_id: revisionId })
    .onConflict((oc) =>
      oc.columns(['deployment_id', 'name']).doUpdateSet({ revision_id: revisionId, updated_at: sql`now()` }),
    )
    .returningAll()
    .executeTakeFirstOrThrow();
}

export async function deleteEndpoint(db: Db, deploymentId: string, name: string): Promise<boolean> {
  const result = await db
    .deleteFrom('deployment_endpoints')
    .where('deployment_id', '=', deploymentId)
    .where('name', '=', name)
    .executeTakeFirst();
  return result.numDeletedRows > 0n;
}

/**
 * The data plane serves `revisionId` at the endpoint now. Written only while the endpoint still asks
 * for that revision (a move made meanwhile is served next, and said then).
 */
export async function setEndpointServed(
  db: Db,
  deploymentId: string,
  name: string,
  revisionId: string | null,
): Promise<void> {
  await db
    .updateTable('deployment_endpoints')
    .set({ served_revision_id: revisionId })
    .where('deployment_id', '=', deploymentId)
    .where('name', '=', name)
    .execute();
}

/** Revisions some endpoint of the deployment asks for or serves: their builds are kept. */
export async function pinnedRevisionIds(db: Db, deploymentId: string): Promise<string[]> {
  const rows = await listEndpoints(db, deploymentId);
  return [
    ...new Set(
      rows.flatMap((r) =>
        [r.revision_id, r.served_revision_id, r.split_revision_id, r.split_served_revision_id].filter(
          (id): id is string => id !== null,
        ),
      ),
    ),
  ];
}

/**
 * The endpoints of these deployments with what the data plane needs to serve each: its revision (the
 * whole row, for the job) and its deployment. Deployments being deleted have none to serve.
 */
export async function endpointsToServe(db: Db, deploymentIds: string[]) {
  if (deploymentIds.length === 0) return [];
  return db
    .selectFrom('deployment_endpoints as e')
    .innerJoin('deployments as d', 'd.id', 'e.deployment_id')
    .innerJoin('revisions as r', 'r.id', 'e.revision_id')
    .selectAll('r')
    .select([
      'e.name as endpoint_name',
      'e.served_revision_id as endpoint_served_revision_id',
      'e.split_revision_id as endpoint_split_revision_id',
      'e.split_weight as endpoint_split_weight',
      'e.split_served_revision_id as endpoint_split_served_revision_id',
      'd.workspace_id as deployment_workspace_id',
      'd.name as deployment_name',
      'd.app_slug as deployment_app_slug',
      'd.source_config as deployment_source_config',
      'd.tracing_project_id as deployment_tracing_project_id',
      'd.status as deployment_status',
    ])
    .where('e.deployment_id', 'in', deploymentIds)
    .orderBy('e.deployment_id')
    .orderBy('e.name')
    .execute();
}

/** Previews of deployments on the own data plane that have a revision but no endpoint yet. */
function pendingPreviews(db: Db) {
  return db
    .selectFrom('pull_request_previews as p')
    .innerJoin('deployments as d', 'd.id', 'p.deployment_id')
    .select('d.source_config')
    .where('d.listener_id', 'is', null)
    .where('d.status', '!=', 'AWAITING_DELETE')
    .where('p.revision_id', 'is not', null)
    .where((eb) =>
      eb.not(
        eb.exists(
          eb
            .selectFrom('deployment_endpoints as e')
            .select('e.name')
            .whereRef('e.deployment_id', '=', 'p.deployment_id')
            .where('e.name', '=', sql<string>`'pr-' || p.pull_request`),
        ),
      ),
    );
}

/**
 * How many copies of the deployment's instances its endpoints run for the workspace's quota: one per
 * endpoint, and one per pull-request preview whose endpoint is still to come (quotaCountedEndpointSpecs).
 */
export async function countQuotaEndpoints(db: Db, deploymentId: string): Promise<number> {
  const pending = await pendingPreviews(db).where('d.id', '=', deploymentId).execute();
  return (await countEndpoints(db, deploymentId)) + pending.length;
}

/**
 * The resource spec of each endpoint's deployment, once per endpoint (and once per pull-request preview
 * whose endpoint is still to come), for the workspace's deployments on the own data plane but `exceptId`:
 * every endpoint runs a copy of its deployment's instances, which the workspace's quota counts
 * (src/service/resource-quotas.ts).
 */
export async function quotaCountedEndpointSpecs(
  db: Db,
  workspaceId: string,
  exceptId: string | null = null,
): Promise<(Record<string, unknown> | null)[]> {
  let query = db
    .selectFrom('deployment_endpoints as e')
    .innerJoin('deployments as d', 'd.id', 'e.deployment_id')
    .select('d.source_config')
    .where('d.workspace_id', '=', workspaceId)
    .where('d.listener_id', 'is', null)
    .where('d.status', '!=', 'AWAITING_DELETE');
  if (exceptId !== null) query = query.where('d.id', '!=', exceptId);
  const rows = await query.select('e.split_revision_id').execute();
  // A pull request's preview holds its copy from its first revision on, before its endpoint is made (when
  // the revision has deployed): two previews opened at once must not both fit where one does.
  let previews = pendingPreviews(db).where('d.workspace_id', '=', workspaceId);
  if (exceptId !== null) previews = previews.where('d.id', '!=', exceptId);
  const pending = await previews.execute();
  // A split's second revision runs a copy of the instances too.
  return [
    ...rows.flatMap((r) => {
      const spec = r.source_config.resource_spec ?? null;
      return r.split_revision_id === null ? [spec] : [spec, spec];
    }),
    ...pending.map((r) => r.source_config.resource_spec ?? null),
  ];
}

/** Sets the endpoint's traffic split (migrations/029_endpoint_splits.sql); `startedAt` only when it begins. */
export async function putSplit(
  db: Db,
  deploymentId: string,
  name: string,
  split: { revisionId: string; weight: number; rollback: SplitRollbackSettings | null; startedAt: Date },
): Promise<DeploymentEndpointRow> {
  return db
    .updateTable('deployment_endpoints')
    .set({
      split_revision_id: split.revisionId,
      split_weight: split.weight,
      split_rollback: split.rollback === null ? null : JSON.stringify(split.rollback),
      split_started_at: split.startedAt,
      // What was said of another revision says nothing of this one; and a revision served at another
      // weight is not served at this one until its data plane says so (a listener's Gateway may take
      // minutes to take a new weight).
      split_not_served_reason: sql`case when split_revision_id = ${split.revisionId} then split_not_served_reason end`,
      split_served_revision_id: sql`case when split_revision_id = ${split.revisionId} and split_weight = ${split.weight} then split_served_revision_id end`,
      updated_at: sql`now()`,
    })
    .where('deployment_id', '=', deploymentId)
    .where('name', '=', name)
    .returningAll()
    .executeTakeFirstOrThrow();
}

/** Ends the endpoint's split: its second revision's instances are drained and stopped by the data plane. */
export async function clearSplit(db: Db, deploymentId: string, name: string): Promise<void> {
  await db
    .updateTable('deployment_endpoints')
    .set({
      split_revision_id: null,
      split_weight: null,
      split_rollback: null,
      split_started_at: null,
      split_served_revision_id: null,
      split_not_served_reason: null,
      updated_at: sql`now()`,
    })
    .where('deployment_id', '=', deploymentId)
    .where('name', '=', name)
    .execute();
}

/**
 * A data plane's word on the endpoint's split revision `revisionId`: served now, or not served and why.
 * Nothing when the split has another revision or weight now.
 */
export async function setSplitState(
  db: Db,
  deploymentId: string,
  name: string,
  split: { revisionId: string; weight: number },
  state: { served: true } | { served: false; reason: string },
): Promise<void> {
  await db
    .updateTable('deployment_endpoints')
    .set({
      split_served_revision_id: state.served ? split.revisionId : null,
      split_not_served_reason: state.served ? null : state.reason,
    })
    .where('deployment_id', '=', deploymentId)
    .where('name', '=', name)
    .where('split_revision_id', '=', split.revisionId)
    .where('split_weight', '=', split.weight)
    .execute();
}
