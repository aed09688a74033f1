/** Listeners: compute infrastructure registered by a workspace, and what their agents report. */
import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import { jsonArrayFrom } from 'kysely/helpers/postgres';
import type { Clock } from '../clock.ts';
import { sqlNow } from './sql-now.ts';
import { json, type Db, type DeploymentRow, type ListenerRow, type RevisionRow } from './schema.ts';

/** Seconds without a heartbeat or desired-state request after which a listener shows as stale. */
export const LISTENER_STALE_AFTER_SECONDS = 90;

export const LISTENER_STATES = ['never_seen', 'connected', 'stale'] as const;
export type ListenerState = (typeof LISTENER_STATES)[number];

/**
 * A listener with its state, worked out against the same time that sets last_seen_at: the database's
 * `now()`, or the service's clock when the store is given one (src/store/sql-now.ts).
 */
export interface ListenerView extends ListenerRow {
  state: ListenerState;
}

/**
 * A listener row's state, as SQL on its `last_seen_at` (the one rule: the API's views and the metrics'
 * gauges read it so): connected up to and including LISTENER_STALE_AFTER_SECONDS after it was last seen.
 */
export function listenerStateSql(clock: Clock | undefined) {
  return sql<ListenerState>`case
  when last_seen_at is null then 'never_seen'
  when last_seen_at >= ${sqlNow(clock)} - make_interval(secs => ${LISTENER_STALE_AFTER_SECONDS}) then 'connected'
  else 'stale' end`;
}

function stateColumn(clock: Clock | undefined) {
  return listenerStateSql(clock).as('state');
}

export async function insertListener(
  db: Db,
  listener: {
    workspaceId: string;
    computeType: string;
    computeId: string;
    namespaces: string[];
    version: string | null;
  },
  clock?: Clock,
): Promise<ListenerView | null> {
  const now = sqlNow(clock);
  const row = await db
    .insertInto('listeners')
    .values({
      created_at: now,
      updated_at: now,
      id: randomUUID(),
      workspace_id: listener.workspaceId,
      compute_type: listener.computeType,
      compute_id: listener.computeId,
      compute_config: json({ k8s_namespaces: listener.namespaces }),
      version: listener.version,
    })
    // (workspace_id, compute_id) is unique: a concurrent twin loses here, never by a read-then-write.
    .onConflict((oc) => oc.columns(['workspace_id', 'compute_id']).doNothing())
    .returningAll()
    .returning(stateColumn(clock))
    .executeTakeFirst();
  return row ?? null;
}

export async function getListener(
  db: Db,
  workspaceId: string,
  id: string,
  clock?: Clock,
): Promise<ListenerView | undefined> {
  return db
    .selectFrom('listeners')
    .selectAll()
    .select(stateColumn(clock))
    .where('workspace_id', '=', workspaceId)
    .where('id', '=', id)
    .executeTakeFirst();
}

export async function lockListener(
  db: Db,
  workspaceId: string,
  id: string,
  clock?: Clock,
): Promise<ListenerView | undefined> {
  return db
    .selectFrom('listeners')
    .selectAll()
    .select(stateColumn(clock))
    .where('workspace_id', '=', workspaceId)
    .where('id', '=', id)
    .forUpdate()
    .executeTakeFirst();
}

export async function shareLockListener(
  db: Db,
  workspaceId: string,
  id: string,
  clock?: Clock,
): Promise<ListenerView | undefined> {
  return db
    .selectFrom('listeners')
    .selectAll()
    .select(stateColumn(clock))
    .where('workspace_id', '=', workspaceId)
    .where('id', '=', id)
    .forShare()
    .executeTakeFirst();
}

export async function listListeners(
  db: Db,
  workspaceId: string,
  limit: number,
  offset: number,
  clock?: Clock,
): Promise<ListenerView[]> {
  return db
    .selectFrom('listeners')
    .selectAll()
    .select(stateColumn(clock))
    .where('workspace_id', '=', workspaceId)
    .orderBy('created_at', 'desc')
    .orderBy('id', 'desc')
    .limit(limit)
    .offset(offset)
    .execute();
}

