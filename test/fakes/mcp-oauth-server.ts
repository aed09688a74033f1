/**
 * An MCP server that wants OAuth, on loopback, as the MCP authorization specification describes one,
 * built from @modelcontextprotocol/sdk's server parts: its Express app (`createMcpExpressApp`, with the
 * Host-header check of a loopback server), its protected-resource metadata (`mcpAuthMetadataRouter`,
 * RFC 9728) naming the `oidc-provider` fake as its authorization server, its bearer middleware
 * (`requireBearerAuth`) in front of `/mcp`, and the Streamable HTTP transport (stateless).
 *
 * The middleware's verifier asks the authorization server (introspection) whether the token is active
 * and for whom it was issued; the middleware then refuses a token whose audience is not this server's
 * `/mcp` (RFC 8707, its `expectedResource`), answering 401 with
 * `WWW-Authenticate: Bearer error="invalid_token", ..., resource_metadata="..."`.
 *
 * One tool, `whoami`, answers the subject the token was issued for.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { InvalidTokenError } from '@modelcontextprotocol/sdk/server/auth/errors.js';
import { requireBearerAuth } from '@modelcontextprotocol/sdk/server/auth/middleware/bearerAuth.js';
import {
  getOAuthProtectedResourceMetadataUrl,
  mcpAuthMetadataRouter,
} from '@modelcontextprotocol/sdk/server/auth/router.js';
import type { OAuthTokenVerifier } from '@modelcontextprotocol/sdk/server/auth/provider.js';
import type { AuthInfo } from '@modelcontextprotocol/sdk/server/auth/types.js';
import { createMcpExpressApp } from '@modelcontextprotocol/sdk/server/express.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { OAuthMetadata } from '@modelcontextprotocol/sdk/shared/auth.js';
import type { OidcServer } from './oidc-server.ts';

export interface McpOAuthServer {
  /** The server's MCP endpoint, e.g. `http://127.0.0.1:41234/mcp`: its resource identifier. */
  url: string;
  /** Requests refused for their token (401). */
  refused(): number;
  /** Tool calls answered. */
  calls(): number;
  close(): Promise<void>;
}

export async function startMcpOAuthServer(
  idp: Pick<OidcServer, 'issuer' | 'introspect' | 'endpoints'>,
): Promise<McpOAuthServer> {
  let refused = 0;
  let calls = 0;
  let handle: http.RequestListener | null = null;
  // Listen first: the resource identifier carries the port.
  const server = http.createServer((req, res) => {
    if (handle) handle(req, res);
    else res.writeHead(503).end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`;
  const resource = new URL(url);

  const oauthMetadata = (await (await fetch(idp.endpoints.discovery)).json()) as OAuthMetadata;
  const verifier: OAuthTokenVerifier = {
    async verifyAccessToken(token) {
      const claims = await idp.introspect(token);
      if (!claims.active) throw new InvalidTokenError('The token is not active');
      const audiences = [claims.aud].flat().filter((aud): aud is string => typeof aud === 'string');
      return {
        token,
        clientId: String(claims.client_id),
        scopes: typeof claims.scope === 'string' ? claims.scope.split(' ') : [],
        expiresAt: Number(claims.exp),
        // One audience is a resource; none, or several, name no single server.
        ...(audiences.length === 1 ? { resource: new URL(audiences[0]!) } : {}),
        extra: { sub: claims.sub },
      };
    },
  };

  const app = createMcpExpressApp({ host: '127.0.0.1' });
  app.use(mcpAuthMetadataRouter({ oauthMetadata, resourceServerUrl: resource, scopesSupported: ['mcp:tools'] }));
  app.use('/mcp', (_req: http.IncomingMessage, res: http.ServerResponse, next: () => void) => {
    res.on('finish', () => {
      if (res.statusCode === 401) refused += 1;
    });
    next();
  });
  app.use(
    '/mcp',
    requireBearerAuth({
      verifier,
      expectedResource: resource,
      resourceMetadataUrl: getOAuthProtectedResourceMetadataUrl(resource),
    }),
  );
  app.post('/mcp', (req: http.IncomingMessage & { auth?: AuthInfo; body?: unknown }, res: http.ServerResponse) => {
    void (async () => {
      const mcp = new McpServer({ name: 'fake-mcp', version: '1.0.0' });
      mcp.registerTool('whoami', { description: 'The subject the access token was issued for' }, async () => {
        calls += 1;
        return { content: [{ type: 'text', text: String(req.auth?.extra?.sub) }] };
      });
      const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
      res.on('close', () => {
        void transport.close();
        void mcp.close();
      });
      await mcp.connect(transport);
      await transport.handleRequest(req, res, req.body);
    })().catch(() => {
      if (!res.headersSent) res.writeHead(500).end();
    });
  });
  handle = app as http.RequestListener;

  return {
    url,
    refused: () => refused,
    calls: () => calls,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
