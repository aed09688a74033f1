/**
 * When another revision serves a deployment's own URL in place of one, the replaced revision's instances
 * are told so through the deployment's database, at the moment of the switch, before the requests they
 * are still serving drain: `NOTIFY slipway_replaced, '<replaced revision id>'` (docs/data-plane.md,
 * "When a revision replaces another"). The LangGraph launcher's instances then take no more runs from
 * the queue they share with the new revision's (runtime/langgraph/instance.mjs); any app may LISTEN for it.
 *
 * A notification is not kept: an instance not listening at that moment is not told, and goes on until
 * it is stopped (SIGTERM) after the drain, as it would without this.
 */
import pg from 'pg';
import { quietClient } from '../db/admin-client.ts';

/** The channel; the payload is the replaced revision's id. */
export const REPLACED_CHANNEL = 'slipway_replaced';

/** How long the connection and the statement may take: the drain goes on meanwhile. */
const TELL_TIMEOUT_MS = 10_000;

/** Sends the notification as the app's own role (one of its connections, for a moment). */
export async function tellReplaced(databaseUrl: string, revisionId: string): Promise<void> {
  const client = quietClient(
    new pg.Client({
      connectionString: databaseUrl,
      connectionTimeoutMillis: TELL_TIMEOUT_MS,
      statement_timeout: TELL_TIMEOUT_MS,
    }),
  );
  try {
    await client.connect();
    await client.query('select pg_notify($1, $2)', [REPLACED_CHANNEL, revisionId]);
  } finally {
    await client.end().catch(() => undefined);
  }
}
