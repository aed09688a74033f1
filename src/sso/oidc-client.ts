/**
 * The dashboard's OpenID Connect client, a thin layer over oauth4webapi (never hand-written token
 * requests or JWT checks): discovery from the issuer, the authorization-code flow with PKCE S256,
 * `state` and `nonce`, and the ID token verified with the provider's JWKS (signature, issuer, audience,
 * expiry, nonce). oauth4webapi checks the claims; it leaves the signature of an ID token that came
 * straight from the token endpoint unchecked (TLS vouches for it), so it is checked here on top with
 * `validateApplicationLevelSignature`: a proxy or a misconfigured TLS terminator in between cannot hand
 * the service an identity the provider never signed.
 *
 * @example
 * const oidc = createOidcClient({ issuer, clientId, clientSecret, scopes: ['openid', 'email'] });
 * const start = await oidc.authorizationRequest(redirectUri);
 * // keep start.state, start.codeVerifier and start.nonce; send the browser to start.url; then:
 * const claims = await oidc.finish(new URL(callbackUrl), start, redirectUri);
 */
import * as oauth from 'oauth4webapi';

export type FetchLike = (url: string, init: RequestInit) => Promise<Response>;

export interface OidcClientOptions {
  issuer: string;
  clientId: string;
  /** Null: a public client. */
  clientSecret: string | null;
  scopes: readonly string[];
  /** Plain http to the provider (development and tests only). */
  allowInsecure?: boolean;
  /** Replaces global fetch (tests, proxies). */
  fetch?: FetchLike;
  /** Time allowed for each request to the provider. Default 10 s. */
  timeoutMs?: number;
  /** How long discovered metadata is reused. Default one hour. */
  metadataTtlMs?: number;
}

export const SIGN_IN_ERROR_REASONS = [
  /** The callback does not belong to a sign-in this browser started (state missing, wrong or used). */
  'state_mismatch',
  /** The provider answered the authorization with an error (the person cancelled, access denied...). */
  'provider_error',
  /** The provider refused the code (used, expired, or not bound to this sign-in's PKCE verifier). */
  'invalid_grant',
  /** The ID token is missing, not signed by the provider's keys, or its claims do not hold (nonce...). */
  'invalid_id_token',
  /** The provider could not be reached, or answered something that is not OpenID Connect. */
  'unreachable',
] as const;
export type SignInErrorReason = (typeof SIGN_IN_ERROR_REASONS)[number];

/** Why a sign-in failed; `message` is for the person and never holds a code, token or secret. */
export class SignInError extends Error {
  constructor(
    readonly reason: SignInErrorReason,
    message: string,
  ) {
    super(message);
    this.name = 'SignInError';
  }
}

export interface AuthorizationStart {
  url: string;
  state: string;
  codeVerifier: string;
  nonce: string;
}

/** The claims of a verified ID token. */
export type IdTokenClaims = Readonly<Record<string, unknown>> & { iss: string; sub: string };

