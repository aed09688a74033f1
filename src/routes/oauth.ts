/**
 * The auth service of issue 4 as one plugin: OAuth providers, the authorization flow and its tokens,
 * agent connections, and the agent credentials deployed agents fetch tokens with. The OAuth client
 * and the services are built here from the app's dependencies; docs/oauth.md describes the whole.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { Kysely } from 'kysely';
import type { Config } from '../config.ts';
import type { SecretBox } from '../crypto/secret-box.ts';
import { OAuthClient, type FetchLike } from '../oauth/oauth-client.ts';
import { createOAuthFlowService } from '../service/oauth-flow.ts';
import { createOAuthProviderService } from '../service/oauth-providers.ts';
import { createOAuthTokenService } from '../service/oauth-tokens.ts';
import type { Database } from '../store/schema.ts';
import { agentConnectionRoutes } from './agent-connections.ts';
import { oauthFlowRoutes } from './oauth-flow.ts';
import { oauthProviderRoutes } from './oauth-providers.ts';

export interface OAuthRoutesOptions {
  db: Kysely<Database>;
  secretBox: SecretBox;
  config: Pick<Config, 'allowInsecureOAuth' | 'publicUrl'>;
  /** Replaces global fetch for requests to identity providers (proxies, tests). */
  fetch?: FetchLike;
}

export const oauthRoutes: FastifyPluginAsyncTypebox<OAuthRoutesOptions> = async (app, { db, secretBox, config, fetch }) => {
  const client = new OAuthClient({ allowInsecure: config.allowInsecureOAuth, ...(fetch ? { fetch } : {}) });
  const logger = app.log;
  const providers = createOAuthProviderService({ db, secretBox, allowInsecure: config.allowInsecureOAuth });
  const tokens = createOAuthTokenService({ db, secretBox, client, providers, logger });
  const flow = createOAuthFlowService({ db, secretBox, client, providers, logger, publicUrl: config.publicUrl });

  await app.register(oauthProviderRoutes, { providers });
  await app.register(oauthFlowRoutes, { db, flow, tokens });
  await app.register(agentConnectionRoutes, { db, tokens });
};