export async function updateListener(
  db: Db,
  id: string,
  change: { namespaces?: string[]; version?: string | null },
  clock?: Clock,
): Promise<ListenerView> {
  return db
    .updateTable('listeners')
    .set({
      ...(change.namespaces ? { compute_config: json({ k8s_namespaces: change.namespaces }) } : {}),
      ...(change.version !== undefined ? { version: change.version } : {}),
      updated_at: sqlNow(clock),
    })
    .where('id', '=', id)
    .returningAll()
    .returning(stateColumn(clock))
    .executeTakeFirstOrThrow();
}

export async function deploymentsUsingListener(
  db: Db,
  id: string,
): Promise<{ name: string; k8s_namespace: string | null }[]> {
  return db
    .selectFrom('deployments')
    .select(['name', sql<string | null>`source_config->'listener_config'->>'k8s_namespace'`.as('k8s_namespace')])
    .where('listener_id', '=', id)
    .execute();
}

export async function deleteListener(db: Db, id: string): Promise<void> {
  await db.deleteFrom('listeners').where('id', '=', id).execute();
}

// ----- the listener protocol (docs/listener-protocol.md) ------------------------------------------

/** How stale last_seen_at may be: refreshing it on every desired-state request would be a write per request. */
const SEEN_RESOLUTION_SECONDS = 5;

/** The agent was seen (a desired-state request): last_seen_at moves, at most every few seconds. */
export async function markListenerSeen(db: Db, id: string, clock?: Clock): Promise<void> {
  const now = sqlNow(clock);
  await db
    .updateTable('listeners')
    .set({ last_seen_at: now })
    .where('id', '=', id)
    .where((eb) =>
      eb.or([
        eb('last_seen_at', 'is', null),
        eb('last_seen_at', '<', sql<Date>`${now} - make_interval(secs => ${SEEN_RESOLUTION_SECONDS})`),
      ]),
    )
    .execute();
}

/** A heartbeat: seen now, with what the agent says about itself. updated_at stays (it dates user changes). */
export async function recordListenerHeartbeat(
  db: Db,
  id: string,
  heartbeat: { agentVersion: string; namespaces: string[]; message: string | null; conditionsObservedAt?: Date },
  clock?: Clock,
): Promise<ListenerView> {
  return db
    .updateTable('listeners')
    .set({
      last_seen_at: sqlNow(clock),
      agent_version: heartbeat.agentVersion,
      watched_namespaces: heartbeat.namespaces,
      agent_message: heartbeat.message,
      ...(heartbeat.conditionsObservedAt ? { conditions_observed_at: heartbeat.conditionsObservedAt } : {}),
    })
    .where('id', '=', id)
    .returningAll()
    .returning(stateColumn(clock))
    .executeTakeFirstOrThrow();
}

/**
 * The listener has called at least once, so it may have made something in its cluster. A share lock:
 * its first desired-state request (markListenerSeen, then the read) waits for the caller's commit.
 */
export async function listenerHasBeenSeen(db: Db, id: string): Promise<boolean> {
  const row = await db
    .selectFrom('listeners')
    .select('last_seen_at')
    .where('id', '=', id)
    .forShare()
    .executeTakeFirst();
  return row?.last_seen_at !== null && row?.last_seen_at !== undefined;
}

export type ListenerDeploymentRow = Pick<
  DeploymentRow,
  | 'id'
  | 'workspace_id'
  | 'name'
  | 'status'
  | 'listener_id'
  | 'source_config'
  | 'secret_references'
  | 'latest_revision_id'
  | 'active_revision_id'
>;

type EndpointRevision = Pick<RevisionRow, 'id' | 'number' | 'source_revision_config' | 'secrets'>;

/**
 * An endpoint of a listener's deployment with the revision it is pinned to and its split (another
 * revision taking `weight` percent of its requests), or null.
 */
export interface ListenerEndpointRow {
  name: string;
  served_revision_id: string | null;
  revision: EndpointRevision;
  split: { weight: number; revision: EndpointRevision } | null;
}

export type ListenerRevisionRow = Pick<
  RevisionRow,
  'id' | 'deployment_id' | 'number' | 'status' | 'source_revision_config' | 'snapshot' | 'secrets'
