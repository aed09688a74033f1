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
 * @example
 * const client = new OAuthClient({ allowInsecure: false });
 * const pending = await client.createAuthorizationRequest(provider, { redirectUri });
 * // send the person to pending.url; later, on the callback:
 * const tokens = await client.exchangeCode(provider, pending, new URL(callbackUrl));
 * const fresher = await client.refresh(provider, tokens.refreshToken!);
 * await client.revoke(provider, fresher.accessToken, { tokenTypeHint: 'access_token' });
 */

import * as oauth from 'oauth4webapi';
import { fetch as undiciFetch, type Agent, type RequestInit as UndiciRequestInit } from 'undici';
import { OAuthFlowError, toOAuthFlowError, unreachableError, type SecretValues } from './oauth-flow-error.ts';
import {
  assertPublicAddress,
  findNotPublicAddress,
  notPublicError,
  publicOnlyDispatcher,
  systemResolve,
  type ResolveAddresses,
} from './public-address.ts';
import {
  isCodeChallengeMethod,
  type CodeChallengeMethod,
  type DiscoveredProviderMetadata,
  type OAuthProviderConfig,
  type TokenEndpointAuthMethod,
} from './oauth-provider-config.ts';

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

export type FetchLike = (url: string, init: RequestInit) => Promise<Response>;

export interface OAuthClientOptions {
  /**
   * Replaces fetch for every request (tests, proxies). The address check before a request to a
   * discovered URL stays; the check on the connection itself (public-address.ts) is then the fetch's.
   */
  fetch?: FetchLike;
  /**
   * Resolves host names for the address check of discovered URLs, both before the request and on its
   * connection. Default: the system resolver (dns.lookup). Tests replace it.
   */
  resolve?: ResolveAddresses;
  /** Permit plain http provider URLs. Development and tests only. */
  allowInsecure?: boolean;
  /** Time allowed for each request to the provider. Default 10 s. */
  timeoutMs?: number;
  /** The clock used to turn `expires_in` into `expiresAt`. */
  now?: () => Date;
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

/** The discovered authorization server of an MCP server (OAuthClient.discoverMcpServer). */
export interface DiscoveredMcpServer {
  /** The protected resource's identifier: the value of the `resource` parameter (RFC 8707). */
  resource: string;
  issuer: string;
  auth_url: string;
  token_url: string;
  revocation_url: string | null;
  registration_endpoint: string | null;
  token_endpoint_auth_methods_supported: string[];
  scopes_supported: string[];
}

export class OAuthClient {
  readonly #fetch: FetchLike | null;
  readonly #resolve: ResolveAddresses;
  #publicOnly: Agent | null = null;
  readonly #allowInsecure: boolean;
  readonly #timeoutMs: number;
  readonly #now: () => Date;

  constructor(options: OAuthClientOptions = {}) {
    this.#fetch = options.fetch ?? null;
    this.#resolve = options.resolve ?? systemResolve;
    this.#allowInsecure = options.allowInsecure ?? false;
    this.#timeoutMs = options.timeoutMs ?? 10_000;
    this.#now = options.now ?? (() => new Date());
  }

