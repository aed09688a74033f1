/**
 * OAuth tokens once obtained: handing out a fresh access token (refreshing before expiry), revoking at
 * the provider, and the mapping of OAuth client failures to the service's errors.
 *
 * Token states: `active`, or `refresh_failed` when the provider refused the refresh token (RFC 6749
 * `invalid_grant`: revoked, expired, or rotated elsewhere), or the access token expired and no refresh
 * token was issued. Only a new authorization helps then. A refresh that fails for a passing reason
 * (provider unreachable, 5xx) or a configuration problem leaves the token `active`, so fixing the
 * provider or retrying later works.
 */
import type { Kysely } from 'kysely';
import type { SecretBox } from '../crypto/secret-box.ts';
import { AppError, notFound } from '../errors.ts';
import type { OAuthClient, OAuthTokenSet } from '../oauth/oauth-client.ts';
import { OAuthFlowError } from '../oauth/oauth-flow-error.ts';
import { recordEvents } from '../store/events.ts';
import { getProviderById } from '../store/oauth-providers.ts';
import { deleteToken, lockToken, setTokenStatus, storeRefreshedToken } from '../store/oauth-tokens.ts';
import type { Database, Db, OAuthProviderRow, OAuthTokenRow } from '../store/schema.ts';
import type { OAuthProviderService } from './oauth-providers.ts';

/** An access token is refreshed when it has less than this left, so the agent never gets one about to die. */
export const REFRESH_MARGIN_MS = 60_000;

/** Suggested mapping (issue 4): the person's or the configuration's fault is 400; the provider's is 502/503. */
export function flowErrorToAppError(err: OAuthFlowError, prefix = ''): AppError {
  const detail = `${prefix}${err.message}`;
  switch (err.reason) {
    case 'configuration':
    case 'state_mismatch':
    case 'invalid_grant':
      return new AppError('invalid_request', detail);
    case 'provider_error':
      // An error in the authorization response itself (access_denied...) is the person's or the
      // request's answer, not a failing provider: no HTTP status, only the OAuth error code.
      return new AppError(err.status === undefined && err.oauthError !== undefined ? 'invalid_request' : 'bad_gateway', detail);
    case 'invalid_response':
      return new AppError('bad_gateway', detail);
    case 'unreachable':
      return new AppError('unavailable', detail);
  }
}

/** The HTTP status the callback page answers a failed flow with, by the same mapping. */
export function flowErrorStatus(err: OAuthFlowError): number {
  return flowErrorToAppError(err).status;
}

/** A short name for the account the token acts as, from the ID token or userinfo claims. */
export function accountLabel(claims: Readonly<Record<string, unknown>> | null): string | null {
  if (!claims) return null;
  for (const claim of ['email', 'preferred_username', 'name', 'login', 'sub']) {
    const value = claims[claim];
    if (typeof value === 'string' && value.trim() !== '') return value.trim().slice(0, 256);
  }
  return null;
}

/** Whether a stored token serves a request for `scopes` without a new authorization. */
export function isUsable(token: OAuthTokenRow, scopes: readonly string[], now: number): boolean {
  if (token.status !== 'active') return false;
  if (!scopes.every((scope) => token.scopes.includes(scope))) return false;
  const fresh = token.expires_at === null || token.expires_at.getTime() - now > REFRESH_MARGIN_MS;
  return fresh || token.refresh_token_encrypted !== null;
}

/** The part of the logger the OAuth services use (pino's and Fastify's loggers both fit). */
export interface WarnLogger {
  warn(details: Record<string, unknown>, message: string): void;
}

export interface AccessToken {
  accessToken: string;
  tokenType: string;
  expiresAt: Date | null;
  scopes: string[];
}

export interface OAuthTokenServiceDeps {
  db: Kysely<Database>;
  secretBox: SecretBox;
  client: OAuthClient;
  providers: OAuthProviderService;
  logger: WarnLogger;
  now?: () => number;
}

type RefreshOutcome = { kind: 'ok'; row: OAuthTokenRow } | { kind: 'unusable'; message: string };

