/**
 * Idempotency keys (migrations/010_idempotency_keys.sql; the HTTP side is src/http/idempotency.ts).
 *
 * Glossary:
 * - scope: whose key it is (`workspace:<id>`, or `organization:<id>` for an organization route called
 *   without a workspace); the same key in two scopes is two keys.
 * - fingerprint: SHA-256 of what makes the request (method, path, body); a key is bound to one.
 * - claim: the attempt that runs the request while the key is `running`. Only that attempt may finish
 *   or release the key, so an attempt whose lease was taken over cannot overwrite its successor.
 * - lease (`locked_until`): how long a `running` key stays held by an attempt that never finished (its
 *   replica crashed); after it, a retry with the same request takes the key over.
 *
 * The TTL and the lease are dated and judged by the database's `now()`, or by the `clock` a caller passes
 * (src/store/sql-now.ts): a test moves it to make a key or a lease run out.
 */
import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import type { Clock } from '../clock.ts';
import type { Db } from './schema.ts';
import { sqlNow } from './sql-now.ts';

/** How long a key and its answer are kept (docs/api.md, "Idempotent retries"). */
export const IDEMPOTENCY_KEY_TTL_HOURS = 24;

/**
 * How long a running attempt holds its key before a retry may take it over. Longer than any request
 * takes (the slowest call out, to a code host, gives up after 15 s per try), so that only an attempt
 * that died (a crashed replica) ever loses its key this way.
 */
export const IDEMPOTENCY_LEASE_SECONDS = 120;

export interface StoredResponse {
  status: number;
  headers: Record<string, string>;
  /** Null when the answer held a credential shown once and was not kept. */
  body: string | null;
}

export type KeyState =
  | { kind: 'claimed'; claim: string }
  | { kind: 'done'; fingerprint: Buffer; response: StoredResponse }
  | { kind: 'running'; fingerprint: Buffer }
  /** The key was released between the claim and the read: try again. */
  | { kind: 'gone' };

export interface KeyRef {
  scope: string;
  key: string;
}

/**
 * Claims `key` for a new attempt, or says what holds it. One INSERT ... ON CONFLICT: of any number of
 * concurrent attempts (on any replica) exactly one gets `claimed`. An existing row is taken over only
 * when it expired (older than the TTL: a key is then new again) or when it is a running attempt of the
 * same request whose lease ran out.
 */
export async function claimIdempotencyKey(db: Db, ref: KeyRef, fingerprint: Buffer, clock?: Clock): Promise<KeyState> {
  const claim = randomUUID();
  const now = sqlNow(clock);
  const won = await sql<{ claim: string }>`
    insert into idempotency_keys (scope, idempotency_key, fingerprint, state, claim, locked_until, created_at)
    values (${ref.scope}, ${ref.key}, ${fingerprint}, 'running', ${claim}, ${now} + make_interval(secs => ${IDEMPOTENCY_LEASE_SECONDS}), ${now})
    on conflict (scope, idempotency_key) do update
      set fingerprint = excluded.fingerprint, state = 'running', claim = excluded.claim, locked_until = excluded.locked_until,
          response_status = null, response_headers = null, response_body = null, created_at = excluded.created_at
      where idempotency_keys.created_at < ${now} - make_interval(hours => ${IDEMPOTENCY_KEY_TTL_HOURS})
         or (idempotency_keys.state = 'running' and idempotency_keys.locked_until < ${now} and idempotency_keys.fingerprint = excluded.fingerprint)
    returning claim`.execute(db);
  if (won.rows[0]?.claim === claim) return { kind: 'claimed', claim };
  const row = await db
    .selectFrom('idempotency_keys')
    .select(['fingerprint', 'state', 'response_status', 'response_headers', 'response_body'])
    .where('scope', '=', ref.scope)
    .where('idempotency_key', '=', ref.key)
    .executeTakeFirst();
  if (!row) return { kind: 'gone' };
  if (row.state === 'running') return { kind: 'running', fingerprint: row.fingerprint };
  return {
    kind: 'done',
    fingerprint: row.fingerprint,
    response: { status: row.response_status!, headers: row.response_headers ?? {}, body: row.response_body },
  };
}

/** Keeps the answer of the attempt that holds `claim`; false when it no longer holds the key. */
export async function completeIdempotencyKey(
  db: Db,
  ref: KeyRef,
  claim: string,
  response: StoredResponse,
  clock?: Clock,
): Promise<boolean> {
  const result = await db
    .updateTable('idempotency_keys')
    .set({
      state: 'done',
      response_status: response.status,
      response_headers: JSON.stringify(response.headers),
      response_body: response.body,
      locked_until: sqlNow(clock),
    })
    .where('scope', '=', ref.scope)
    .where('idempotency_key', '=', ref.key)
    .where('claim', '=', claim)
    .where('state', '=', 'running')
    .executeTakeFirst();
  return result.numUpdatedRows > 0n;
}

/** Frees the key of an attempt that did no work (an error answer), so that a retry runs afresh. */
export async function releaseIdempotencyKey(db: Db, ref: KeyRef, claim: string): Promise<void> {
  await db
    .deleteFrom('idempotency_keys')
    .where('scope', '=', ref.scope)
    .where('idempotency_key', '=', ref.key)
    .where('claim', '=', claim)
    .where('state', '=', 'running')
    .execute();
}

/** Deletes up to `batch` keys past the TTL; how many went (src/pipeline/retention.ts). */
export async function pruneIdempotencyKeys(db: Db, batch: number, clock?: Clock): Promise<number> {
  const result = await sql`
    delete from idempotency_keys where (scope, idempotency_key) in (
      select scope, idempotency_key from idempotency_keys
      where created_at < ${sqlNow(clock)} - make_interval(hours => ${IDEMPOTENCY_KEY_TTL_HOURS})
      order by created_at limit ${batch}
      for update skip locked)`.execute(db);
  return Number(result.numAffectedRows ?? 0n);
}
