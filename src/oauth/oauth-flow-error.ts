/**
 * The one error type the OAuth client throws. `reason` is a stable classification the service maps to
 * its own error codes and to the message on the callback page; `message` is written for a person.
 *
 * Rule (docs/oauth.md): token values and client secrets never appear in error
 * messages. The messages are built here from fixed text plus the provider's OAuth error code and
 * description; the library's own error (whose `cause` can hold a whole token response) is never
 * attached, only its code.
 */

import * as oauth from 'oauth4webapi';

export const OAUTH_FLOW_ERROR_REASONS = [
  /** The provider's URLs or the client settings cannot work (plain http not allowed, no secret...). */
  'configuration',
  /** The callback's `state` is missing or differs from the one this flow sent. */
  'state_mismatch',
  /** The provider answered with an OAuth error (consent denied, invalid_client...) or an HTTP error. */
  'provider_error',
  /** The provider rejected the code, the PKCE verifier or the refresh token (RFC 6749 `invalid_grant`). */
  'invalid_grant',
  /** The provider could not be reached: connection refused or reset, DNS failure, timeout. */
  'unreachable',
  /** The provider answered 2xx with something that is not a valid OAuth response. */
  'invalid_response',
] as const;

export type OAuthFlowErrorReason = (typeof OAUTH_FLOW_ERROR_REASONS)[number];

export interface OAuthFlowErrorDetails {
  /** The OAuth `error` code the provider returned, e.g. `access_denied`, `invalid_grant`. */
  oauthError?: string;
  /** The HTTP status the provider answered with, when it answered. */
  status?: number;
  /** The oauth4webapi error code, for logs (never the library's message or cause). */
  libraryCode?: string;
}

export class OAuthFlowError extends Error {
  readonly oauthError: string | undefined;
  readonly status: number | undefined;
  readonly libraryCode: string | undefined;

  constructor(
    readonly reason: OAuthFlowErrorReason,
    message: string,
    details: OAuthFlowErrorDetails = {},
  ) {
    super(message);
    this.name = 'OAuthFlowError';
    this.oauthError = details.oauthError;
    this.status = details.status;
    this.libraryCode = details.libraryCode;
  }

  /**
   * Whether trying again later may succeed: the provider was unreachable or failed on its side (5xx,
   * `temporarily_unavailable`). A refresh that fails this way keeps the token; any other failure means
   * the token or the configuration is no good until someone acts.
   */
  get retryable(): boolean {
    return (
      this.reason === 'unreachable' ||
      (this.reason === 'provider_error' && ((this.status ?? 0) >= 500 || this.oauthError === 'temporarily_unavailable'))
    );
  }
}

/** Values that must never be echoed, even if a provider copies them into an error description. */
export type SecretValues = ReadonlyArray<string | null | undefined>;

const MAX_DESCRIPTION_LENGTH = 200;

/** A provider-supplied description, shortened and with any known secret blotted out. */
function safeDescription(description: string | undefined, secrets: SecretValues): string {
  if (!description) return '';
  let text = description;
  for (const secret of secrets) {
    // Short values would blot out ordinary words; secrets, codes and tokens are long.
    if (secret && secret.length >= 8) text = text.split(secret).join('[redacted]');
  }
  if (text.length > MAX_DESCRIPTION_LENGTH) text = `${text.slice(0, MAX_DESCRIPTION_LENGTH)}...`;
  return `: ${text}`;
}

/**
 * Turns whatever an oauth4webapi call (or the fetch under it) threw into an `OAuthFlowError`.
 * `step` names the operation for the message ("token exchange", "token refresh", "revocation").
 */
export function toOAuthFlowError(err: unknown, step: string, secrets: SecretValues): OAuthFlowError {
  if (err instanceof OAuthFlowError) return err;

  if (err instanceof oauth.AuthorizationResponseError) {
    return new OAuthFlowError(
      'provider_error',
      `The provider ended the authorization with ${err.error}${safeDescription(err.error_description, secrets)}`,
      { oauthError: err.error, libraryCode: err.code },
    );
  }

  if (err instanceof oauth.ResponseBodyError) {
    const reason = err.error === 'invalid_grant' ? 'invalid_grant' : 'provider_error';
    return new OAuthFlowError(
      reason,
      `The provider rejected the ${step} with ${err.error} (HTTP ${err.status})${safeDescription(err.error_description, secrets)}`,
      { oauthError: err.error, status: err.status, libraryCode: err.code },
    );
  }

  if (err instanceof oauth.WWWAuthenticateChallengeError) {
    // A 401 with a challenge: almost always the client credentials (invalid_client).
    const challenge = err.cause[0];
    const oauthError = challenge?.parameters.error ?? 'invalid_client';
    return new OAuthFlowError(
      oauthError === 'invalid_grant' ? 'invalid_grant' : 'provider_error',
      `The provider rejected the ${step} with ${oauthError} (HTTP ${err.status})${safeDescription(challenge?.parameters.error_description, secrets)}`,
      { oauthError, status: err.status, libraryCode: err.code },
    );
  }

  if (err instanceof oauth.OperationProcessingError) {
    if (err.code === oauth.HTTP_REQUEST_FORBIDDEN || err.code === oauth.REQUEST_PROTOCOL_FORBIDDEN) {
      return new OAuthFlowError(
        'configuration',
        `The ${step} needs an https URL; plain http is allowed only in insecure development mode`,
        { libraryCode: err.code },
      );
    }
    if (err.code === oauth.RESPONSE_IS_NOT_CONFORM && isResponse(err.cause) && err.cause.status >= 300) {
      return new OAuthFlowError('provider_error', `The provider answered the ${step} with HTTP ${err.cause.status}`, {
        status: err.cause.status,
        libraryCode: err.code,
      });
    }
    // The library's messages are fixed text about which check failed (never values), so they are safe
    // to pass on and they are what an operator needs.
    return new OAuthFlowError('invalid_response', `The provider's answer to the ${step} is not valid: ${err.message}`, {
      libraryCode: err.code,
    });
  }

  if (err instanceof oauth.UnsupportedOperationError) {
    return new OAuthFlowError(
      'invalid_response',
      `The provider's answer to the ${step} is not supported: ${err.message}`,
      {
        libraryCode: err.code,
      },
    );
  }

  // Anything else escaped from inside the library; its text may quote inputs, so it is not passed on.
  return new OAuthFlowError('invalid_response', `The ${step} failed unexpectedly`);
}

/** A fetch Response: global fetch's, or undici's own class (public-address.ts's connections). */
function isResponse(value: unknown): value is Response {
  return value instanceof Response || Object.prototype.toString.call(value) === '[object Response]';
}

/** The error for a request that got no HTTP answer at all (wrapped around fetch, so it is never a guess). */
export function unreachableError(url: string, err: unknown): OAuthFlowError {
  const timedOut = err instanceof Error && (err.name === 'TimeoutError' || err.name === 'AbortError');
  // The origin only: the path or query of a provider URL could carry parameters worth keeping out of logs.
  const origin = URL.canParse(url) ? new URL(url).origin : 'the provider';
  return new OAuthFlowError(
    'unreachable',
    timedOut ? `The provider at ${origin} did not answer in time` : `The provider at ${origin} could not be reached`,
  );
}
