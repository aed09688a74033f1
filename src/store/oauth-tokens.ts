/**
 * OAuth tokens of a workspace, with their values sealed. Only the token service
 * (src/service/oauth-tokens.ts) opens the sealed columns; everything else reads the other fields.
 */
import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import { json, type Db, type OAuthTokenRow } from './schema.ts';

export interface NewToken {
  workspaceId: string;
  providerId: string;
  accessTokenSealed: string;
  refreshTokenSealed: string | null;
  tokenType: string;
  issuer: string;
  expiresAt: Date | null;
  scopes: string[];
  accountLabel: string | null;
  subject: string | null;
  createdBy: string;
}

/** A token with its provider's slug, as lists and connections show it. */
export interface TokenView extends OAuthTokenRow {
  provider_slug: string;
}

export async function insertToken(db: Db, token: NewToken): Promise<OAuthTokenRow> {
  return db
    .insertInto('oauth_tokens')
    .values({
      id: randomUUID(),
      workspace_id: token.workspaceId,
      provider_id: token.providerId,
      access_token_encrypted: token.accessTokenSealed,
      refresh_token_encrypted: token.refreshTokenSealed,
      token_type: token.tokenType,
      issuer: token.issuer,
      expires_at: token.expiresAt,
      scopes: json(token.scopes),
      status: 'active',
      provider_account_label: token.accountLabel,
      provider_subject: token.subject,
      created_by: token.createdBy,
    })
    .returningAll()
    .executeTakeFirstOrThrow();
}

function withSlug(db: Db) {
  return db
    .selectFrom('oauth_tokens')
    .innerJoin('oauth_providers', 'oauth_providers.id', 'oauth_tokens.provider_id')
    .selectAll('oauth_tokens')
    .select('oauth_providers.provider_id as provider_slug');
}

export async function listTokens(db: Db, workspaceId: string, limit: number, offset: number): Promise<TokenView[]> {
  return withSlug(db)
    .where('oauth_tokens.workspace_id', '=', workspaceId)
    .orderBy('oauth_tokens.created_at', 'desc')
    .orderBy('oauth_tokens.id', 'desc')
    .limit(limit)
    .offset(offset)
    .execute();
}

export async function getToken(db: Db, workspaceId: string, id: string): Promise<TokenView | undefined> {
  return withSlug(db)
    .where('oauth_tokens.workspace_id', '=', workspaceId)
    .where('oauth_tokens.id', '=', id)
    .executeTakeFirst();
}

/** The token as stored (its sealed values included), for the token service. */
export async function readToken(db: Db, workspaceId: string, id: string): Promise<OAuthTokenRow | undefined> {
  return db
    .selectFrom('oauth_tokens')
    .selectAll()
    .where('workspace_id', '=', workspaceId)
    .where('id', '=', id)
    .executeTakeFirst();
}

/**
 * Claims the token for one call to its provider (a refresh or a revocation), in one conditional update:
 * of concurrent claimants, on any replica, one gets the row and the others undefined, until the holder
 * stores its result or releases the claim, or `ttlSeconds` pass (a crashed holder). Nothing waits here:
 * no transaction or row lock is held while the provider answers.
 */
export async function claimToken(
  db: Db,
  workspaceId: string,
  id: string,
  claimId: string,
  ttlSeconds: number,
): Promise<OAuthTokenRow | undefined> {
  return db
    .updateTable('oauth_tokens')
    .set({ claim_id: claimId, claim_expires_at: sql<Date>`now() + make_interval(secs => ${ttlSeconds})` })
    .where('workspace_id', '=', workspaceId)
    .where('id', '=', id)
    .where((eb) => eb.or([eb('claim_id', 'is', null), eb('claim_expires_at', '<=', sql<Date>`now()`)]))
    .returningAll()
    .executeTakeFirst();
}

/** Gives a claim back without a change (the provider failed, or there was nothing to do). */
export async function releaseClaim(db: Db, id: string, claimId: string): Promise<void> {
  await db
    .updateTable('oauth_tokens')
    .set({ claim_id: null, claim_expires_at: null })
    .where('id', '=', id)
    .where('claim_id', '=', claimId)
    .execute();
}

/** Active tokens a caller obtained from a provider, newest first: candidates for reuse by a new authentication. */
export async function activeTokensOf(
  db: Db,
  workspaceId: string,
  providerId: string,
  createdBy: string,
): Promise<OAuthTokenRow[]> {
  return db
    .selectFrom('oauth_tokens')
    .selectAll()
    .where('workspace_id', '=', workspaceId)
    .where('provider_id', '=', providerId)
    .where('created_by', '=', createdBy)
    .where('status', '=', 'active')
    .orderBy('created_at', 'desc')
    .limit(20)
    .execute();
}

/**
 * Stores a refresh's result and gives the claim back, if the claim is still this one (compare and set):
 * undefined when it lapsed and another took over, whose result then stands.
 */
export async function storeRefreshedToken(
  db: Db,
  id: string,
  claimId: string,
  token: {
    accessTokenSealed: string;
    refreshTokenSealed: string | null;
    tokenType: string;
    expiresAt: Date | null;
    scopes: string[];
  },
): Promise<OAuthTokenRow | undefined> {
  return db
    .updateTable('oauth_tokens')
    .set({
      access_token_encrypted: token.accessTokenSealed,
      refresh_token_encrypted: token.refreshTokenSealed,
      token_type: token.tokenType,
      expires_at: token.expiresAt,
      scopes: json(token.scopes),
      status: 'active',
      status_message: null,
      refreshed_at: sql<Date>`now()`,
      updated_at: sql<Date>`now()`,
      claim_id: null,
      claim_expires_at: null,
    })
    .where('id', '=', id)
    .where('claim_id', '=', claimId)
    .returningAll()
    .executeTakeFirst();
}

/**
 * Marks an active token refresh_failed, if it still is the row that was read: under the caller's claim,
 * or (`claimId` null, no provider call) while its access token and refresh token are still the ones
 * read. False when something else changed it first.
 */
export async function markTokenRefreshFailed(
  db: Db,
  read: OAuthTokenRow,
  claimId: string | null,
  message: string,
): Promise<boolean> {
  const failed = { status: 'refresh_failed' as const, status_message: message, updated_at: sql<Date>`now()` };
  const query =
    claimId !== null
      ? // The claim is given back with the result.
        db
          .updateTable('oauth_tokens')
          .set({ ...failed, claim_id: null, claim_expires_at: null })
          .where('claim_id', '=', claimId)
      : // Another's claim (a revocation under way) is left alone.
        db
          .updateTable('oauth_tokens')
          .set(failed)
          .where('access_token_encrypted', '=', read.access_token_encrypted)
          .where('refresh_token_encrypted', 'is not distinct from', read.refresh_token_encrypted);
  const result = await query.where('id', '=', read.id).where('status', '=', 'active').executeTakeFirst();
  return result.numUpdatedRows > 0n;
}

/** Deletes the token under the caller's claim; false when the claim lapsed (or the token is gone). */
export async function deleteClaimedToken(db: Db, id: string, claimId: string): Promise<boolean> {
  const result = await db
    .deleteFrom('oauth_tokens')
    .where('id', '=', id)
    .where('claim_id', '=', claimId)
    .executeTakeFirst();
  return result.numDeletedRows > 0n;
}
