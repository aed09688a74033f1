/**
 * `GET /metrics` in the Prometheus text format (prom-client), without an API key like the health
 * endpoints, unless the operator set SLIPWAY_METRICS_TOKEN: then it needs `Authorization: Bearer
 * <token>` (docs/metrics.md). HTTP requests by route and status with latency histograms, deployments and revisions by
 * state, the local data plane's work queue (depth and age of its oldest item), listeners by state, the
 * database pool, and the process's own metrics. Each app has its own registry (no global state), so
 * tests and several apps in one process never share counters.
 *
 * Gauges that come from the database are read when scraped, in one query, so they are always true and
 * cost nothing between scrapes.
 *
 * The per-deployment series name every tenant's apps (deployment id, host label) with their traffic and
 * resources; they are shown only when the operator set the token. Open, /metrics is reached by anyone
 * who reaches the API, every app included (through its forward to the API), and would hand each of them
 * the other tenants' deployments and the host names of their apps.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import fastifyPlugin from 'fastify-plugin';
import type pg from 'pg';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import { AppError } from '../errors.ts';
import { errorResponses } from '../http/schema-helpers.ts';
import type { DatabaseGauges, MetricsService } from '../service/metrics.ts';
import { needs } from '../http/route-needs.ts';
import type { InstanceStats } from '../dataplane/app-supervisor.ts';
import { STATUS_CLASSES, type EdgeAppStats } from '../dataplane/edge-stats.ts';
import type { AppRuntimeStats } from '../dataplane/local-runtime.ts';
import { endpointOfLabel } from '../domain/endpoints.ts';
import type { RequestLogCounts } from '../dataplane/edge-request-log.ts';
import type { SeriesTotal } from '../dataplane/traffic-series.ts';
import { registerRevisionMetrics } from './metrics-revisions.ts';

export interface MetricsOptions {
  metrics: MetricsService;
  /** The service's pool, for its connection counts; absent in tools that have none. */
  pool?: pg.Pool;
  /** SLIPWAY_METRICS_TOKEN: when set, a scrape must send it as a bearer token; null leaves /metrics open. */
  token?: string | null;
  /**
   * The apps this process serves and runs (its app edge and local data plane), read when scraped; shown
   * only when `token` is set (they name every tenant's deployments).
   */
  apps?: () => Promise<AppMetrics | null>;
}

/** What /metrics shows of each app: the edge's counts by slug, and the running apps' instances. */
export interface AppMetrics {
  edge: Map<string, EdgeAppStats>;
  runtime: AppRuntimeStats[];
  /** The edge's counts per route and revision (latency histograms, errors by class). */
  traffic?: SeriesTotal[];
  /** What HAProxy's request log recorded, dropped and rejected; null for the built-in edge. */
  requestLog?: RequestLogCounts | null;
}

const digest = (text: string): Buffer => createHash('sha256').update(text).digest();

/**
 * Whether the request carries the metrics token. Both sides are hashed first, so the comparison is
 * constant-time whatever the lengths: the time of a refusal tells nothing about the token.
 */
function carriesToken(request: FastifyRequest, token: Buffer): boolean {
  const header = request.headers.authorization;
  const match = typeof header === 'string' ? /^Bearer[ \t]+(\S+)[ \t]*$/i.exec(header) : null;
  return timingSafeEqual(digest(match?.[1] ?? ''), token) && match !== null;
}

