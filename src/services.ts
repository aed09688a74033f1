/**
 * The composition root: every service of the domain, built once from the process's dependencies.
 * buildApp (src/app.ts) hands them to the routes, and src/main.ts hands the same ones to the worker
 * (src/dataplane/local-data-plane.ts), so both sides share one code-host client cache and one
 * in-process refresh of each OAuth token. No service builds another.
 */
import type { TrafficSeries } from './dataplane/traffic-series.ts';
import { createDeploymentMetricsService } from './service/deployment-metrics.ts';
import type { Kysely } from 'kysely';
import type pg from 'pg';
import type { Logger } from 'pino';
import type { GitHubClientOptions } from './codehost/github-client.ts';
import type { Config } from './config.ts';
import type { SecretBox } from './crypto/secret-box.ts';
import { OAuthClient } from './oauth/oauth-client.ts';
import { createAgentConnectionService } from './service/agent-connections.ts';
import { createProtocolCredentialService } from './service/protocol-credentials.ts';
import { createAgentCredentialService } from './service/agent-credentials.ts';
import { createApiKeyService } from './service/api-keys.ts';
import { createCodehostIntegrationService } from './service/codehost-integrations.ts';
import { createWebhookService } from './service/codehost-webhooks.ts';
import { createPreviewService } from './service/pull-request-previews.ts';
import { createDeploymentService } from './service/deployments.ts';
import { createEndpointService } from './service/deployment-endpoints.ts';
import { createSplitService } from './service/endpoint-splits.ts';
import { createDeploymentStorageService } from './service/deployment-storage.ts';
import { resourcePolicyOf } from './service/resource-quotas.ts';
import { createListenerProtocolService } from './service/listener-protocol.ts';
import { createListenerService } from './service/listeners.ts';
import { createMetricsService } from './service/metrics.ts';
import { createOAuthFlowService } from './service/oauth-flow.ts';
import { createOAuthProviderService } from './service/oauth-providers.ts';
import { createOAuthTokenService } from './service/oauth-tokens.ts';
import { createRevisionLogService } from './service/revision-logs.ts';
import { createTagService } from './service/tags.ts';
import { createTracingProjectService } from './service/tracing-projects.ts';
import { createUploadService } from './service/uploads.ts';
import { createWorkspaceService } from './service/workspaces.ts';
import type { FetchLike } from './sso/oidc-client.ts';
import { createSsoService } from './sso/sso-service.ts';
import type { Database } from './store/schema.ts';

export interface ServiceDeps {
  config: Pick<
    Config,
    | 'allowInsecureCodehost'
    | 'codehostAllowedUrls'
    | 'previewsPerDeployment'
    | 'allowInsecureOAuth'
    | 'publicUrl'
    | 'uploadLimitBytes'
    | 'dataDir'
    | 'limits'
    | 'defaultLimits'
    | 'sso'
  >;
  db: Kysely<Database>;
  secretBox: SecretBox;
  logger: Logger;
  /** Options of every code-host client (timeouts, retries, clock); tests turn retries down. */
  codehostClient?: Omit<GitHubClientOptions, 'apiUrl'>;
  /** The database's own pool, for what reads app databases' sizes (deployment storage); the db's otherwise. */
  pool?: pg.Pool;
  /** How SSO reaches the identity provider; tests pass a fake's. */
  ssoFetch?: FetchLike;
  /**
   * The clock the expiry of OAuth tokens, OAuth authorizations, upload URLs and dashboard sessions, and
   * listeners' state (connected, stale), are computed and read against; tests move it instead of waiting.
   */
  now?: () => Date;
  /** The app edge's series (src/dataplane/traffic-series.ts) once it runs in this process; null before or without. */
  traffic?: () => TrafficSeries | null;
}

export function createServices({
  config,
  db,
  secretBox,
  logger,
  codehostClient,
  pool,
  ssoFetch,
  now,
  traffic,
}: ServiceDeps) {
  const integrations = createCodehostIntegrationService({
    db,
    secretBox,
    allowInsecure: config.allowInsecureCodehost,
    allowedApiUrls: config.codehostAllowedUrls,
    logger,
    clientOptions: codehostClient,
  });
  const resources = resourcePolicyOf(config);
  const deployments = createDeploymentService({
    db,
    secretBox,
    repositories: integrations.repositories,
    resources,
  });

  const previews = createPreviewService({ db, defaultMaxPreviews: config.previewsPerDeployment, resources });

  const oauthClient = new OAuthClient({ allowInsecure: config.allowInsecureOAuth, ...(now ? { now } : {}) });
  const oauthProviders = createOAuthProviderService({
    db,
    secretBox,
    allowInsecure: config.allowInsecureOAuth,
    client: oauthClient,
    publicUrl: config.publicUrl,
  });
  const oauthTokens = createOAuthTokenService({
    db,
    secretBox,
    client: oauthClient,
    providers: oauthProviders,
    logger,
    ...(now ? { now } : {}),
  });
  const agentCredentials = createAgentCredentialService({ db });

  return {
    deployments,
    listeners: createListenerService({ db, ...(now ? { now } : {}) }),
    listenerProtocol: createListenerProtocolService({ db, secretBox, ...(now ? { now } : {}) }),
    workspaces: createWorkspaceService({ db, resources }),
    apiKeys: createApiKeyService({ db }),
    integrations,
    webhooks: createWebhookService({ db, integrations, deployments, previews }),
    previews,
    oauthProviders,
    oauthTokens,
    oauthFlow: createOAuthFlowService({
      db,
      secretBox,
      client: oauthClient,
      providers: oauthProviders,
      logger,
      publicUrl: config.publicUrl,
      ...(now ? { now } : {}),
    }),
    agentCredentials,
    protocolCredentials: createProtocolCredentialService({ db }),
    agentConnections: createAgentConnectionService({ db, tokens: oauthTokens }),
    tags: createTagService({ db }),
    endpoints: createEndpointService({ db, resources }),
    splits: createSplitService({ db, resources, ...(now ? { now } : {}) }),
    revisionLogs: createRevisionLogService({ db }),
    uploads: createUploadService({
      db,
      dataDir: config.dataDir,
      limitBytes: config.uploadLimitBytes,
      publicUrl: config.publicUrl,
      ...(now ? { now } : {}),
    }),
    tracingProjects: createTracingProjectService({ db }),
    metrics: createMetricsService({ db, ...(now ? { now } : {}) }),
    deploymentMetrics: createDeploymentMetricsService({ db, traffic: traffic ?? (() => null) }),
    deploymentStorage: createDeploymentStorageService({ db, secretBox, ...(pool ? { pool } : {}) }),
    sso: createSsoService({
      db,
      secretBox,
      sso: config.sso,
      publicUrl: config.publicUrl,
      allowInsecure: config.allowInsecureOAuth,
      fetch: ssoFetch,
      ...(now ? { now } : {}),
    }),
  };
}

export type Services = ReturnType<typeof createServices>;