export function createOidcClient(options: OidcClientOptions) {
  const client: oauth.Client = { client_id: options.clientId };
  const timeoutMs = options.timeoutMs ?? 10_000;
  const metadataTtlMs = options.metadataTtlMs ?? 3_600_000;
  const issuerUrl = new URL(options.issuer);
  const doFetch = options.fetch ?? ((url: string, init: RequestInit) => fetch(url, init));
  let metadata: { as: oauth.AuthorizationServer; until: number } | null = null;
  // The provider's keys, kept between sign-ins; oauth4webapi refetches them when a token names a new key.
  const jwksCache: oauth.JWKSCacheInput = {};

  const requestOptions = () => ({
    [oauth.customFetch]: async (url: string, init: RequestInit) => {
      try {
        return await doFetch(url, init);
      } catch {
        throw new SignInError('unreachable', `The identity provider could not be reached (${new URL(url).host}).`);
      }
    },
    // Deprecated in oauth4webapi as a development escape hatch, which is exactly its use here.
    [oauth.allowInsecureRequests]: options.allowInsecure ?? false,
    [oauth.jwksCache]: jwksCache,
    signal: () => AbortSignal.timeout(timeoutMs),
  });

  async function authorizationServer(): Promise<oauth.AuthorizationServer> {
    if (metadata !== null && metadata.until > Date.now()) return metadata.as;
    let as: oauth.AuthorizationServer;
    try {
      as = await oauth.processDiscoveryResponse(
        issuerUrl,
        await oauth.discoveryRequest(issuerUrl, { ...requestOptions(), algorithm: 'oidc' }),
      );
    } catch (error) {
      if (error instanceof SignInError) throw error;
      throw new SignInError(
        'unreachable',
        `The identity provider's metadata at ${issuerUrl.origin} could not be read (${codeOf(error)}).`,
      );
    }
    if (!as.authorization_endpoint || !as.token_endpoint || !as.jwks_uri)
      throw new SignInError(
        'unreachable',
        "The identity provider's metadata lacks an authorization endpoint, a token endpoint or its keys (jwks_uri).",
      );
    metadata = { as, until: Date.now() + metadataTtlMs };
    return as;
  }

  function clientAuthentication(as: oauth.AuthorizationServer): oauth.ClientAuth {
    if (options.clientSecret === null) return oauth.None();
    const methods = as.token_endpoint_auth_methods_supported ?? ['client_secret_basic'];
    return methods.includes('client_secret_basic') || !methods.includes('client_secret_post')
      ? oauth.ClientSecretBasic(options.clientSecret)
      : oauth.ClientSecretPost(options.clientSecret);
  }

  return {
    /** Where to send the browser, and what to keep until the callback (the verifier like a secret). */
    async authorizationRequest(redirectUri: string): Promise<AuthorizationStart> {
      const as = await authorizationServer();
      const state = oauth.generateRandomState();
      const nonce = oauth.generateRandomNonce();
      const codeVerifier = oauth.generateRandomCodeVerifier();
      const url = new URL(as.authorization_endpoint!);
      url.searchParams.set('response_type', 'code');
      url.searchParams.set('client_id', options.clientId);
      url.searchParams.set('redirect_uri', redirectUri);
      url.searchParams.set('scope', options.scopes.join(' '));
      url.searchParams.set('state', state);
      url.searchParams.set('nonce', nonce);
      url.searchParams.set('code_challenge', await oauth.calculatePKCECodeChallenge(codeVerifier));
      url.searchParams.set('code_challenge_method', 'S256');
      return { url: url.href, state, codeVerifier, nonce };
    },

    /**
     * Checks the provider's redirect against the sign-in (state, issuer), exchanges the code with the
     * PKCE verifier, and verifies the ID token. Throws SignInError.
     */
    async finish(
      callback: URL,
      started: Pick<AuthorizationStart, 'state' | 'codeVerifier' | 'nonce'>,
      redirectUri: string,
    ): Promise<IdTokenClaims> {
      const as = await authorizationServer();
      let params: URLSearchParams;
      try {
        params = oauth.validateAuthResponse(as, client, callback.searchParams, started.state);
      } catch (error) {
        if (error instanceof oauth.AuthorizationResponseError)
          throw new SignInError(
            'provider_error',
            `The identity provider did not sign you in (${safeCode(error.error)}${error.error_description ? `: ${error.error_description.slice(0, 200)}` : ''}).`,
          );
        throw new SignInError('state_mismatch', 'The answer of the identity provider does not belong to this sign-in.');
      }
      let response: Response;
      let result: oauth.TokenEndpointResponse;
      try {
        response = await oauth.authorizationCodeGrantRequest(
          as,
          client,
          clientAuthentication(as),
          params,
          redirectUri,
          started.codeVerifier,
          requestOptions(),
        );
        result = await oauth.processAuthorizationCodeResponse(as, client, response, {
          expectedNonce: started.nonce,
          requireIdToken: true,
        });
      } catch (error) {
        if (error instanceof SignInError) throw error;
        if (error instanceof oauth.ResponseBodyError) {
          if (error.error === 'invalid_grant')
            throw new SignInError(
              'invalid_grant',
              'The identity provider refused the sign-in code (used already, expired, or not from this sign-in).',
            );
          if (error.status >= 500)
            throw new SignInError('unreachable', `The identity provider failed (HTTP ${error.status}).`);
          throw new SignInError(
            'provider_error',
            `The identity provider refused the sign-in (${safeCode(error.error)}).`,
          );
        }
        throw new SignInError(
          'invalid_id_token',
          `The identity provider's answer was not accepted (${codeOf(error)}).`,
        );
      }
      try {
        await oauth.validateApplicationLevelSignature(as, response, requestOptions());
      } catch (error) {
        if (error instanceof SignInError) throw error;
        throw new SignInError(
          'invalid_id_token',
          `The ID token is not signed with the identity provider's keys (${codeOf(error)}).`,
        );
      }
      const claims = oauth.getValidatedIdTokenClaims(result);
      if (claims === undefined) throw new SignInError('invalid_id_token', 'The identity provider sent no ID token.');
      return { ...claims, iss: claims.iss, sub: claims.sub };
    },
  };
}

export type OidcClient = ReturnType<typeof createOidcClient>;

/** An OAuth error code as the page may show it: the provider's own code, never free text. */
function safeCode(code: string): string {
  return /^[\w.-]{1,64}$/.test(code) ? code : 'error';
}

/** The library's error code for the page and logs (never its message or cause, which can hold tokens). */
function codeOf(error: unknown): string {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^[A-Z_]{1,64}$/.test(code) ? code : 'unexpected answer';
}
