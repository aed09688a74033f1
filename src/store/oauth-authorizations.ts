/**
 * Authorizations in progress (POST /v2/auth/authenticate until its callback). A row is found by the
 * SHA-256 of its `state`; the callback claims it with one conditional update, so a state works once.
 * Their ages and expiry go by the database's `now()`, or by the `clock` a caller passes
 * (src/store/sql-now.ts): a test moves it to make an authorization expire.
 */
import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import type { Clock } from '../clock.ts';
import { json, type Db, type OAuthAuthorizationRow } from './schema.ts';
import { sqlNow } from './sql-now.ts';

export interface NewAuthorization {
  workspaceId: string;
  providerId: string;
  agentId: string | null;
  stateHash: Buffer;
  codeVerifierSealed: string | null;
  nonce: string | null;
  redirectUri: string;
  scopes: string[];
  createdBy: string;
  ttlSeconds: number;
}

/** An authorization with its provider's slug (the callback path must name the same provider). */
export interface AuthorizationView extends OAuthAuthorizationRow {
  provider_slug: string;
  /** Whether `expires_at` has passed, by the database clock (or the caller's). */
  expired: boolean;
}

export async function insertAuthorization(db: Db, a: NewAuthorization, clock?: Clock): Promise<OAuthAuthorizationRow> {
  const now = sqlNow(clock);
  return db
    .insertInto('oauth_authorizations')
    .values({
      id: randomUUID(),
      workspace_id: a.workspaceId,
      provider_id: a.providerId,
      agent_id: a.agentId,
      state_hash: a.stateHash,
      code_verifier_encrypted: a.codeVerifierSealed,
      nonce: a.nonce,
      redirect_uri: a.redirectUri,
      scopes: json(a.scopes),
      status: 'pending',
      created_by: a.createdBy,
      created_at: now,
      expires_at: sql<Date>`${now} + make_interval(secs => ${a.ttlSeconds})`,
    })
    .returningAll()
    .executeTakeFirstOrThrow();
}

function views(db: Db, clock: Clock | undefined) {
  return db
    .selectFrom('oauth_authorizations as a')
    .innerJoin('oauth_providers as p', 'p.id', 'a.provider_id')
    .selectAll('a')
    .select(['p.provider_id as provider_slug', sql<boolean>`a.expires_at <= ${sqlNow(clock)}`.as('expired')]);
}

export async function findAuthorizationByState(
  db: Db,
  stateHash: Buffer,
  clock?: Clock,
): Promise<AuthorizationView | undefined> {
  return views(db, clock).where('a.state_hash', '=', stateHash).executeTakeFirst();
}

export async function getAuthorization(
  db: Db,
  workspaceId: string,
  id: string,
  clock?: Clock,
): Promise<AuthorizationView | undefined> {
  return views(db, clock).where('a.workspace_id', '=', workspaceId).where('a.id', '=', id).executeTakeFirst();
}

/** Moves a pending, unexpired authorization to `exchanging`; false when another callback got it first. */
export async function claimAuthorization(db: Db, id: string, clock?: Clock): Promise<boolean> {
  const result = await db
    .updateTable('oauth_authorizations')
    .set({ status: 'exchanging' })
    .where('id', '=', id)
    .where('status', '=', 'pending')
    .where('expires_at', '>', sqlNow(clock))
    .executeTakeFirst();
  return result.numUpdatedRows > 0n;
}

/** Ends the flow; the PKCE verifier is no longer needed and is dropped either way. */
export async function finishAuthorization(
  db: Db,
  id: string,
  outcome:
    | { status: 'completed'; tokenId: string; connectionId: string | null }
    | { status: 'failed'; reason: string; message: string },
): Promise<void> {
  await db
    .updateTable('oauth_authorizations')
    .set({
      status: outcome.status,
      code_verifier_encrypted: null,
      finished_at: sql<Date>`now()`,
      ...(outcome.status === 'completed'
        ? { oauth_token_id: outcome.tokenId, agent_connection_id: outcome.connectionId }
        : { failure_reason: outcome.reason, failure_message: outcome.message }),
    })
    .where('id', '=', id)
    .execute();
}

/** Status of a flow, cheap enough for the long-poll loop. */
export async function authorizationStatus(db: Db, id: string, clock?: Clock) {
  return db
    .selectFrom('oauth_authorizations')
    .select([
      'status',
      'failure_reason',
      'failure_message',
      'oauth_token_id',
      'agent_connection_id',
      sql<boolean>`expires_at <= ${sqlNow(clock)}`.as('expired'),
    ])
    .where('id', '=', id)
    .executeTakeFirst();
}

/** Housekeeping: finished or abandoned flows are kept a day for `wait` and for support, then dropped. */
export async function deleteOldAuthorizations(db: Db, clock?: Clock): Promise<void> {
  const now = sqlNow(clock);
  await db
    .deleteFrom('oauth_authorizations')
    .where('created_at', '<', sql<Date>`${now} - interval '1 day'`)
    .execute();
  // An abandoned flow's verifier is useless once the flow expired; it is not kept for that day.
  await db
    .updateTable('oauth_authorizations')
    .set({ code_verifier_encrypted: null })
    .where('expires_at', '<', now)
    .where('code_verifier_encrypted', 'is not', null)
    .execute();
}
