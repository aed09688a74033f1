/**
 * A token brought to a usable or a final state (src/service/oauth-tokens.ts): refreshed at its provider
 * under the token's claim, or marked refresh_failed, or waited for while another request refreshes it.
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { AppError, notFound } from '../errors.ts';
import type { OAuthTokenSet } from '../oauth/oauth-client.ts';
import { OAuthFlowError } from '../oauth/oauth-flow-error.ts';
import { recordEvents } from '../store/events.ts';
import { getProviderById } from '../store/oauth-providers.ts';
import {
  claimToken,
  markTokenRefreshFailed,
  readToken,
  releaseClaim,
  storeRefreshedToken,
} from '../store/oauth-tokens.ts';
import type { OAuthProviderRow, OAuthTokenRow } from '../store/schema.ts';
import { flowErrorToAppError, REFRESH_MARGIN_MS, type OAuthTokenServiceDeps } from './oauth-token-rules.ts';
import { systemClock } from '../clock.ts';

/** What a token is good for right now, from its row alone. */
export type TokenState =
  | { kind: 'usable' }
  | { kind: 'unusable'; message: string }
  /** Expired, and no refresh token to get another: it becomes refresh_failed. */
  | { kind: 'dead'; message: string }
  | { kind: 'refresh'; refreshTokenSealed: string };

export type Outcome = { kind: 'ok'; row: OAuthTokenRow } | { kind: 'unusable'; message: string };

/**
 * How long a claim on a token (one call to its provider) holds before another may take over: well
 * beyond the OAuth client's 10 s per request, so that it lapses only when its holder died.
 */
export const CLAIM_TTL_SECONDS = 30;
/** How long a request waits for another's call to the provider about the same token, then 503. */
export const CLAIM_WAIT_MS = 15_000;
export const CLAIM_POLL_MS = 100;

/** Another request holds the token's claim for longer than a request should wait. */
export function busy(tokenId: string): AppError {
  return new AppError(
    'unavailable',
    `OAuth token ID ${tokenId} is being refreshed or revoked by another request; retry shortly.`,
    { retryAfterSeconds: 1 },
  );
}

