/**
 * OAuth tokens of a workspace, with their values sealed. Only the token service
 * (src/service/oauth-tokens.ts) opens the sealed columns; everything else reads the other fields.
 */
import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import { json, type Db, type OAuthTokenRow, type OAuthTokenStatus } from './schema.ts';

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
  return db.selectFrom('oauth_tokens').innerJoin('oauth_providers', 'oauth_providers.id', 'oauth_tokens.provider_id').selectAll('oauth_tokens').select('oauth_providers.provider_id as provider_slug');
}

export async function listTokens(db: Db, workspaceId: string, limit: number, offset: number): Promise<TokenView[]> {
  return withSlug(db).where('oauth_tokens.workspace_id', '=', workspaceId).orderBy('oauth_tokens.created_at', 'desc').orderBy('oauth_tokens.id', 'desc').limit(limit).offset(offset).execute();
}

export async function getToken(db: Db, workspaceId: string, id: string): Promise<TokenView | undefined> {
  return withSlug(db).where('oauth_tokens.workspace_id', '=', workspaceId).where('oauth_tokens.id', '=', id).executeTakeFirst();
}

/** Locks the row so that one refresh (or revocation) at a time runs per token. */
export async function lockToken(db: Db, workspaceId: string, id: string): Promise<OAuthTokenRow | undefined> {
  return db.selectFrom('oauth_tokens').selectAll().where('workspace_id', '=', workspaceId).where('id', '=', id).forUpdate().executeTakeFirst();
}

/** Active tokens a caller obtained from a provider, newest first: candidates for reuse by a new authentication. */
export async function activeTokensOf(db: Db, workspaceId: string, providerId: string, createdBy: string): Promise<OAuthTokenRow[]> {
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

export async function storeRefreshedToken(
  db: Db,
  id: string,
  token: { accessTokenSealed: string; refreshTokenSealed: string | null; tokenType: string; expiresAt: Date | null; scopes: string[] },
): Promise<OAuthTokenRow> {
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
    })
    .where('id', '=', id)
    .returningAll()
    .executeTakeFirstOrThrow();
}

export async function setTokenStatus(db: Db, id: string, status: OAuthTokenStatus, message: string | null): Promise<void> {
  await db.updateTable('oauth_tokens').set({ status, status_message: message, updated_at: sql<Date>`now()` }).where('id', '=', id).execute();
}

export async function deleteToken(db: Db, id: string): Promise<void> {
  await db.deleteFrom('oauth_tokens').where('id', '=', id).execute();
}
