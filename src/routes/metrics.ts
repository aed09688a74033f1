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
import { registerAppMetrics, type AppMetrics } from './metrics-apps.ts';

export type { AppMetrics } from './metrics-apps.ts';

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
  registerAppMetrics(registry, () => appMetrics);

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
