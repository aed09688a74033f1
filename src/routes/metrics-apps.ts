/**
 * The per-deployment series on /metrics (docs/metrics.md): each app's requests, responses by class and
 * response time at the edge, each instance's restarts, CPU and memory, and the series per revision
 * (./metrics-revisions.ts). Filled at scrape time from what the app edge and the local data plane of this
 * process report; src/routes/metrics.ts shows them only with the metrics token.
 */
import { Counter, Gauge, type Registry } from 'prom-client';
import type { InstanceStats } from '../dataplane/app-supervisor.ts';
import { STATUS_CLASSES, type EdgeAppStats } from '../dataplane/edge-stats.ts';
import type { AppRuntimeStats } from '../dataplane/local-runtime.ts';
import { endpointOfLabel } from '../domain/endpoints.ts';
import type { RequestLogCounts } from '../dataplane/edge-request-log.ts';
import type { SeriesTotal } from '../dataplane/traffic-series.ts';
import { registerRevisionMetrics } from './metrics-revisions.ts';

/** What /metrics shows of each app: the edge's counts by slug, and the running apps' instances. */
export interface AppMetrics {
  edge: Map<string, EdgeAppStats>;
  runtime: AppRuntimeStats[];
  /** The edge's counts per route and revision (latency histograms, errors by class). */
  traffic?: SeriesTotal[];
  /** What HAProxy's request log recorded, dropped and rejected; null for the built-in edge. */
  requestLog?: RequestLogCounts | null;
}

/** Registers the per-deployment series, which read `current()` (the apps as of this scrape) when collected. */
export function registerAppMetrics(registry: Registry, current: () => AppMetrics | null): void {
  /**
   * The labels of a route the edge counts: its deployment, its host label, and for an endpoint's route
   * (`<slug>--<name>`) the endpoint's name. An endpoint whose instances the runtime no longer lists (it
   * was just moved or removed) is still told by its label, through its deployment's slug.
   */
  const labelsOf = (label: string): Partial<Record<(typeof appLabels)[number], string>> => {
    const runtime = current()?.runtime ?? [];
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
      for (const [slug, stats] of current()?.edge ?? []) this.inc(labelsOf(slug), stats.requests);
    },
  });
  new Counter({
    name: 'slipway_app_responses_total',
    help: "Responses of each app at its stable URL or an endpoint's by status class, the edge's own 502/503 included.",
    labelNames: [...appLabels, 'code'] as const,
    registers: [registry],
    collect() {
      this.reset();
      for (const [slug, stats] of current()?.edge ?? [])
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
      for (const [slug, stats] of current()?.edge ?? [])
        if (stats.averageResponseSeconds !== null) this.set(labelsOf(slug), stats.averageResponseSeconds);
    },
  });
  const eachInstance = (
    visit: (labels: Partial<Record<(typeof instanceLabels)[number], string>>, instance: InstanceStats) => void,
  ) => {
    for (const running of current()?.runtime ?? [])
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

  registerRevisionMetrics(registry, () => {
    const appMetrics = current();
    return appMetrics === null
      ? null
      : { totals: appMetrics.traffic ?? [], requestLog: appMetrics.requestLog ?? null, labelsOf };
  });
}
