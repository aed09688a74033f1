/**
 * OAuth tokens once obtained: handing out a fresh access token (refreshing before expiry) and revoking at
 * the provider (the mapping of OAuth client failures to the service's errors: oauth-token-rules.ts).
 *
 * Token states: `active`, or `refresh_failed` when the provider refused the refresh token (RFC 6749
 * `invalid_grant`: revoked, expired, or rotated elsewhere), or the access token expired and no refresh
 * token was issued. Only a new authorization helps then. A refresh that fails for a passing reason
 * (provider unreachable, 5xx) or a configuration problem leaves the token `active`, so fixing the
 * provider or retrying later works.
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { AppError, notFound } from '../errors.ts';
import { OAuthFlowError } from '../oauth/oauth-flow-error.ts';
import { recordEvents } from '../store/events.ts';
import {
  claimToken,
  deleteClaimedToken,
  getToken,
  listTokens,
  readToken,
  releaseClaim,
  type TokenView,
} from '../store/oauth-tokens.ts';
import type { Db, OAuthTokenRow } from '../store/schema.ts';
import { flowErrorToAppError, type OAuthTokenServiceDeps } from './oauth-token-rules.ts';
import type { Page } from './page.ts';
import type { WriteConditions } from './preconditions.ts';
import {
  busy,
  CLAIM_POLL_MS,
  CLAIM_TTL_SECONDS,
  CLAIM_WAIT_MS,
  createTokenRefresh,
  type Outcome,
} from './oauth-token-refresh.ts';
import { systemClock } from '../clock.ts';

export interface AccessToken {
  accessToken: string;
  tokenType: string;
  expiresAt: Date | null;
  scopes: string[];
}

export { CLAIM_TTL_SECONDS };

/**
 * Refreshes and revocations never hold a transaction, a row lock or a pooled connection while the
 * provider answers (up to 10 s): a slow provider would otherwise take the whole pool, and the API with
 * it. Instead, one call to the provider per token runs at a time:
 *
 * - in this process, concurrent requests for one token share one refresh (`inFlight`);
 * - across replicas, a claim on the token row (src/store/oauth-tokens.ts, `claimToken`), taken in one
 *   conditional update, decides who calls the provider; the others wait, reading the row, until the
 *   result is stored. A refresh token is thus never spent twice, which matters with rotating refresh
 *   tokens (a provider that sees one reused revokes the grant);
 * - the result is stored only if the claim is still the caller's (compare and set); if it lapsed and
 *   another took over, the caller reads the row again.
 */
