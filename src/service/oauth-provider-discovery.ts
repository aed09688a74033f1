/**
 * An MCP server's OAuth provider completed by discovery (docs/oauth.md, "MCP servers"): its
 * authorization server's endpoints, and a client registered there.
 */
import type { SecretBox } from '../crypto/secret-box.ts';
import { AppError } from '../errors.ts';
import type { DiscoveredMcpServer, OAuthClient } from '../oauth/oauth-client.ts';
import { OAuthFlowError } from '../oauth/oauth-flow-error.ts';
import type { ProviderSettings } from '../store/oauth-providers.ts';
import { callbackUrl } from './oauth-flow.ts';
import type { CreateInput } from './oauth-providers.ts';
import { flowErrorToAppError } from './oauth-token-rules.ts';

export interface McpDiscoveryDeps {
  secretBox: SecretBox;
  client?: OAuthClient;
  publicUrl?: string;
}

export function createMcpDiscovery({ secretBox, client, publicUrl }: McpDiscoveryDeps) {
  /**
   * What a provider of provider_type `mcp` named by its mcp_server_url alone lacks, found as the MCP
   * authorization specification says: the authorization server from the server's protected-resource
   * metadata, its endpoints from its metadata, and a client registered there (RFC 7591) unless a
   * client_id is given. Given endpoints and client are kept as they are.
   */
  async function completeMcpProvider(
    input: CreateInput,
    registerClient: (server: DiscoveredMcpServer) => boolean = () => input.client_id === undefined,
  ): Promise<Partial<ProviderSettings>> {
    if (!client || !publicUrl) throw new AppError('invalid_request', 'MCP discovery is not available here');
    try {
      const server = await client.discoverMcpServer(input.mcp_server_url!);
      const found: Partial<ProviderSettings> = {
        auth_url: server.auth_url,
        token_url: server.token_url,
        revocation_url: server.revocation_url,
        issuer: server.issuer,
        mcp_server_url: server.resource,
        uses_pkce: true,
        code_challenge_method: 'S256',
        ...(input.scopes === undefined && server.scopes_supported.length > 0
          ? { scopes: server.scopes_supported }
          : {}),
      };
      if (registerClient(server)) {
        const registered = await client.registerClient(server, {
          redirectUri: callbackUrl(publicUrl, input.provider_id),
          clientName: `Slipway (${input.name})`,
          scopes: input.scopes ?? server.scopes_supported,
        });
        Object.assign(found, {
          client_id: registered.client_id,
          client_secret_encrypted: registered.client_secret === null ? null : secretBox.seal(registered.client_secret),
          token_endpoint_auth_method: registered.token_endpoint_auth_method,
          is_dynamic_client: true,
        });
      }
      return found;
    } catch (err) {
      if (err instanceof OAuthFlowError) throw flowErrorToAppError(err, 'mcp_server_url: ');
      throw err;
    }
  }
  return completeMcpProvider;
}
