/**
 * Webhook deliveries received by code-host integrations, with their outcome. Rejected deliveries are
 * kept apart from the others, each group under its own cap (see REJECTED_DELIVERIES_KEPT).
 *
 * A delivery id builds once per integration: the unique index `codehost_webhook_deliveries_once` (migrations/003_codehost.sql)
 * covers the outcome `revision_created`, so claiming a delivery is an insert that a redelivery, even a
 * concurrent one, cannot repeat. A claim that ends up building nothing is settled to another outcome and
 * leaves the index, so that delivery may be redelivered after the user fixed the deployment.
 */
import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import { json, type Db, type WebhookDeliveryOutcome, type WebhookDeliveryRow } from './schema.ts';

/** Deliveries kept per integration, rejected ones aside; older ones are pruned as new ones arrive. */
export const DELIVERIES_KEPT = 500;
/**
 * Rejected deliveries kept per integration, under a cap of their own: anyone who knows a webhook URL
 * can send unsigned deliveries, and counted with the others they would push the real ones out.
 */
export const REJECTED_DELIVERIES_KEPT = 100;

export interface DeliveryFacts {
  integrationId: string;
  workspaceId: string;
  deliveryId: string | null;
  event: string | null;
  repository?: string | null;
  ref?: string | null;
  commitSha?: string | null;
}

export interface DeliveryResult {
  outcome: WebhookDeliveryOutcome;
  reason: string;
  message: string;
  revisionIds?: string[];
}

function values(facts: DeliveryFacts, result: DeliveryResult) {
  return {
    id: randomUUID(),
    integration_id: facts.integrationId,
    workspace_id: facts.workspaceId,
    delivery_id: facts.deliveryId,
    event: facts.event,
    outcome: result.outcome,
    reason: result.reason,
    message: result.message,
    repository: facts.repository ?? null,
    ref: facts.ref ?? null,
    commit_sha: facts.commitSha ?? null,
    revision_ids: json(result.revisionIds ?? []),
  };
}

/** Keeps the newest of one group, rejected deliveries or the others, within that group's cap. */
async function prune(db: Db, integrationId: string, rejected: boolean): Promise<void> {
  const group = rejected ? sql<boolean>`outcome = 'rejected'` : sql<boolean>`outcome <> 'rejected'`;
  await db
    .deleteFrom('codehost_webhook_deliveries')
    .where('integration_id', '=', integrationId)
    .where(group)
    .where('id', 'not in', (eb) =>
      eb
        .selectFrom('codehost_webhook_deliveries')
        .select('id')
        .where('integration_id', '=', integrationId)
        .where(group)
        .orderBy('received_at', 'desc')
        .orderBy('id', 'desc')
        .limit(rejected ? REJECTED_DELIVERIES_KEPT : DELIVERIES_KEPT),
    )
    .execute();
}

/** Records a delivery that was not processed (rejected, or a duplicate). */
export async function recordDelivery(
  db: Db,
  facts: DeliveryFacts,
  result: DeliveryResult,
): Promise<WebhookDeliveryRow> {
  const row = await db
    .insertInto('codehost_webhook_deliveries')
    .values(values(facts, result))
    .returningAll()
    .executeTakeFirstOrThrow();
  await prune(db, facts.integrationId, result.outcome === 'rejected');
  return row;
}

/**
 * Claims a delivery id for processing: `result` must have the outcome `revision_created` (the one the
 * unique index covers) until the caller settles it. Returns null when the id already built; a concurrent
 * claim of the same id waits here until the first one's transaction ends, and then gets null if that
 * one built.
 */
export async function claimDelivery(
  db: Db,
  facts: DeliveryFacts & { deliveryId: string },
  result: DeliveryResult,
): Promise<string | null> {
  const row = await db
    .insertInto('codehost_webhook_deliveries')
    .values(values(facts, result))
    // The predicate repeats the index's, literally, so PostgreSQL can infer the partial index.
    .onConflict((oc) =>
      oc
        .columns(['integration_id', 'delivery_id'])
        .where(sql<boolean>`outcome = 'revision_created'`)
        .doNothing(),
    )
    .returning('id')
    .executeTakeFirst();
  if (row === undefined) return null;
  await prune(db, facts.integrationId, false);
  return row.id;
}

/** Settles a claimed delivery with its final outcome (a claim settled as rejected joins that group). */
export async function settleDelivery(db: Db, id: string, result: DeliveryResult): Promise<WebhookDeliveryRow> {
  const row = await db
    .updateTable('codehost_webhook_deliveries')
    .set({
      outcome: result.outcome,
      reason: result.reason,
      message: result.message,
      revision_ids: json(result.revisionIds ?? []),
    })
    .where('id', '=', id)
    .returningAll()
    .executeTakeFirstOrThrow();
  if (result.outcome === 'rejected') await prune(db, row.integration_id, true);
  return row;
}

/** The delivery of that id that built, for the message of a duplicate. */
export async function findProcessedDelivery(
  db: Db,
  integrationId: string,
  deliveryId: string,
): Promise<WebhookDeliveryRow | undefined> {
  return db
    .selectFrom('codehost_webhook_deliveries')
    .selectAll()
    .where('integration_id', '=', integrationId)
    .where('delivery_id', '=', deliveryId)
    .where('outcome', '=', 'revision_created')
    .executeTakeFirst();
}

export async function listDeliveries(
  db: Db,
  integrationId: string,
  limit: number,
  offset: number,
): Promise<WebhookDeliveryRow[]> {
  return db
    .selectFrom('codehost_webhook_deliveries')
    .selectAll()
    .where('integration_id', '=', integrationId)
    .orderBy('received_at', 'desc')
    .orderBy('id', 'desc')
    .limit(limit)
    .offset(offset)
    .execute();
}
