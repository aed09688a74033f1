/** The response shape of a webhook delivery record, shared by the webhook and the deliveries list. */
import { Type, type Static } from 'typebox';
import { DateTime, Nullable, StringEnum, Uuid } from '../http/schema-helpers.ts';
import type { WebhookDeliveryRow } from '../store/schema.ts';

export const Delivery = Type.Object(
  {
    id: Uuid(),
    delivery_id: Nullable(Type.String({ description: 'X-GitHub-Delivery as sent.' })),
    event: Nullable(Type.String({ description: 'X-GitHub-Event as sent.' })),
    outcome: StringEnum(['revision_created', 'ignored', 'duplicate', 'rejected'] as const),
    reason: Type.String({
      description:
        'Machine-readable: push, ping, tag, branch_deleted, branch_not_tracked, build_on_push_off, ' +
        'commit_already_built, redelivery, signature_mismatch, unknown_repository...',
    }),
    message: Type.String(),
    repository: Nullable(Type.String({ description: 'owner/name of a push.' })),
    ref: Nullable(Type.String()),
    commit_sha: Nullable(Type.String()),
    revision_ids: Type.Array(Uuid(), { description: 'Revisions this delivery created.' }),
    received_at: DateTime(),
  },
  { title: 'WebhookDelivery', description: 'A webhook delivery and what came of it.' },
);

export function deliveryResponse(row: WebhookDeliveryRow): Static<typeof Delivery> {
  return {
    id: row.id,
    delivery_id: row.delivery_id,
    event: row.event,
    outcome: row.outcome,
    reason: row.reason,
    message: row.message,
    repository: row.repository,
    ref: row.ref,
    commit_sha: row.commit_sha,
    revision_ids: row.revision_ids,
    received_at: row.received_at.toISOString(),
  };
}