export function createOAuthTokenService({
  db,
  secretBox,
  client,
  providers,
  logger,
  now = systemClock,
}: OAuthTokenServiceDeps) {
  const inFlight = new Map<string, Promise<Outcome>>();

  const { stateOf, providerOf, settle } = createTokenRefresh({ db, secretBox, client, providers, logger, now });

  return {
    /** The workspace's tokens, newest first, as the API shows them (never their values). */
    list: (workspaceId: string, page: Page): Promise<TokenView[]> =>
      listTokens(db, workspaceId, page.limit, page.offset),

    async get(workspaceId: string, tokenId: string, from: Db = db): Promise<TokenView> {
      const row = await getToken(from, workspaceId, tokenId);
      if (!row) throw notFound('OAuth token', tokenId);
      return row;
    },

    /**
     * A usable access token of the workspace's token `tokenId`, refreshed first when it is expired or
     * about to. 409 when the token needs a new authorization; 502/503 when the provider fails.
     */
    async accessToken(workspaceId: string, tokenId: string): Promise<AccessToken> {
      const token = await readToken(db, workspaceId, tokenId);
      if (!token) throw notFound('OAuth token', tokenId);
      let outcome: Outcome;
      if (stateOf(token).kind === 'usable') {
        outcome = { kind: 'ok', row: token };
      } else {
        const key = `${workspaceId}:${tokenId}`;
        let shared = inFlight.get(key);
        if (!shared) {
          shared = settle(workspaceId, tokenId).finally(() => inFlight.delete(key));
          inFlight.set(key, shared);
        }
        outcome = await shared;
      }
      if (outcome.kind === 'unusable') {
        throw new AppError(
          'conflict',
          `OAuth token ID ${tokenId} cannot be used (refresh_failed: ${outcome.message}); a person must authorize again with POST /v2/auth/authenticate.`,
        );
      }
      const row = outcome.row;
      return {
        accessToken: secretBox.open(row.access_token_encrypted),
        tokenType: row.token_type,
        expiresAt: row.expires_at,
        scopes: row.scopes,
      };
    },

    /**
     * Revokes the token at the provider (RFC 7009, when the provider has a revocation endpoint), then
     * forgets it and its agent connections. A failed revocation keeps the token unless `force`. Holds
     * the token's claim meanwhile, so that no refresh hands out new values that would escape revocation.
     */
    async revoke(
      workspaceId: string,
      tokenId: string,
      options: { force: boolean; byKey: string } & WriteConditions,
    ): Promise<{ revokedAtProvider: boolean }> {
      const deadline = performance.now() + CLAIM_WAIT_MS;
      for (;;) {
        const claimId = randomUUID();
        const token = await claimToken(db, workspaceId, tokenId, claimId, CLAIM_TTL_SECONDS);
        if (!token) {
          if (!(await readToken(db, workspaceId, tokenId))) throw notFound('OAuth token', tokenId);
          if (performance.now() >= deadline) throw busy(tokenId);
          await sleep(CLAIM_POLL_MS);
          continue;
        }
        try {
          // The claim is this token's lock (a refresh needs it too): checked under it, before the
          // provider is asked to revoke anything.
          await options.precondition?.(db);
          const revokedAtProvider = await revokeAtProvider(token, options.force);
          const deleted = await db.transaction().execute(async (tx) => {
            if (!(await deleteClaimedToken(tx, token.id, claimId))) return false;
            await recordEvents(tx, [
              {
                workspaceId,
                subjectType: 'oauth_token',
                subjectId: token.id,
                type: 'oauth_token.deleted',
                fromStatus: token.status,
                data: { revoked_at_provider: revokedAtProvider, forced: options.force, by_key: options.byKey },
              },
            ]);
            return true;
          });
          // Else the claim lapsed while the provider answered, and a refresh may have stored new
          // values: those are revoked too, on the next round.
          if (deleted) return { revokedAtProvider };
        } finally {
          await releaseClaim(db, tokenId, claimId);
        }
      }
    },
  };

  /** RFC 7009 at the provider; true when it confirmed. A failure throws unless `force`. */
  async function revokeAtProvider(token: OAuthTokenRow, force: boolean): Promise<boolean> {
    const provider = await providerOf(token);
    let revokedAtProvider = false;
    try {
      const config = providers.config(provider);
      // The refresh token first: revoking it ends the grant, and with it the access tokens, at most providers.
      if (token.refresh_token_encrypted !== null) {
        revokedAtProvider = await client.revoke(config, secretBox.open(token.refresh_token_encrypted), {
          tokenTypeHint: 'refresh_token',
        });
      }
      revokedAtProvider =
        (await client.revoke(config, secretBox.open(token.access_token_encrypted), {
          tokenTypeHint: 'access_token',
        })) || revokedAtProvider;
    } catch (err) {
      if (!(err instanceof OAuthFlowError)) throw err;
      if (!force) {
        throw flowErrorToAppError(
          err,
          'Revoking the token at the provider failed, so it was kept (retry, or pass force=true to forget it without revoking): ',
        );
      }
      // force: the user chose to forget the token anyway; the failure is recorded in the event.
      logger.warn(
        { oauth_token_id: token.id, reason: err.reason },
        'revocation at the provider failed; token forgotten (force)',
      );
    }
    return revokedAtProvider;
  }
}

export type OAuthTokenService = ReturnType<typeof createOAuthTokenService>;
