/**
 * Finding and joining an authorization server: a provider's metadata (RFC 8414 or OpenID discovery), an
 * MCP server's authorization server as the MCP authorization specification finds it (RFC 9728), and
 * dynamic client registration there (RFC 7591). Every URL found on the way goes through the transport's
 * checks (src/oauth/oauth-transport.ts): the metadata is the MCP server's to write.
 */
import * as oauth from 'oauth4webapi';
import { OAuthFlowError, toOAuthFlowError } from './oauth-flow-error.ts';
import type { DiscoveredProviderMetadata, TokenEndpointAuthMethod } from './oauth-provider-config.ts';
import type { OAuthTransport } from './oauth-transport.ts';

/** The discovered authorization server of an MCP server (discoverMcpServer). */
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

/** `publicOnly`: the issuer was discovered, so the request connects to public addresses only. */
export async function discoverProvider(
  transport: OAuthTransport,
  issuer: string,
  algorithm: 'oidc' | 'oauth2',
  publicOnly: boolean,
): Promise<DiscoveredProviderMetadata> {
  const issuerUrl = transport.checkedUrl('issuer', issuer);
  let as: oauth.AuthorizationServer;
  try {
    const response = await oauth.discoveryRequest(issuerUrl, { ...transport.requestOptions(publicOnly), algorithm });
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

/**
 * The authorization server of an MCP server, as the MCP authorization specification finds it: the
 * server's protected-resource metadata (RFC 9728, `resource` checked against the URL), its first
 * authorization server, and that server's metadata (RFC 8414, else OpenID discovery). Every URL on the
 * way is the provider's own rule (https), and must not be a loopback, private or link-local address
 * (the metadata is the MCP server's to write); both are allowed only in insecure development mode.
 */
export async function discoverMcpServer(transport: OAuthTransport, mcpServerUrl: string): Promise<DiscoveredMcpServer> {
  const resourceUrl = transport.checkedUrl('mcp_server_url', mcpServerUrl);
  await transport.checkPublic('mcp_server_url', resourceUrl);
  let resource: oauth.ResourceServer;
  try {
    const response = await oauth.resourceDiscoveryRequest(resourceUrl, transport.requestOptions(true));
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
  const issuerUrl = transport.checkedUrl('authorization server', server);
  await transport.checkPublic('authorization server', issuerUrl);
  // The server's metadata as any provider's is read (RFC 8414 first, else OpenID discovery).
  let as: DiscoveredProviderMetadata | null = null;
  let lastError: unknown = null;
  for (const algorithm of ['oauth2', 'oidc'] as const) {
    try {
      as = await discoverProvider(transport, issuerUrl.href, algorithm, true);
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
    if (value !== null) await transport.checkPublic(field, transport.checkedUrl(field, value));
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
export async function registerClient(
  transport: OAuthTransport,
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
      transport.requestOptions(true),
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
