/**
 * An MCP server that wants OAuth, on loopback, as the MCP authorization specification describes one:
 * built on @modelcontextprotocol/sdk's server (Streamable HTTP, stateless), its protected-resource
 * metadata (RFC 9728) naming the `oidc-provider` fake as its authorization server, and every request
 * checked by introspection at that server: an active token whose audience is this server's `/mcp`
 * (RFC 8707), else 401 with `WWW-Authenticate: Bearer resource_metadata=...`.
 *
 * One tool, `whoami`, answers the subject the token was issued for.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { OidcServer } from './oidc-server.ts';

export interface McpOAuthServer {
  /** The server's MCP endpoint, e.g. `http://127.0.0.1:41234/mcp`: its resource identifier. */
  url: string;
  /** Requests refused for their token. */
  refused(): number;
  close(): Promise<void>;
}

export async function startMcpOAuthServer(idp: Pick<OidcServer, 'issuer' | 'introspect'>): Promise<McpOAuthServer> {
  let base = '';
  let refused = 0;
  const server = http.createServer((req, res) => {
    void (async () => {
      const path = new URL(req.url ?? '/', 'http://localhost').pathname;
      const metadata = `${base}/.well-known/oauth-protected-resource/mcp`;
      if (path === '/.well-known/oauth-protected-resource/mcp' || path === '/.well-known/oauth-protected-resource') {
        res.writeHead(200, { 'content-type': 'application/json' }).end(
          JSON.stringify({
            resource: `${base}/mcp`,
            authorization_servers: [idp.issuer],
            scopes_supported: ['mcp:tools'],
            bearer_methods_supported: ['header'],
          }),
        );
        return;
      }
      if (path !== '/mcp') {
        res.writeHead(404).end();
        return;
      }
      const token = /^Bearer\s+(\S+)$/i.exec(req.headers.authorization ?? '')?.[1];
      const claims = token ? await idp.introspect(token) : null;
      const audiences = [claims?.aud].flat().filter((aud): aud is string => typeof aud === 'string');
      if (!claims?.active || !audiences.includes(`${base}/mcp`)) {
        refused += 1;
        res
          .writeHead(401, {
            'www-authenticate': `Bearer resource_metadata="${metadata}"${token ? ', error="invalid_token"' : ''}`,
          })
          .end();
        return;
      }
      const mcp = new McpServer({ name: 'fake-mcp', version: '1.0.0' });
      mcp.registerTool('whoami', { description: 'The subject the access token was issued for' }, async () => ({
        content: [{ type: 'text', text: String(claims.sub) }],
      }));
      const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
      res.on('close', () => {
        void transport.close();
        void mcp.close();
      });
      await mcp.connect(transport);
      await transport.handleRequest(req, res);
    })().catch(() => {
      if (!res.headersSent) res.writeHead(500).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url: `${base}/mcp`,
    refused: () => refused,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
