/**
 * The authorization-code flow against a configured OAuth provider, as a thin layer over oauth4webapi
 * (docs/oauth.md): a well-kept OAuth client library, never hand-written token requests.
 *
 * Glossary:
 * - provider config: the service's stored OAuth provider with its client secret already decrypted.
 * - pending authorization: what must be kept between sending the person to the provider and the
 *   callback (state, PKCE verifier, nonce, redirect URI, scopes). It holds the verifier, so the caller
 *   stores it like a secret and deletes it once used.
 * - token set: the result of a code exchange or a refresh.
 *
 * Secure by default, as oauth4webapi is: `state` is always sent and checked, PKCE S256 whenever the
 * provider uses PKCE (a public client must), and only https unless the client is built with `allowInsecure` (development and
 * tests; the service sets it from SLIPWAY_ALLOW_INSECURE_OAUTH).
 *
 * How requests reach a provider, and the checks on its URLs, are src/oauth/oauth-transport.ts; finding a
 * provider's or an MCP server's authorization server and registering a client there are
 * src/oauth/oauth-discovery.ts. This class is the flow, and the one entry point the services use.
 *
 * @example
 * const client = new OAuthClient({ allowInsecure: false });
 * const pending = await client.createAuthorizationRequest(provider, { redirectUri });
 * // send the person to pending.url; later, on the callback:
 * const tokens = await client.exchangeCode(provider, pending, new URL(callbackUrl));
 * const fresher = await client.refresh(provider, tokens.refreshToken!);
 * await client.revoke(provider, fresher.accessToken, { tokenTypeHint: 'access_token' });
 */

import * as oauth from 'oauth4webapi';
import { OAuthFlowError, toOAuthFlowError, type SecretValues } from './oauth-flow-error.ts';
import {
  isCodeChallengeMethod,
  type CodeChallengeMethod,
  type DiscoveredProviderMetadata,
  type OAuthProviderConfig,
  type TokenEndpointAuthMethod,
} from './oauth-provider-config.ts';
import { systemClock, type Clock } from '../clock.ts';
import { discoverMcpServer, discoverProvider, registerClient, type DiscoveredMcpServer } from './oauth-discovery.ts';
import { OAuthTransport, type OAuthTransportOptions } from './oauth-transport.ts';

export * from './oauth-provider-config.ts';

export interface PendingAuthorization {
  /** Where to send the person's browser. */
  url: string;
  state: string;
  /** Null when the provider does not use PKCE. */
  codeVerifier: string | null;
  /** Sent when `openid` is among the scopes, so the ID token can be tied to this flow. */
  nonce: string | null;
  redirectUri: string;
  scopes: string[];
}

export interface OAuthTokenSet {
  accessToken: string;
  /** Lower case, e.g. `bearer`. */
  tokenType: string;
  /** After a refresh without a new refresh token, the one that was used (it stays valid). */
  refreshToken: string | null;
  /** Null when the provider did not say when the access token expires. */
  expiresAt: Date | null;
  /** As granted: the response's `scope`, or the requested scopes when the provider omits it (RFC 6749 §5.1). */
  scopes: string[];
  /** Claims of the validated ID token, when the provider sent one. */
  idTokenClaims: Readonly<Record<string, unknown>> | null;
  /** The issuer the responses were checked against; keep it to pass to `refresh`. */
  issuer: string;
}

export type { FetchLike } from './oauth-transport.ts';
export type { DiscoveredMcpServer } from './oauth-discovery.ts';

export interface OAuthClientOptions extends OAuthTransportOptions {
  /** The clock used to turn `expires_in` into `expiresAt`. */
  now?: Clock;
}

/** Parameters the flow sets itself; letting a caller override them would undo state or PKCE. */
const RESERVED_AUTHORIZATION_PARAMS = new Set([
  'response_type',
  'client_id',
  'redirect_uri',
  'scope',
  'state',
  'code_challenge',
  'code_challenge_method',
  'nonce',
  'resource',
]);

/** `resource` (RFC 8707) at the token endpoint, for a provider whose tokens are for one MCP server. */
function resourceParameter(provider: OAuthProviderConfig): { additionalParameters?: Record<string, string> } {
  return provider.resource ? { additionalParameters: { resource: provider.resource } } : {};
}

export class OAuthClient {
  readonly #transport: OAuthTransport;
  readonly #now: Clock;

