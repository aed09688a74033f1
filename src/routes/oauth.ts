/**
 * The auth service as one plugin: OAuth providers, the authorization flow and its tokens,
 * agent connections, and the agent credentials deployed agents fetch tokens with. The services come
 * from the composition root (src/services.ts); docs/oauth.md describes the whole.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { AgentConnectionService } from '../service/agent-connections.ts';
import type { AgentCredentialService } from '../service/agent-credentials.ts';
import type { OAuthFlowService } from '../service/oauth-flow.ts';
import type { OAuthProviderService } from '../service/oauth-providers.ts';
import type { OAuthTokenService } from '../service/oauth-tokens.ts';
import { agentConnectionRoutes } from './agent-connections.ts';
import { oauthFlowRoutes } from './oauth-flow.ts';
import { oauthProviderRoutes } from './oauth-providers.ts';

export interface OAuthRoutesOptions {
  providers: OAuthProviderService;
  flow: OAuthFlowService;
  tokens: OAuthTokenService;
  connections: AgentConnectionService;
  credentials: AgentCredentialService;
}

export const oauthRoutes: FastifyPluginAsyncTypebox<OAuthRoutesOptions> = async (
  app,
  { providers, flow, tokens, connections, credentials },
) => {
  await app.register(oauthProviderRoutes, { providers });
  await app.register(oauthFlowRoutes, { flow, tokens });
  await app.register(agentConnectionRoutes, { connections, credentials });
};