const metricsPlugin: FastifyPluginAsync<MetricsOptions> = async (app, { metrics, pool, token, apps }) => {
  const tokenDigest = token ? digest(token) : null;
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'slipway_' });

  const requests = new Counter({
    name: 'slipway_http_requests_total',
    help: 'HTTP requests answered by the API, by method, route template and status.',
    labelNames: ['method', 'route', 'status'] as const,
    registers: [registry],
  });
  const latency = new Histogram({
    name: 'slipway_http_request_duration_seconds',
    help: 'Time to answer API requests, by method, route template and status.',
    labelNames: ['method', 'route', 'status'] as const,
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [registry],
  });

  // Filled at scrape time from one query (src/store/metrics.ts); a failed read leaves them unset.
  let gauges: DatabaseGauges | null = null;
  new Gauge({
    name: 'slipway_deployments',
    help: 'Deployments by status.',
    labelNames: ['status'] as const,
    registers: [registry],
    collect() {
      this.reset();
      for (const row of gauges?.deployments ?? []) this.set({ status: row.status }, row.n);
    },
  });
  new Gauge({
    name: 'slipway_listeners',
    help: 'Listeners by state: never_seen, connected (seen in the last 90 s), stale.',
    labelNames: ['state'] as const,
    registers: [registry],
    collect() {
      this.reset();
      for (const row of gauges?.listeners ?? []) this.set({ state: row.status }, row.n);
    },
  });
  new Gauge({
    name: 'slipway_revisions',
    help: 'Revisions by status.',
    labelNames: ['status'] as const,
    registers: [registry],
    collect() {
      this.reset();
      for (const row of gauges?.revisions ?? []) this.set({ status: row.status }, row.n);
    },
  });
  new Gauge({
    name: 'slipway_work_queue_depth',
    help: 'Revisions of the local data plane waiting in QUEUED.',
    registers: [registry],
    collect() {
      if (gauges) this.set(gauges.queue.depth);
    },
  });
  new Gauge({
    name: 'slipway_work_queue_oldest_age_seconds',
    help: 'Age of the oldest QUEUED revision of the local data plane (0 when none waits).',
    registers: [registry],
    collect() {
      if (gauges) this.set(gauges.queue.oldest_seconds ?? 0);
    },
  });
  if (pool) {
    new Gauge({
      name: 'slipway_db_pool_connections',
      help: 'Connections of the service database pool, by state.',
      labelNames: ['state'] as const,
      registers: [registry],
      collect() {
        this.set({ state: 'total' }, pool.totalCount);
        this.set({ state: 'idle' }, pool.idleCount);
        this.set({ state: 'waiting' }, pool.waitingCount);
      },
    });
  }

  // Per deployment, filled at scrape time from the edge and the local data plane of this process.
  let appMetrics: AppMetrics | null = null;
  /**
   * The labels of a route the edge counts: its deployment, its host label, and for an endpoint's route
   * (`<slug>--<name>`) the endpoint's name. An endpoint whose instances the runtime no longer lists (it
   * was just moved or removed) is still told by its label, through its deployment's slug.
   */
  const labelsOf = (label: string): Partial<Record<(typeof appLabels)[number], string>> => {
    const runtime = appMetrics?.runtime ?? [];
    const own = runtime.find((r) => r.slug === label);
    if (own) return withEndpoint({ deployment_id: own.deploymentId, app: label }, own.endpoint);
    const deploymentSlug = (slug: string) => runtime.find((r) => r.slug === slug && r.endpoint === undefined);
    const endpoint = endpointOfLabel(label, (slug) => deploymentSlug(slug) !== undefined);
    if (endpoint)
      return { deployment_id: deploymentSlug(endpoint.slug)!.deploymentId, app: label, endpoint: endpoint.name };
    return { deployment_id: '', app: label };
  };
  // The deployment's own route keeps exactly its two labels; an endpoint's adds `endpoint`.
  const withEndpoint = <T extends object>(labels: T, endpoint: string | undefined) =>
    endpoint === undefined ? labels : { ...labels, endpoint };
  const appLabels = ['deployment_id', 'app', 'endpoint'] as const;
  const instanceLabels = ['deployment_id', 'app', 'endpoint', 'instance'] as const;
  new Counter({
    name: 'slipway_app_requests_total',
    help: "Requests to each app at its stable URL or an endpoint's (the app edge's count since the route was set).",
    labelNames: appLabels,
    registers: [registry],
    collect() {
      this.reset();
      for (const [slug, stats] of appMetrics?.edge ?? []) this.inc(labelsOf(slug), stats.requests);
    },
  });
  new Counter({
    name: 'slipway_app_responses_total',
    help: "Responses of each app at its stable URL or an endpoint's by status class, the edge's own 502/503 included.",
    labelNames: [...appLabels, 'code'] as const,
    registers: [registry],
    collect() {
      this.reset();
      for (const [slug, stats] of appMetrics?.edge ?? [])
        for (const code of STATUS_CLASSES) this.inc({ ...labelsOf(slug), code }, stats.responses[code]);
    },
  });
  new Gauge({
    name: 'slipway_app_response_time_average_seconds',
    help: 'Mean time to the end of the response over the latest (up to 1024) requests of each app.',
    labelNames: appLabels,
    registers: [registry],
    collect() {
      this.reset();
      for (const [slug, stats] of appMetrics?.edge ?? [])
        if (stats.averageResponseSeconds !== null) this.set(labelsOf(slug), stats.averageResponseSeconds);
    },
  });
  const eachInstance = (
    visit: (labels: Partial<Record<(typeof instanceLabels)[number], string>>, instance: InstanceStats) => void,
  ) => {
    for (const running of appMetrics?.runtime ?? [])
      for (const instance of running.instances)
        visit(
          {
            ...withEndpoint({ deployment_id: running.deploymentId, app: running.slug }, running.endpoint),
            instance: instance.instanceId,
          },
          instance,
        );
  };
  new Counter({
    name: 'slipway_app_instance_restarts_total',
    help: 'Times an app instance exited while it should run and was started again (since its revision started here).',
    labelNames: instanceLabels,
    registers: [registry],
    collect() {
      this.reset();
      eachInstance((labels, instance) => this.inc(labels, instance.restarts));
    },
  });
  new Counter({
    name: 'slipway_app_cpu_seconds_total',
    help: "CPU time of an app instance's current process tree, from its cgroup (starts again with each restart).",
    labelNames: instanceLabels,
    registers: [registry],
    collect() {
      this.reset();
      eachInstance((labels, instance) => {
        if (instance.usage.cpuSeconds !== null) this.inc(labels, instance.usage.cpuSeconds);
      });
    },
  });
  new Gauge({
    name: 'slipway_app_memory_bytes',
    help: "Memory an app instance's processes hold now (page cache included), from its cgroup.",
    labelNames: instanceLabels,
    registers: [registry],
    collect() {
      this.reset();
      eachInstance((labels, instance) => {
        if (instance.usage.memoryBytes !== null) this.set(labels, instance.usage.memoryBytes);
      });
    },
  });

  registerRevisionMetrics(registry, () =>
    appMetrics === null
      ? null
      : { totals: appMetrics.traffic ?? [], requestLog: appMetrics.requestLog ?? null, labelsOf },
  );

  // Counted for every route registered after this plugin (fastify-plugin puts the hook on the root
  // instance), by route template so that ids do not explode the label space.
  app.addHook('onResponse', async (request, reply) => {
    const route = request.routeOptions.url ?? 'unmatched';
    if (route === '/metrics') return;
    const labels = { method: request.method, route, status: String(reply.statusCode) };
    requests.inc(labels);
    latency.observe(labels, reply.elapsedTime / 1000);
  });

  const schema = {
    operationId: 'getMetrics',
    tags: ['operations'],
    summary: 'Metrics in the Prometheus text format',
    description:
      'Open by default; when the operator sets SLIPWAY_METRICS_TOKEN it needs Authorization: Bearer <that token> (401 otherwise). API keys do not open it.',
    response: {
      200: { content: { 'text/plain': { schema: { type: 'string' } } } },
      ...errorResponses(401),
    },
  };
  app.get('/metrics', { config: needs({ auth: 'none' }), schema }, async (request, reply) => {
    if (tokenDigest !== null && !carriesToken(request, tokenDigest)) {
      reply.header('www-authenticate', 'Bearer realm="metrics"');
      throw new AppError('unauthenticated', 'Metrics need Authorization: Bearer with the metrics token.');
    }
    try {
      gauges = await metrics.databaseGauges();
    } catch (error) {
      // The process metrics still help while the database is down; the database gauges are left out.
      request.log.warn({ err: error }, 'metrics: could not read the database gauges');
      gauges = null;
    }
    try {
      appMetrics = tokenDigest === null ? null : ((await apps?.()) ?? null);
    } catch (error) {
      request.log.warn({ err: error }, 'metrics: could not read the apps');
      appMetrics = null;
    }
    reply.header('content-type', registry.contentType);
    return registry.metrics();
  });
};

/** Register before the other routes: its hook counts the routes registered after it. */
export const metricsRoutes = fastifyPlugin(metricsPlugin, { name: 'slipway-metrics' });