  constructor(options: OAuthClientOptions = {}) {
    this.#transport = new OAuthTransport(options);
    this.#now = options.now ?? systemClock;
  }

  /** Builds the authorization URL and the values to keep until the callback. */
  async createAuthorizationRequest(
    provider: OAuthProviderConfig,
    request: { redirectUri: string; scopes?: readonly string[]; extraParams?: Readonly<Record<string, string>> },
  ): Promise<PendingAuthorization> {
    const url = this.#transport.checkedUrl('auth_url', provider.auth_url);
    this.#transport.checkedUrl('token_url', provider.token_url);
    if (provider.token_endpoint_auth_method === 'none' && !provider.uses_pkce) {
      // Nothing else binds the code to this client: a stolen code would be a token (RFC 9700 §2.1.1).
      throw new OAuthFlowError(
        'configuration',
        'A public client (token_endpoint_auth_method none) must use PKCE; set uses_pkce on the provider',
      );
    }
    const scopes = uniqueScopes(request.scopes ?? provider.scopes ?? []);
    const state = oauth.generateRandomState();
    const nonce = scopes.includes('openid') ? oauth.generateRandomNonce() : null;

    for (const [name, value] of Object.entries(request.extraParams ?? {})) {
      if (RESERVED_AUTHORIZATION_PARAMS.has(name)) {
        throw new OAuthFlowError(
          'configuration',
          `The authorization parameter ${name} is set by the flow and cannot be overridden`,
        );
      }
      url.searchParams.set(name, value);
    }
    url.searchParams.set('response_type', 'code');
    url.searchParams.set('client_id', provider.client_id);
    url.searchParams.set('redirect_uri', request.redirectUri);
    if (scopes.length > 0) url.searchParams.set('scope', scopes.join(' '));
    url.searchParams.set('state', state);
    if (nonce) url.searchParams.set('nonce', nonce);
    // RFC 8707: the token is for this resource only (an MCP server), asked again at the token endpoint.
    if (provider.resource) url.searchParams.set('resource', provider.resource);

    let codeVerifier: string | null = null;
    if (provider.uses_pkce) {
      codeVerifier = oauth.generateRandomCodeVerifier();
      const method = checkedChallengeMethod(provider.code_challenge_method);
      // `plain` only when the provider is configured for it; it still binds the code to this flow.
      const challenge = method === 'S256' ? await oauth.calculatePKCECodeChallenge(codeVerifier) : codeVerifier;
      url.searchParams.set('code_challenge', challenge);
      url.searchParams.set('code_challenge_method', method);
    }

    return { url: url.href, state, codeVerifier, nonce, redirectUri: request.redirectUri, scopes };
  }