  /** Builds the authorization URL and the values to keep until the callback. */
  async createAuthorizationRequest(
    provider: OAuthProviderConfig,
    request: { redirectUri: string; scopes?: readonly string[]; extraParams?: Readonly<Record<string, string>> },
  ): Promise<PendingAuthorization> {
    const url = this.#checkedUrl('auth_url', provider.auth_url);
    this.#checkedUrl('token_url', provider.token_url);
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
    this.#checkedUrl('token_url', provider.token_url);
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
        { ...this.#requestOptions(discoveredEndpoints(provider)), ...resourceParameter(provider) },
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
    this.#checkedUrl('token_url', provider.token_url);
    const issuer = provider.issuer ?? options.issuer ?? this.#fallbackIssuer(provider);
    const as = this.#authorizationServer(provider, issuer);
    const client: oauth.Client = { client_id: provider.client_id };
    try {
      const response = await oauth.refreshTokenGrantRequest(
        as,
        client,
        this.#clientAuthentication(provider),
        refreshToken,
        { ...this.#requestOptions(discoveredEndpoints(provider)), ...resourceParameter(provider) },
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
    this.#checkedUrl('revocation_url', revocationUrl);
    const as: oauth.AuthorizationServer = {
      ...this.#authorizationServer(provider, provider.issuer ?? this.#fallbackIssuer(provider)),
      revocation_endpoint: revocationUrl,
    };
    const client: oauth.Client = { client_id: provider.client_id };
    try {
      const response = await oauth.revocationRequest(as, client, this.#clientAuthentication(provider), token, {
        ...this.#requestOptions(discoveredEndpoints(provider)),
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
    this.#checkedUrl('userinfo_url', provider.userinfo_url);
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
        this.#requestOptions(discoveredEndpoints(provider)),
      );
      // Without an ID token there is no subject to compare with; the claims only label the account.
      return { ...(await oauth.processUserInfoResponse(as, client, oauth.skipSubjectCheck, response)) };
    } catch (err) {
      throw toOAuthFlowError(err, 'userinfo request', [provider.client_secret, accessToken]);
    }
  }

  /**
   * The authorization server of an MCP server, as the MCP authorization specification finds it: the
   * server's protected-resource metadata (RFC 9728, `resource` checked against the URL), its first
   * authorization server, and that server's metadata (RFC 8414, else OpenID discovery). Every URL on the
   * way is the provider's own rule (https), and must not be a loopback, private or link-local address
   * (the metadata is the MCP server's to write); both are allowed only in insecure development mode.
   */
  async discoverMcpServer(mcpServerUrl: string): Promise<DiscoveredMcpServer> {
    const resourceUrl = this.#checkedUrl('mcp_server_url', mcpServerUrl);
    await this.#checkPublic('mcp_server_url', resourceUrl);
    let resource: oauth.ResourceServer;
    try {
      const response = await oauth.resourceDiscoveryRequest(resourceUrl, this.#requestOptions(true));
      resource = await oauth.processResourceDiscoveryResponse(resourceUrl, response);
    } catch (err) {
      throw toOAuthFlowError(err, 'protected resource discovery', []);
    }
    const server = resource.authorization_servers?.[0];
    if (!server)
      throw new OAuthFlowError(
        'invalid_response',
        'The MCP server names no authorization server (authorization_servers)',
      );
    const issuerUrl = this.#checkedUrl('authorization server', server);
    await this.#checkPublic('authorization server', issuerUrl);
    // The server's metadata as any provider's is read (RFC 8414 first, else OpenID discovery).
    let as: DiscoveredProviderMetadata | null = null;
    let lastError: unknown = null;
    for (const algorithm of ['oauth2', 'oidc'] as const) {
      try {
        as = await this.#discover(issuerUrl.href, algorithm, true);
        break;
      } catch (err) {
        lastError = err;
      }
    }
    if (!as) throw lastError;
    // The MCP specification requires PKCE, and a client must refuse a server that does not offer S256.
    if (!as.code_challenge_methods_supported.includes('S256'))
      throw new OAuthFlowError('invalid_response', 'The authorization server does not offer PKCE with S256');
    const endpoints = {
      auth_url: as.auth_url,
      token_url: as.token_url,
      revocation_url: as.revocation_url,
      registration_endpoint: as.registration_endpoint,
    };
    for (const [field, value] of Object.entries(endpoints))
      if (value !== null) await this.#checkPublic(field, this.#checkedUrl(field, value));
    return {
      resource: resource.resource,
      issuer: as.issuer,
      ...endpoints,
      token_endpoint_auth_methods_supported: as.token_endpoint_auth_methods_supported,
      scopes_supported: resource.scopes_supported ?? [],
    };
  }

  /**
   * Registers a client at the authorization server (RFC 7591) for `redirectUri`: a confidential one
   * (client_secret_post) when the server offers it, else a public one (PKCE only).
   */
  async registerClient(
    server: Pick<DiscoveredMcpServer, 'issuer' | 'registration_endpoint' | 'token_endpoint_auth_methods_supported'>,
    request: { redirectUri: string; clientName: string; scopes: readonly string[] },
  ): Promise<{ client_id: string; client_secret: string | null; token_endpoint_auth_method: TokenEndpointAuthMethod }> {
    if (!server.registration_endpoint)
      throw new OAuthFlowError('configuration', 'The authorization server does not allow dynamic client registration');
    const offered = server.token_endpoint_auth_methods_supported;
    const method: TokenEndpointAuthMethod =
      offered.length === 0 || offered.includes('client_secret_post') ? 'client_secret_post' : 'none';
    const as: oauth.AuthorizationServer = {
      issuer: server.issuer,
      registration_endpoint: server.registration_endpoint,
    };
    try {
      const response = await oauth.dynamicClientRegistrationRequest(
        as,
        {
          client_name: request.clientName,
          redirect_uris: [request.redirectUri],
          grant_types: ['authorization_code', 'refresh_token'],
          response_types: ['code'],
          token_endpoint_auth_method: method,
          ...(request.scopes.length > 0 ? { scope: request.scopes.join(' ') } : {}),
        },
        this.#requestOptions(true),
      );
      const client = await oauth.processDynamicClientRegistrationResponse(response);
      const secret = typeof client.client_secret === 'string' ? client.client_secret : null;
      return {
        client_id: client.client_id,
        client_secret: secret,
        token_endpoint_auth_method: secret === null ? 'none' : method,
      };
    } catch (err) {
      throw toOAuthFlowError(err, 'client registration', []);
    }
  }

  /** Refuses a URL whose host is, or resolves to, an address that is not public (public-address.ts). */
  async #checkPublic(field: string, url: URL): Promise<void> {
    if (!this.#allowInsecure) await assertPublicAddress(field, url, this.#resolve);
  }

  /** Reads the provider's metadata from `<issuer>/.well-known/openid-configuration` (or the OAuth 2.0 one). */
  async discover(issuer: string, options: { algorithm?: 'oidc' | 'oauth2' } = {}): Promise<DiscoveredProviderMetadata> {
    return this.#discover(issuer, options.algorithm ?? 'oidc', false);
  }

  /** `publicOnly`: the issuer was discovered, so the request connects to public addresses only. */
  async #discover(
    issuer: string,
    algorithm: 'oidc' | 'oauth2',
    publicOnly: boolean,
  ): Promise<DiscoveredProviderMetadata> {
    const issuerUrl = this.#checkedUrl('issuer', issuer);
    let as: oauth.AuthorizationServer;
    try {
      const response = await oauth.discoveryRequest(issuerUrl, { ...this.#requestOptions(publicOnly), algorithm });
      as = await oauth.processDiscoveryResponse(issuerUrl, response);
    } catch (err) {
      throw toOAuthFlowError(err, 'discovery', []);
    }
    if (!as.authorization_endpoint || !as.token_endpoint) {
      throw new OAuthFlowError('invalid_response', 'The provider metadata lacks an authorization or token endpoint');
    }
    return {
      issuer: as.issuer,
      auth_url: as.authorization_endpoint,
      token_url: as.token_endpoint,
      revocation_url: as.revocation_endpoint ?? null,
      userinfo_url: as.userinfo_endpoint ?? null,
      registration_endpoint: as.registration_endpoint ?? null,
      code_challenge_methods_supported: as.code_challenge_methods_supported ?? [],
      token_endpoint_auth_methods_supported: as.token_endpoint_auth_methods_supported ?? [],
      scopes_supported: as.scopes_supported ?? [],
    };
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
    return this.#checkedUrl('auth_url', provider.auth_url).origin;
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

  /**
   * `publicOnly`: the URL was discovered (or is an endpoint of an MCP provider, found by discovery), so
   * unless insecure mode is on, the request connects only to public addresses, checked on the very
   * address it connects to (public-address.ts).
   */
  #requestOptions(publicOnly = false) {
    const guardedFetch = async (url: string, init: RequestInit): Promise<Response> => {
      try {
        if (this.#fetch) return await this.#fetch(url, init);
        if (!publicOnly || this.#allowInsecure) return await fetch(url, init);
        this.#publicOnly ??= publicOnlyDispatcher(this.#resolve, this.#timeoutMs);
        const response = await undiciFetch(url, { ...(init as UndiciRequestInit), dispatcher: this.#publicOnly });
        // undici's own Response class: oauth4webapi accepts it (it checks the class by its tag).
        return response as unknown as Response;
      } catch (err) {
        const refused = findNotPublicAddress(err);
        if (refused) throw notPublicError(null, refused.host);
        // Only a request that got no HTTP answer ends up here, so "unreachable" is never a guess.
        throw unreachableError(url, err);
      }
    };
    return {
      [oauth.customFetch]: guardedFetch,
      // Deprecated in oauth4webapi as a development escape hatch, which is exactly its use here.
      [oauth.allowInsecureRequests]: this.#allowInsecure,
      signal: () => AbortSignal.timeout(this.#timeoutMs),
    };
  }

  #checkedUrl(field: string, value: string): URL {
    if (!URL.canParse(value)) throw new OAuthFlowError('configuration', `The provider's ${field} is not a valid URL`);
    const url = new URL(value);
    if (url.protocol === 'https:' || (url.protocol === 'http:' && this.#allowInsecure)) return url;
    throw new OAuthFlowError(
      'configuration',
      `The provider's ${field} must use https (plain http is accepted only in insecure development mode)`,
    );
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
