/**
 * What the OAuth client needs to know about a provider: the shape of the service's stored provider
 * (secret decrypted) and of discovered metadata, with the allowed values of the enumerated fields so
 * that request validation and the client share one list.
 */

export const TOKEN_ENDPOINT_AUTH_METHODS = ['none', 'client_secret_basic', 'client_secret_post'] as const;
export type TokenEndpointAuthMethod = (typeof TOKEN_ENDPOINT_AUTH_METHODS)[number];

export const CODE_CHALLENGE_METHODS = ['S256', 'plain'] as const;
export type CodeChallengeMethod = (typeof CODE_CHALLENGE_METHODS)[number];

export const isCodeChallengeMethod = (value: string): value is CodeChallengeMethod =>
  (CODE_CHALLENGE_METHODS as readonly string[]).includes(value);

/** A provider as the service stores it, with `client_secret` decrypted by the caller. */
export interface OAuthProviderConfig {
  auth_url: string;
  token_url: string;
  client_id: string;
  client_secret?: string | null;
  token_endpoint_auth_method: TokenEndpointAuthMethod;
  uses_pkce: boolean;
  code_challenge_method: CodeChallengeMethod;
  /** Scopes requested when the caller names none. */
  scopes?: readonly string[];
  revocation_url?: string | null;
  /** OpenID Connect userinfo endpoint, asked for the account's label when no ID token names it. */
  userinfo_url?: string | null;
  /**
   * The provider's issuer identifier, when known (from discovery or configuration). It is checked
   * against the `iss` of the callback and of ID tokens.
   */
  issuer?: string | null;
  /**
   * The resource the tokens are for (RFC 8707), sent as `resource` in the authorization and token
   * requests: an MCP server's URL for a provider of provider_type `mcp`.
   */
  resource?: string | null;
}

export interface DiscoveredProviderMetadata {
  issuer: string;
  auth_url: string;
  token_url: string;
  revocation_url: string | null;
  userinfo_url: string | null;
  /** Where clients register themselves (RFC 7591), when the server allows it. */
  registration_endpoint: string | null;
  code_challenge_methods_supported: string[];
  token_endpoint_auth_methods_supported: string[];
  scopes_supported: string[];
}