export function createOAuthTokenService({ db, secretBox, client, providers, logger, now = Date.now }: OAuthTokenServiceDeps) {
  async function providerOf(tx: Db, token: OAuthTokenRow): Promise<OAuthProviderRow> {
    const provider = await getProviderById(tx, token.provider_id);
    // The foreign key keeps a provider while it has tokens.
    if (!provider) throw new Error(`The provider of OAuth token ${token.id} is missing`);
    return provider;
  }

  async function markRefreshFailed(tx: Db, token: OAuthTokenRow, message: string): Promise<RefreshOutcome> {
    await setTokenStatus(tx, token.id, 'refresh_failed', message);
    await recordEvents(tx, [{ workspaceId: token.workspace_id, subjectType: 'oauth_token', subjectId: token.id, type: 'oauth_token.refresh_failed', fromStatus: token.status, toStatus: 'refresh_failed', data: { message } }]);
    logger.warn({ oauth_token_id: token.id, reason: message }, 'OAuth token refresh failed; the token needs a new authorization');
    return { kind: 'unusable', message };
  }

  /** Under the row lock, so that concurrent callers refresh once and all see the result. */
  async function refreshIfNeeded(tx: Db, token: OAuthTokenRow): Promise<RefreshOutcome> {
    if (token.status !== 'active') return { kind: 'unusable', message: token.status_message ?? 'its last refresh failed' };
    const remaining = token.expires_at === null ? Infinity : token.expires_at.getTime() - now();
    if (remaining > REFRESH_MARGIN_MS) return { kind: 'ok', row: token };
    if (token.refresh_token_encrypted === null) {
      // Still valid for a moment: hand it out rather than fail early.
      if (remaining > 0) return { kind: 'ok', row: token };
      return markRefreshFailed(tx, token, 'The access token expired and the provider issued no refresh token');
    }
    const provider = await providerOf(tx, token);
    let refreshed: OAuthTokenSet;
    try {
      refreshed = await client.refresh(providers.config(provider), secretBox.open(token.refresh_token_encrypted), { issuer: token.issuer, scopes: token.scopes });
    } catch (err) {
      if (err instanceof OAuthFlowError && err.reason === 'invalid_grant') return markRefreshFailed(tx, token, err.message);
      if (err instanceof OAuthFlowError) throw flowErrorToAppError(err, 'Refreshing the OAuth token failed: ');
      throw err;
    }
    const row = await storeRefreshedToken(tx, token.id, {
      accessTokenSealed: secretBox.seal(refreshed.accessToken),
      refreshTokenSealed: refreshed.refreshToken === null ? null : secretBox.seal(refreshed.refreshToken),
      tokenType: refreshed.tokenType,
      expiresAt: refreshed.expiresAt,
      scopes: refreshed.scopes,
    });
    await recordEvents(tx, [{ workspaceId: token.workspace_id, subjectType: 'oauth_token', subjectId: token.id, type: 'oauth_token.refreshed', data: { expires_at: refreshed.expiresAt?.toISOString() ?? null } }]);
    return { kind: 'ok', row };
  }

  return {
    /**
     * A usable access token of the workspace's token `tokenId`, refreshed first when it is expired or
     * about to. 409 when the token needs a new authorization; 502/503 when the provider fails.
     */
    async accessToken(workspaceId: string, tokenId: string): Promise<AccessToken> {
      const outcome = await db.transaction().execute(async (tx) => {
        const token = await lockToken(tx, workspaceId, tokenId);
        if (!token) throw notFound('OAuth token', tokenId);
        return refreshIfNeeded(tx, token);
      });
      if (outcome.kind === 'unusable') {
        throw new AppError('conflict', `OAuth token ID ${tokenId} cannot be used (refresh_failed: ${outcome.message}); a person must authorize again with POST /v2/auth/authenticate.`);
      }
      const row = outcome.row;
      return { accessToken: secretBox.open(row.access_token_encrypted), tokenType: row.token_type, expiresAt: row.expires_at, scopes: row.scopes };
    },

    /**
     * Revokes the token at the provider (RFC 7009, when the provider has a revocation endpoint), then
     * forgets it and its agent connections. A failed revocation keeps the token unless `force`.
     */
    async revoke(workspaceId: string, tokenId: string, options: { force: boolean; byKey: string }): Promise<{ revokedAtProvider: boolean }> {
      return db.transaction().execute(async (tx) => {
        const token = await lockToken(tx, workspaceId, tokenId);
        if (!token) throw notFound('OAuth token', tokenId);
        const provider = await providerOf(tx, token);
        let revokedAtProvider = false;
        try {
          const config = providers.config(provider);
          // The refresh token first: revoking it ends the grant, and with it the access tokens, at most providers.
          if (token.refresh_token_encrypted !== null) {
            revokedAtProvider = await client.revoke(config, secretBox.open(token.refresh_token_encrypted), { tokenTypeHint: 'refresh_token' });
          }
          revokedAtProvider = (await client.revoke(config, secretBox.open(token.access_token_encrypted), { tokenTypeHint: 'access_token' })) || revokedAtProvider;
        } catch (err) {
          if (!(err instanceof OAuthFlowError)) throw err;
          if (!options.force) {
            throw flowErrorToAppError(err, 'Revoking the token at the provider failed, so it was kept (retry, or pass force=true to forget it without revoking): ');
          }
          // force: the user chose to forget the token anyway; the failure is recorded in the event below.
          logger.warn({ oauth_token_id: token.id, reason: err.reason }, 'revocation at the provider failed; token forgotten (force)');
        }
        await deleteToken(tx, token.id);
        await recordEvents(tx, [{ workspaceId, subjectType: 'oauth_token', subjectId: token.id, type: 'oauth_token.deleted', fromStatus: token.status, data: { revoked_at_provider: revokedAtProvider, forced: options.force, by_key: options.byKey } }]);
        return { revokedAtProvider };
      });
    },
  };
}

export type OAuthTokenService = ReturnType<typeof createOAuthTokenService>;