  /**
   * Checks the callback against the pending authorization and exchanges the code for tokens.
   * Throws `OAuthFlowError`: `state_mismatch`, `provider_error` (e.g. consent denied), `invalid_grant`
   * (wrong verifier, used or expired code), `unreachable`, `invalid_response`, `configuration`.
   */
  async exchangeCode(
    provider: OAuthProviderConfig,
    pending: Pick<PendingAuthorization, 'state' | 'codeVerifier' | 'nonce' | 'redirectUri' | 'scopes'>,
    callback: URL | URLSearchParams,
  ): Promise<OAuthTokenSet> {
    this.#transport.checkedUrl('token_url', provider.token_url);
    const params = callback instanceof URL ? callback.searchParams : callback;
    // Checked before anything else in the callback is believed, including an `error` parameter.
    if (params.getAll('state').length !== 1 || params.get('state') !== pending.state) {
      throw new OAuthFlowError(
        'state_mismatch',
        'The authorization response does not belong to this flow (state mismatch)',
      );
    }
    // Without a configured issuer, the `iss` the provider reports is taken as is: each provider has its
    // own callback URL, the mix-up defence by distinct redirect URIs (OAuth security BCP, RFC 9700 §4.4.2).
    const issuer = provider.issuer ?? params.get('iss') ?? this.#fallbackIssuer(provider);
    const as = this.#authorizationServer(provider, issuer);
    const client: oauth.Client = { client_id: provider.client_id };
    const secrets: SecretValues = [provider.client_secret, params.get('code'), pending.codeVerifier];

    try {
      const validated = oauth.validateAuthResponse(as, client, params, pending.state);
      const response = await oauth.authorizationCodeGrantRequest(
        as,
        client,
        this.#clientAuthentication(provider),
        validated,
        pending.redirectUri,
        pending.codeVerifier ?? oauth.nopkce,
        { ...this.#transport.requestOptions(discoveredEndpoints(provider)), ...resourceParameter(provider) },
      );
      const result = await oauth.processAuthorizationCodeResponse(as, client, response, {
        expectedNonce: pending.nonce ?? oauth.expectNoNonce,
      });
      return this.#tokenSet(result, null, pending.scopes, issuer);
    } catch (err) {
      throw toOAuthFlowError(err, 'token exchange', secrets);
    }
  }

  /**
   * Gets a new access token with a refresh token. `issuer` is the one returned with the earlier token
   * set; `scopes` are the scopes granted before (kept when the provider does not repeat them).
   */
  async refresh(
    provider: OAuthProviderConfig,
    refreshToken: string,
    options: { issuer?: string; scopes?: readonly string[] } = {},
  ): Promise<OAuthTokenSet> {
    this.#transport.checkedUrl('token_url', provider.token_url);
    const issuer = provider.issuer ?? options.issuer ?? this.#fallbackIssuer(provider);
    const as = this.#authorizationServer(provider, issuer);
    const client: oauth.Client = { client_id: provider.client_id };
    try {
      const response = await oauth.refreshTokenGrantRequest(
        as,
        client,
        this.#clientAuthentication(provider),
        refreshToken,
        { ...this.#transport.requestOptions(discoveredEndpoints(provider)), ...resourceParameter(provider) },
      );
      const result = await oauth.processRefreshTokenResponse(as, client, response);
      return this.#tokenSet(result, refreshToken, options.scopes ?? provider.scopes ?? [], issuer);
    } catch (err) {
      throw toOAuthFlowError(err, 'token refresh', [provider.client_secret, refreshToken]);
    }
  }

  /**
   * Revokes a token at the provider (RFC 7009). Returns false, without a request, when the provider
   * has no revocation endpoint; the caller then only forgets the token.
   */
  async revoke(
    provider: OAuthProviderConfig,
    token: string,
    options: { tokenTypeHint?: 'access_token' | 'refresh_token'; revocationUrl?: string } = {},
  ): Promise<boolean> {
    const revocationUrl = options.revocationUrl ?? provider.revocation_url;
    if (!revocationUrl) return false;
    this.#transport.checkedUrl('revocation_url', revocationUrl);
    const as: oauth.AuthorizationServer = {
      ...this.#authorizationServer(provider, provider.issuer ?? this.#fallbackIssuer(provider)),
      revocation_endpoint: revocationUrl,
    };
    const client: oauth.Client = { client_id: provider.client_id };
    try {
      const response = await oauth.revocationRequest(as, client, this.#clientAuthentication(provider), token, {
        ...this.#transport.requestOptions(discoveredEndpoints(provider)),
        additionalParameters: options.tokenTypeHint ? { token_type_hint: options.tokenTypeHint } : undefined,
      });
      await oauth.processRevocationResponse(response);
      return true;
    } catch (err) {
      throw toOAuthFlowError(err, 'revocation', [provider.client_secret, token]);
    }
  }

  /**
   * The claims the provider's userinfo endpoint returns for an access token (OpenID Connect), or null
   * without a request when the provider has no userinfo endpoint.
   */
  async userinfo(
    provider: OAuthProviderConfig,
    accessToken: string,
    options: { issuer?: string } = {},
  ): Promise<Record<string, unknown> | null> {
    if (!provider.userinfo_url) return null;
    this.#transport.checkedUrl('userinfo_url', provider.userinfo_url);
    const as: oauth.AuthorizationServer = {
      ...this.#authorizationServer(provider, provider.issuer ?? options.issuer ?? this.#fallbackIssuer(provider)),
      userinfo_endpoint: provider.userinfo_url,
    };
    const client: oauth.Client = { client_id: provider.client_id };
    try {
      const response = await oauth.userInfoRequest(
        as,
        client,
        accessToken,
        this.#transport.requestOptions(discoveredEndpoints(provider)),
      );
      // Without an ID token there is no subject to compare with; the claims only label the account.
      return { ...(await oauth.processUserInfoResponse(as, client, oauth.skipSubjectCheck, response)) };
    } catch (err) {
      throw toOAuthFlowError(err, 'userinfo request', [provider.client_secret, accessToken]);
    }
  }

  /** The authorization server of an MCP server (src/oauth/oauth-discovery.ts). */
  async discoverMcpServer(mcpServerUrl: string): Promise<DiscoveredMcpServer> {
    return discoverMcpServer(this.#transport, mcpServerUrl);
  }

  /**
   * Registers a client at the authorization server (RFC 7591) for `redirectUri`: a confidential one
   * (client_secret_post) when the server offers it, else a public one (PKCE only).
   */
  async registerClient(
    server: Pick<DiscoveredMcpServer, 'issuer' | 'registration_endpoint' | 'token_endpoint_auth_methods_supported'>,
    request: { redirectUri: string; clientName: string; scopes: readonly string[] },
  ): Promise<{ client_id: string; client_secret: string | null; token_endpoint_auth_method: TokenEndpointAuthMethod }> {
    return registerClient(this.#transport, server, request);
  }

  /** Reads the provider's metadata from `<issuer>/.well-known/openid-configuration` (or the OAuth 2.0 one). */
  async discover(issuer: string, options: { algorithm?: 'oidc' | 'oauth2' } = {}): Promise<DiscoveredProviderMetadata> {
    return discoverProvider(this.#transport, issuer, options.algorithm ?? 'oidc', false);
  }

  #authorizationServer(provider: OAuthProviderConfig, issuer: string): oauth.AuthorizationServer {
    return {
      issuer,
      authorization_endpoint: provider.auth_url,
      token_endpoint: provider.token_url,
      revocation_endpoint: provider.revocation_url ?? undefined,
    };
  }

  /**
   * oauth4webapi needs an issuer even when none is configured. The origin of the authorization
   * endpoint is the issuer of most providers; where it is not, ID tokens fail the issuer check with a
   * clear error and the provider needs its issuer configured.
   */
  #fallbackIssuer(provider: OAuthProviderConfig): string {
    return this.#transport.checkedUrl('auth_url', provider.auth_url).origin;
  }

  #clientAuthentication(provider: OAuthProviderConfig): oauth.ClientAuth {
    const method = provider.token_endpoint_auth_method;
    switch (method) {
      case 'none':
        return oauth.None();
      case 'client_secret_basic':
        return oauth.ClientSecretBasic(requiredSecret(provider));
      case 'client_secret_post':
        return oauth.ClientSecretPost(requiredSecret(provider));
      default: {
        // Stored rows are validated on write; this guards a row written by something else.
        const unknown: never = method;
        throw new OAuthFlowError('configuration', `Unsupported token_endpoint_auth_method ${String(unknown)}`);
      }
    }
  }

  #tokenSet(
    result: oauth.TokenEndpointResponse,
    previousRefreshToken: string | null,
    requestedScopes: readonly string[],
    issuer: string,
  ): OAuthTokenSet {
    const expiresIn = result.expires_in;
    return {
      accessToken: result.access_token,
      tokenType: result.token_type,
      refreshToken: result.refresh_token ?? previousRefreshToken,
      expiresAt: expiresIn === undefined ? null : new Date(this.#now().getTime() + expiresIn * 1000),
      scopes: result.scope !== undefined ? uniqueScopes(result.scope.split(' ')) : [...requestedScopes],
      idTokenClaims: oauth.getValidatedIdTokenClaims(result) ?? null,
      issuer,
    };
  }
}

/** An MCP provider's endpoints came from the MCP server's authorization server metadata. */
function discoveredEndpoints(provider: OAuthProviderConfig): boolean {
  return Boolean(provider.resource);
}

function requiredSecret(provider: OAuthProviderConfig): string {
  if (!provider.client_secret) {
    throw new OAuthFlowError(
      'configuration',
      `The provider uses ${provider.token_endpoint_auth_method} but has no client_secret`,
    );
  }
  return provider.client_secret;
}

function checkedChallengeMethod(method: string): CodeChallengeMethod {
  if (isCodeChallengeMethod(method)) return method;
  throw new OAuthFlowError('configuration', `Unsupported code_challenge_method ${method} (use S256 or plain)`);
}

function uniqueScopes(scopes: readonly string[]): string[] {
  return [...new Set(scopes.filter((scope) => scope.length > 0))];
}
