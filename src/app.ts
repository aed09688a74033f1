/**
 * buildApp(deps): the HTTP application with its plugins, routes and the one error handler. It never
 * listens; main.ts does, and tests use inject() or listen on port 0.
 */
import { randomUUID } from 'node:crypto';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import Fastify, { type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import type { Kysely } from 'kysely';
import type pg from 'pg';
import type { Logger } from 'pino';
import type { Config } from './config.ts';
import type { SecretBox } from './crypto/secret-box.ts';
import { registerAuthentication } from './http/authenticate.ts';
import { frameworkErrorHandler, registerErrorHandler } from './http/error-handler.ts';
import { clientErrorHandler, registerFrameworkAnswers } from './http/framework-answers.ts';
import { createAppConnections, type AppConnections } from './http/app-connections.ts';
import { trustProxyOption } from './http/client-address.ts';
import { capConnectionsPerAddress, headTimeoutOptions } from './http/connection-limits.ts';
import { registerJsonBodyParser } from './http/json-body.ts';
import { registerUnknownFieldChecks } from './http/unknown-fields.ts';
import { needs, registerRouteNeeds } from './http/route-needs.ts';
import { registerStreamLimits } from './http/stream-limits.ts';
import { registerOpenApiConventions, shapeDocument } from './http/openapi.ts';
import { ErrorBody, ROUTER_MAX_PARAM_LENGTH, ValidationErrorBody } from './http/schema-helpers.ts';
import { DeferredCompiles, serializerFactoryOnce } from './http/schema-cache.ts';
import { createValidatorCompiler } from './http/validation.ts';
import { adminRoutes } from './routes/admin.ts';
import { deploymentRoutes } from './routes/deployments.ts';
import { eventRoutes } from './routes/events.ts';
import { deploymentEndpointRoutes } from './routes/deployment-endpoints.ts';
import { deploymentMetricsRoutes } from './routes/deployment-metrics.ts';
import type { TrafficSeries } from './dataplane/traffic-series.ts';
import { deploymentPreviewRoutes } from './routes/deployment-previews.ts';
import { deploymentStorageRoutes } from './routes/deployment-storage.ts';
import { revisionLogRoutes } from './routes/revision-logs.ts';
import type { ChangeFeed } from './db/change-feed.ts';
import { healthRoutes } from './routes/health.ts';
import { langGraphCompatRoutes } from './routes/langgraph-compat.ts';
import { requestTracing } from './http/request-tracing.ts';
import { metricsRoutes, type MetricsOptions } from './routes/metrics.ts';
import { noTracing, type Tracing } from './telemetry/tracing.ts';
import { listenerRoutes } from './routes/listeners.ts';
import { listenerProtocolRoutes } from './routes/listener-protocol.ts';
import { protocolCredentialRoutes } from './routes/protocol-credentials.ts';
import { oauthRoutes } from './routes/oauth.ts';
import { tagRoutes } from './routes/tags.ts';
import { tracingProjectRoutes } from './routes/tracing-projects.ts';
import { uploadRoutes } from './routes/uploads.ts';
import { uploadUrlRoutes } from './routes/upload-urls.ts';
import { createServices, type Services } from './services.ts';
import { codehostRoutes } from './routes/codehost.ts';
import { ssoRoutes } from './routes/sso.ts';
import { registerSessionAudit } from './sso/session-audit.ts';
import { sessionCookieScheme } from './sso/session-cookie.ts';
import { createSessionCredentials } from './sso/session-credentials.ts';
import { dashboardRoutes } from './routes/dashboard.ts';
import type { GitHubClientOptions } from './codehost/github-client.ts';
import type { Database } from './store/schema.ts';
import type { FetchLike } from './sso/oidc-client.ts';

export interface AppDeps {
  config: Config;
  db: Kysely<Database>;
  secretBox: SecretBox;
  logger: Logger;
  /** The domain services (src/services.ts); main.ts passes the ones its worker uses too. Built from the deps above when absent. */
  services?: Services;
  /** Options of every code-host client (timeouts, retries, clock) when buildApp builds the services; tests turn retries down. */
  codehostClient?: Omit<GitHubClientOptions, 'apiUrl'>;
  /**
   * The clock of the services buildApp builds (the expiry of OAuth tokens, OAuth authorizations,
   * upload URLs and dashboard sessions; listeners' state) and of idempotency keys (their TTL, leases and
   * waits); tests move it instead of waiting. Without it, what the database dates goes by its `now()`
   * (src/store/sql-now.ts).
   */
  now?: () => Date;
  /** Wakes log followers (follow=true); without it they poll the database every second. */
  changes?: ChangeFeed;
  /** The service's pool, for the connection gauges of /metrics. */
  pool?: pg.Pool;
  /** Replaces fetch towards the single sign-on provider (tests that play a provider gone wrong). */
  ssoFetch?: FetchLike;
  /** Traces of API requests (src/telemetry/tracing.ts); none when absent. */
  tracing?: Tracing;
  /** The apps this process serves and runs, for the per-deployment metrics of /metrics. */
  apps?: MetricsOptions['apps'];
  /** The series of this process's app edge, for GET /v2/deployments/{id}/metrics (when `services` is not given). */
  traffic?: () => TrafficSeries | null;
}

declare module 'fastify' {
  interface FastifyInstance {
    /** Takes the connections apps open through their own way to the API (the local data plane's forwards). */
    appConnections: AppConnections;
    /** The routes' schema compilations not yet needed (src/http/schema-cache.ts); `all()` runs them. */
    schemaCompiles: DeferredCompiles;
  }
}

const REQUEST_ID = /^[\x21-\x7e]{1,200}$/;

export async function buildApp(deps: AppDeps): Promise<FastifyInstance> {
  const { config, db, secretBox, logger } = deps;
  // The routes' validators and serializers, each compiled when first used (src/http/schema-cache.ts).
  const compiles = new DeferredCompiles();
  // Typed as Fastify's logger, so that the app's type is FastifyInstance's default one.
  const loggerInstance: FastifyBaseLogger = logger;
  const app = Fastify({
    loggerInstance,
    bodyLimit: config.bodyLimitBytes,
    // Echo the caller's request id when it sent a sane one, else make one (docs/api.md, "Conventions").
    requestIdHeader: false,
    genReqId: (request) => {
      const given = request.headers['x-request-id'];
      return typeof given === 'string' && REQUEST_ID.test(given) ? given : randomUUID();
    },
    // registerFrameworkAnswers answers requests that arrive while closing, in the error envelope.
    return503OnClosing: false,
    frameworkErrors: (error, request, reply) => {
      frameworkErrorHandler(error, request, reply);
    },
    // Requests Node's HTTP parser refuses get the error envelope and a request id too.
    clientErrorHandler,
    // No bare 400 from Node for a missing Host: registerFrameworkAnswers answers it in the envelope.
    http: { requireHostHeader: false, ...headTimeoutOptions(config) },
    // Ids and names are documented up to 256 characters; Fastify's default stops at 100.
    routerOptions: { maxParamLength: ROUTER_MAX_PARAM_LENGTH },
    // X-Forwarded-For from the operator's proxies only (src/http/client-address.ts).
    trustProxy: trustProxyOption(config.trustedProxies),
    // Registering the routes does no I/O, but on a host whose CPUs other work keeps busy it can take
    // longer than avvio's default of 10 s, which would fail the start; a plugin that really hangs is
    // still named, after two minutes.
    pluginTimeout: 120_000,
    // Fastify's response serializers, each distinct schema compiled once (src/http/schema-cache.ts).
    schemaController: { compilersFactory: { buildSerializer: serializerFactoryOnce(compiles) } },
  }).withTypeProvider<TypeBoxTypeProvider>();

  // Apps' own connections (src/http/app-connections.ts), for main.ts to hand to the local data plane.
  const appConnections = createAppConnections(app.server, () => app.ready());
  app.decorate('appConnections', appConnections);
  app.decorate('schemaCompiles', compiles);
  // An app's connections are capped by its forward, not by an address they do not have.
  capConnectionsPerAddress(
    app.server,
    config.maxConnectionsPerAddress,
    (socket) => appConnections.originOf(socket) !== null,
  );
  // A JSON API: a text/plain body is a client mistake, answered 415 like any other non-JSON type.
  app.removeContentTypeParser('text/plain');
  registerJsonBodyParser(app);
  app.setValidatorCompiler(createValidatorCompiler(compiles));
  registerUnknownFieldChecks(app);
  app.addHook('onRequest', async (request, reply) => {
    reply.header('x-request-id', request.id);
  });
  // A span for every request, started before any hook can answer it (authentication refusals included).
  await app.register(requestTracing, { tracing: deps.tracing ?? noTracing });
  registerFrameworkAnswers(app);
  registerErrorHandler(app);
  app.addSchema(ErrorBody);
  app.addSchema(ValidationErrorBody);

  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'Slipway',
        version: '0.1.0',
        description:
          'Self-hosted deployment control plane for agent applications. Authenticate with X-Api-Key ' +
          '(or Authorization: Bearer); in the dashboard, the single sign-on session cookie stands in for a key ' +
          "(changes made with it only from the service's own origin). Pick a workspace with X-Tenant-Id. " +
          'Body fields and query parameters ' +
          'an operation does not list are ignored, so clients may send extra ones; those it lists are ' +
          'validated (422). Secret values are write-only: answers show each secret with the value "********".',
      },
      components: {
        securitySchemes: {
          apiKey: { type: 'apiKey', in: 'header', name: 'X-Api-Key' },
          bearer: { type: 'http', scheme: 'bearer' },
          sessionCookie: sessionCookieScheme(config.publicUrl),
        },
      },
      security: [{ apiKey: [] }, { bearer: [] }, { sessionCookie: [] }],
    },
    refResolver: {
      buildLocalReference: (json, _baseUri, _fragment, i) => (typeof json.$id === 'string' ? json.$id : `def-${i}`),
    },
    // Named schemas and shared error responses (src/http/openapi.ts).
    transformObject: (document) =>
      'openapiObject' in document ? shapeDocument(document.openapiObject) : document.swaggerObject,
  });
  registerOpenApiConventions(app);
  // The API page and its assets are public, like /openapi.json: said here, of the routes of its plugin
  // only (they are declared by @fastify/swagger-ui, which takes no route options).
  await app.register(async (page) => {
    page.addHook('onRoute', (route) => {
      route.config = { ...route.config, auth: 'none' };
    });
    await page.register(swaggerUi, { routePrefix: '/docs', uiConfig: { docExpansion: 'list' } });
  });

  // The dashboard's single sign-on cookie is a credential too (src/sso/); every write it makes is audited.
  const sessions = createSessionCredentials({
    db,
    publicUrl: config.publicUrl,
    ...(deps.now ? { now: deps.now } : {}),
  });
  const authentication = registerAuthentication(app, db, sessions);
  registerSessionAudit(app, db);
  // Before the routes: wires what each route declares it needs (config: needs({...})) into it.
  registerRouteNeeds(app, db, authentication, deps.now);
  registerStreamLimits(app, config.streams, appConnections);
  const services =
    deps.services ??
    createServices({
      config,
      db,
      secretBox,
      logger,
      codehostClient: deps.codehostClient,
      ...(deps.pool ? { pool: deps.pool } : {}),
      ...(deps.ssoFetch ? { ssoFetch: deps.ssoFetch } : {}),
      ...(deps.now ? { now: deps.now } : {}),
      ...(deps.traffic ? { traffic: deps.traffic } : {}),
    });
  const { deployments } = services;

  // First: its response hook counts every route registered after it.
  await app.register(metricsRoutes, {
    metrics: services.metrics,
    pool: deps.pool,
    token: config.metricsToken,
    ...(deps.apps ? { apps: deps.apps } : {}),
  });
  await app.register(healthRoutes, { db });
  // A worker-only replica (SLIPWAY_ROLES=worker) serves health checks, not the API (its apps are on the edge).
  if (config.roles.includes('api')) {
    await app.register(adminRoutes, { workspaces: services.workspaces, apiKeys: services.apiKeys });
    await app.register(deploymentRoutes, { deployments });
    await app.register(eventRoutes, { deployments });
    await app.register(deploymentStorageRoutes, { storage: services.deploymentStorage });
    await app.register(deploymentEndpointRoutes, { endpoints: services.endpoints, splits: services.splits });
    await app.register(deploymentMetricsRoutes, { metrics: services.deploymentMetrics });
    await app.register(deploymentPreviewRoutes, { previews: services.previews });
    await app.register(revisionLogRoutes, { logs: services.revisionLogs, changes: deps.changes });
    await app.register(listenerRoutes, { listeners: services.listeners });
    await app.register(listenerProtocolRoutes, {
      db,
      protocol: services.listenerProtocol,
      listeners: services.listeners,
      changes: deps.changes,
    });
    await app.register(oauthRoutes, {
      providers: services.oauthProviders,
      flow: services.oauthFlow,
      tokens: services.oauthTokens,
      connections: services.agentConnections,
      credentials: services.agentCredentials,
    });
    await app.register(protocolCredentialRoutes, { credentials: services.protocolCredentials });
    await app.register(tagRoutes, { tags: services.tags });
    await app.register(tracingProjectRoutes, { tracingProjects: services.tracingProjects });
    await app.register(uploadRoutes, { uploads: services.uploads, limitBytes: config.uploadLimitBytes });
    await app.register(uploadUrlRoutes, { uploads: services.uploads, limitBytes: config.uploadLimitBytes });
    await app.register(langGraphCompatRoutes, { logs: services.revisionLogs, deployments });
    await app.register(codehostRoutes, { config, integrations: services.integrations, webhooks: services.webhooks });
    await app.register(ssoRoutes, { sso: services.sso, sessions, publicUrl: config.publicUrl });
    // Last: its catch-all for the pages' own paths yields to every API route (src/routes/dashboard.ts).
    await app.register(dashboardRoutes);
  }

  app.get('/openapi.json', { config: needs({ auth: 'none' }), schema: { hide: true } }, async () => app.swagger());
  return app;
}