export function createTokenRefresh({
  db,
  secretBox,
  client,
  providers,
  logger,
  now = systemClock,
}: OAuthTokenServiceDeps) {
  function stateOf(token: OAuthTokenRow): TokenState {
    if (token.status !== 'active')
      return { kind: 'unusable', message: token.status_message ?? 'its last refresh failed' };
    const remaining = token.expires_at === null ? Infinity : token.expires_at.getTime() - now().getTime();
    if (remaining > REFRESH_MARGIN_MS) return { kind: 'usable' };
    if (token.refresh_token_encrypted === null) {
      // Still valid for a moment: hand it out rather than fail early.
      return remaining > 0
        ? { kind: 'usable' }
        : { kind: 'dead', message: 'The access token expired and the provider issued no refresh token' };
    }
    return { kind: 'refresh', refreshTokenSealed: token.refresh_token_encrypted };
  }

  async function providerOf(token: OAuthTokenRow): Promise<OAuthProviderRow> {
    const provider = await getProviderById(db, token.provider_id);
    // The foreign key keeps a provider while it has tokens.
    if (!provider) throw new Error(`The provider of OAuth token ${token.id} is missing`);
    return provider;
  }

  /** Records refresh_failed if the token is still as read (under `claimId` when one is held); false if not. */
  async function markRefreshFailed(token: OAuthTokenRow, claimId: string | null, message: string): Promise<boolean> {
    const marked = await db.transaction().execute(async (tx) => {
      if (!(await markTokenRefreshFailed(tx, token, claimId, message))) return false;
      await recordEvents(tx, [
        {
          workspaceId: token.workspace_id,
          subjectType: 'oauth_token',
          subjectId: token.id,
          type: 'oauth_token.refresh_failed',
          fromStatus: token.status,
          toStatus: 'refresh_failed',
          data: { message },
        },
      ]);
      return true;
    });
    if (marked)
      logger.warn(
        { oauth_token_id: token.id, reason: message },
        'OAuth token refresh failed; the token needs a new authorization',
      );
    return marked;
  }

  /**
   * With the claim held: refreshes the token unless someone did meanwhile. Null when the claim lapsed
   * before the result could be stored: the caller reads the row again.
   */
  async function refreshClaimed(token: OAuthTokenRow, claimId: string): Promise<Outcome | null> {
    const state = stateOf(token);
    if (state.kind === 'usable') return { kind: 'ok', row: token };
    if (state.kind === 'unusable') return state;
    if (state.kind === 'dead')
      return (await markRefreshFailed(token, claimId, state.message))
        ? { kind: 'unusable', message: state.message }
        : null;
    const provider = await providerOf(token);
    let refreshed: OAuthTokenSet;
    try {
      refreshed = await client.refresh(providers.config(provider), secretBox.open(state.refreshTokenSealed), {
        issuer: token.issuer,
        scopes: token.scopes,
      });
    } catch (err) {
      if (err instanceof OAuthFlowError && err.reason === 'invalid_grant') {
        return (await markRefreshFailed(token, claimId, err.message))
          ? { kind: 'unusable', message: err.message }
          : null;
      }
      if (err instanceof OAuthFlowError) throw flowErrorToAppError(err, 'Refreshing the OAuth token failed: ');
      throw err;
    }
    return db.transaction().execute(async (tx) => {
      const row = await storeRefreshedToken(tx, token.id, claimId, {
        accessTokenSealed: secretBox.seal(refreshed.accessToken),
        refreshTokenSealed: refreshed.refreshToken === null ? null : secretBox.seal(refreshed.refreshToken),
        tokenType: refreshed.tokenType,
        expiresAt: refreshed.expiresAt,
        scopes: refreshed.scopes,
      });
      if (!row) {
        logger.warn(
          { oauth_token_id: token.id },
          'an OAuth token refresh outlived its claim; the result of the request that took over stands',
        );
        return null;
      }
      await recordEvents(tx, [
        {
          workspaceId: token.workspace_id,
          subjectType: 'oauth_token',
          subjectId: token.id,
          type: 'oauth_token.refreshed',
          data: { expires_at: refreshed.expiresAt?.toISOString() ?? null },
        },
      ]);
      return { kind: 'ok', row } satisfies Outcome;
    });
  }

  /** Brings the token to a usable or a final state: refreshes it, or waits for whoever is refreshing it. */
  async function settle(workspaceId: string, tokenId: string): Promise<Outcome> {
    const deadline = performance.now() + CLAIM_WAIT_MS;
    for (;;) {
      const token = await readToken(db, workspaceId, tokenId);
      if (!token) throw notFound('OAuth token', tokenId);
      const state = stateOf(token);
      if (state.kind === 'usable') return { kind: 'ok', row: token };
      if (state.kind === 'unusable') return state;
      if (state.kind === 'dead') {
        // No provider call: a compare-and-set on the row as read is enough.
        if (await markRefreshFailed(token, null, state.message)) return { kind: 'unusable', message: state.message };
        continue;
      }
      const claimId = randomUUID();
      const claimed = await claimToken(db, workspaceId, tokenId, claimId, CLAIM_TTL_SECONDS);
      if (claimed) {
        try {
          const outcome = await refreshClaimed(claimed, claimId);
          if (outcome) return outcome;
        } finally {
          // A stored result gave the claim back already; after a failure this does.
          await releaseClaim(db, tokenId, claimId);
        }
      }
      if (performance.now() >= deadline) throw busy(tokenId);
      if (claimed) continue;
      await sleep(CLAIM_POLL_MS);
    }
  }

  return { stateOf, providerOf, settle };
}