>;

/**
 * Every deployment of the listener, oldest first (a stable order keeps the desired state's ETag
 * stable), and their latest and active revisions. One statement, so one snapshot: a patch that commits
 * meanwhile shows wholly or not at all (two reads could pair the old deployment row with the revisions
 * as the patch left them, its latest one SKIPPED).
 */
export async function listenerDeploymentsWithRevisions(
  db: Db,
  listenerId: string,
): Promise<{
  deployments: (ListenerDeploymentRow & { endpoints: ListenerEndpointRow[] })[];
  revisions: ListenerRevisionRow[];
}> {
  const rows = await db
    .selectFrom('deployments as d')
    .select([
      'd.id',
      'd.workspace_id',
      'd.name',
      'd.status',
      'd.listener_id',
      'd.source_config',
      'd.secret_references',
      'd.latest_revision_id',
      'd.active_revision_id',
    ])
    .select((eb) =>
      jsonArrayFrom(
        eb
          .selectFrom('revisions as r')
          .select([
            'r.id',
            'r.deployment_id',
            'r.number',
            'r.status',
            'r.source_revision_config',
            'r.snapshot',
            'r.secrets',
          ])
          .where((w) =>
            w.or([w('r.id', '=', w.ref('d.latest_revision_id')), w('r.id', '=', w.ref('d.active_revision_id'))]),
          ),
      ).as('revisions'),
    )
    .select((eb) =>
      jsonArrayFrom(
        eb
          .selectFrom('deployment_endpoints as e')
          .innerJoin('revisions as er', 'er.id', 'e.revision_id')
          .leftJoin('revisions as sr', 'sr.id', 'e.split_revision_id')
          .select([
            'e.name',
            'e.served_revision_id',
            'er.id as revision_id',
            'er.number as revision_number',
            'er.source_revision_config as revision_source_revision_config',
            'er.secrets as revision_secrets',
            'e.split_weight',
            'sr.id as split_id',
            'sr.number as split_number',
            'sr.source_revision_config as split_source_revision_config',
            'sr.secrets as split_secrets',
          ])
          .whereRef('e.deployment_id', '=', 'd.id')
          .orderBy('e.name'),
      ).as('endpoints'),
    )
    .where('d.listener_id', '=', listenerId)
    .orderBy('d.created_at')
    .orderBy('d.id')
    .execute();
  const deployments = rows.map(({ endpoints, ...row }) => ({
    ...row,
    endpoints: endpoints.map((e) => ({
      name: e.name,
      served_revision_id: e.served_revision_id,
      revision: {
        id: e.revision_id,
        number: e.revision_number,
        source_revision_config: e.revision_source_revision_config,
        secrets: e.revision_secrets,
      },
      split:
        e.split_id === null || e.split_weight === null
          ? null
          : {
              weight: e.split_weight,
              revision: {
                id: e.split_id,
                number: e.split_number!,
                source_revision_config: e.split_source_revision_config!,
                secrets: e.split_secrets!,
              },
            },
    })),
  }));
  return { deployments, revisions: rows.flatMap((row) => row.revisions) };
}

/** The deployment a revision belongs to, when that deployment runs on this listener. */
export async function findListenerRevision(
  db: Db,
  listenerId: string,
  revisionId: string,
): Promise<{ deployment_id: string; workspace_id: string } | undefined> {
  return db
    .selectFrom('revisions as r')
    .innerJoin('deployments as d', 'd.id', 'r.deployment_id')
    .select(['r.deployment_id', 'd.workspace_id'])
    .where('r.id', '=', revisionId)
    .where('d.listener_id', '=', listenerId)
    .executeTakeFirst();
}

/** The listener of a deployment (null for the local data plane); undefined when the deployment is gone. */
export async function listenerOfDeployment(db: Db, deploymentId: string): Promise<string | null | undefined> {
  const row = await db
    .selectFrom('deployments')
    .select('listener_id')
    .where('id', '=', deploymentId)
    .executeTakeFirst();
  return row === undefined ? undefined : row.listener_id;
}

/** A listener reported the revision DEPLOYED: it serves now. */
