/**
 * What the OAuth token services share, apart from the services themselves: when a token counts as fresh,
 * how an OAuth client failure becomes the service's error, and the dependencies the token service and its
 * refresh are built with. A module of its own so that oauth-tokens.ts and oauth-token-refresh.ts do not
 * import each other.
 */
import type { Kysely } from 'kysely';
import type { Clock } from '../clock.ts';
import type { SecretBox } from '../crypto/secret-box.ts';
import { AppError } from '../errors.ts';
import type { OAuthClient } from '../oauth/oauth-client.ts';
import type { OAuthFlowError } from '../oauth/oauth-flow-error.ts';
import type { Database, OAuthTokenRow } from '../store/schema.ts';
import type { OAuthProviderService } from './oauth-providers.ts';

/** An access token is refreshed when it has less than this left, so the agent never gets one about to die. */
export const REFRESH_MARGIN_MS = 60_000;

/** The mapping (docs/errors.md): the person's or the configuration's fault is 400; the provider's is 502/503. */
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
      return new AppError(
        err.status === undefined && err.oauthError !== undefined ? 'invalid_request' : 'bad_gateway',
        detail,
      );
    case 'invalid_response':
      return new AppError('bad_gateway', detail);
    case 'unreachable':
      return new AppError('unavailable', detail);
  }
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

export interface OAuthTokenServiceDeps {
  db: Kysely<Database>;
  secretBox: SecretBox;
  client: OAuthClient;
  providers: OAuthProviderService;
  logger: WarnLogger;
  /** The clock an access token's expiry is read against; injectable so tests move time instead of waiting. */
  now?: Clock;
}
