/**
 * The rules an OAuth provider's settings keep (src/service/oauth-providers.ts): https URLs unless insecure
 * development mode is on, a confidential client's secret, a public client's PKCE, the slug that never
 * changes, an MCP server that does not move under its tokens; and the input as stored columns.
 */
import type { SecretBox } from '../crypto/secret-box.ts';
import { AppError } from '../errors.ts';
import { countProviderTokens, type ProviderSettings } from '../store/oauth-providers.ts';
import type { Db, OAuthProviderRow } from '../store/schema.ts';
import type { ProviderInput } from './oauth-providers.ts';

/** The provider_type of a provider whose tokens are for one MCP server (docs/oauth.md, "MCP servers"). */
export const MCP_PROVIDER_TYPE = 'mcp';

const URL_FIELDS = ['auth_url', 'token_url', 'revocation_url', 'userinfo_url', 'issuer', 'mcp_server_url'] as const;

/**
 * Provider URLs must be https: tokens and the client secret travel to them. Plain http only in
 * insecure development mode.
 */
export function checkUrls(settings: Partial<ProviderSettings>, allowInsecure: boolean): void {
  for (const field of URL_FIELDS) {
    const value = settings[field];
    if (value === undefined || value === null) continue;
    if (!URL.canParse(value)) throw new AppError('invalid_request', `${field} is not a valid URL`);
    const { protocol } = new URL(value);
    if (protocol === 'https:') continue;
    if (protocol === 'http:' && allowInsecure) continue;
    throw new AppError(
      'invalid_request',
      protocol === 'http:'
        ? `${field} must use https (plain http is accepted only when the service runs with SLIPWAY_ALLOW_INSECURE_OAUTH=1)`
        : `${field} must be an https URL`,
    );
  }
}

/** A confidential client cannot authenticate at the token endpoint without its secret. */
export function checkClientAuthentication(
  method: ProviderSettings['token_endpoint_auth_method'],
  hasSecret: boolean,
): void {
  if (method !== 'none' && !hasSecret) {
    throw new AppError(
      'invalid_request',
      `client_secret is required for token_endpoint_auth_method ${method} (use none for a public client)`,
    );
  }
}

/**
 * A public client (no secret) cannot prove at the token endpoint that the code is its own: without
 * PKCE, whoever intercepts the code gets the token (RFC 9700 §2.1.1 requires PKCE for public clients).
 */
export function checkPublicClientPkce(method: ProviderSettings['token_endpoint_auth_method'], usesPkce: boolean): void {
  if (method === 'none' && !usesPkce) {
    throw new AppError(
      'invalid_request',
      'A public client (token_endpoint_auth_method none) must use PKCE (RFC 9700): set uses_pkce to true, or give the client a secret',
    );
  }
}

/** The slug is part of the callback URL registered at the provider. */
export function checkImmutable(current: OAuthProviderRow, input: ProviderInput): void {
  if (input.provider_id !== undefined && input.provider_id !== current.provider_id) {
    throw new AppError(
      'field_immutable',
      'provider_id cannot be changed after creation (it is part of the callback URL registered at the provider)',
    );
  }
}

/**
 * Whether an update gives an MCP provider another MCP server to be discovered anew: as at creation,
 * unless the request itself gives the client and both endpoints.
 */
export function movesMcpServer(current: OAuthProviderRow, input: ProviderInput): boolean {
  const type = input.provider_type !== undefined ? input.provider_type : current.provider_type;
  return (
    type === MCP_PROVIDER_TYPE &&
    typeof input.mcp_server_url === 'string' &&
    input.mcp_server_url !== current.mcp_server_url &&
    (input.client_id === undefined || input.auth_url === undefined || input.token_url === undefined)
  );
}

/**
 * A provider's tokens were issued for its MCP server, with a person's consent to that server: while
 * any exists the server cannot change (their refreshes would ask the new one's authorization server,
 * or the same one for another resource).
 */
export async function refuseWhileTokens(from: Db, current: OAuthProviderRow): Promise<void> {
  const tokens = await countProviderTokens(from, current.id);
  if (tokens > 0)
    throw new AppError(
      'conflict',
      `OAuth provider '${current.provider_id}' has ${tokens} token(s) issued for its MCP server; ` +
        `delete them first (DELETE /v2/auth/tokens/{id}) to give it another mcp_server_url.`,
    );
}

/** The input as stored columns; only the fields present in `input`. */
export function settingsOf(input: ProviderInput, secretBox: SecretBox): Partial<ProviderSettings> {
  const out: Partial<ProviderSettings> = {};
  const copy = <K extends keyof ProviderSettings & keyof ProviderInput>(key: K) => {
    if (input[key] !== undefined) (out as Record<string, unknown>)[key] = input[key];
  };
  for (const key of [
    'name',
    'client_id',
    'auth_url',
    'token_url',
    'revocation_url',
    'userinfo_url',
    'issuer',
    'uses_pkce',
    'code_challenge_method',
    'token_endpoint_auth_method',
    'provider_type',
    'mcp_server_url',
  ] as const)
    copy(key);
  if (input.scopes !== undefined) out.scopes = [...new Set(input.scopes ?? [])];
  if (input.client_secret !== undefined)
    out.client_secret_encrypted = input.client_secret === null ? null : secretBox.seal(input.client_secret);
  return out;
}
