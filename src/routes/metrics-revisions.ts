/**
 * The series per revision on /metrics (docs/metrics.md): each route's latency histogram and errors by
 * class, per revision, from the app edge's counts since each series began (src/dataplane/traffic-series.ts),
 * and what HAProxy's request log recorded, dropped and rejected. Filled at scrape time, like the other
 * per-deployment series, and shown only with the metrics token.
 */
import { Counter, type Registry } from 'prom-client';
import type { RequestLogCounts } from '../dataplane/edge-request-log.ts';
import { ERROR_CLASSES, LATENCY_BOUNDS, PROMETHEUS_BOUNDS, type SeriesTotal } from '../dataplane/traffic-series.ts';

type Labels = Partial<Record<'deployment_id' | 'app' | 'endpoint', string>>;

export interface RevisionMetricsSource {
  totals: SeriesTotal[];
  requestLog: RequestLogCounts | null;
  /** The deployment and endpoint of a route's host label. */
  labelsOf(label: string): Labels;
}

const HISTOGRAM = 'slipway_app_request_duration_seconds';

/** The Prometheus lines of one histogram: cumulative counts at PROMETHEUS_BOUNDS, +Inf, sum and count. */
function histogramValues(labels: Record<string, string>, total: SeriesTotal) {
  const values: { metricName: string; labels: Record<string, string | number>; value: number }[] = [];
  let cumulative = 0;
  let next = 0;
  for (const bound of PROMETHEUS_BOUNDS) {
    while (next < LATENCY_BOUNDS.length && LATENCY_BOUNDS[next]! <= bound) cumulative += total.latency[next++]!;
    values.push({ metricName: `${HISTOGRAM}_bucket`, labels: { ...labels, le: bound }, value: cumulative });
  }
  values.push({ metricName: `${HISTOGRAM}_bucket`, labels: { ...labels, le: '+Inf' }, value: total.requests });
  values.push({ metricName: `${HISTOGRAM}_sum`, labels, value: total.latencySum });
  values.push({ metricName: `${HISTOGRAM}_count`, labels, value: total.requests });
  return values;
}

export function registerRevisionMetrics(registry: Registry, read: () => RevisionMetricsSource | null): void {
  const labelsOf = (source: RevisionMetricsSource, total: SeriesTotal) => ({
    ...source.labelsOf(total.label),
    revision: total.revisionId ?? '',
  });
  // prom-client's Histogram counts one observation at a time; these counts are kept by the edge already.
  const help = "Time from a request's arrival at the app edge to the end of its response, per route and revision.";
  registry.registerMetric({
    name: HISTOGRAM,
    help,
    type: 'histogram',
    get: async () => {
      const source = read();
      return {
        name: HISTOGRAM,
        help,
        type: 'histogram',
        aggregator: 'sum',
        values: (source?.totals ?? []).flatMap((total) =>
          histogramValues(
            Object.fromEntries(Object.entries(labelsOf(source!, total)).filter(([, v]) => v !== undefined)) as Record<
              string,
              string
            >,
            total,
          ),
        ),
      };
    },
    reset: () => undefined,
  } as unknown as Parameters<Registry['registerMetric']>[0]);

  new Counter({
    name: 'slipway_app_request_errors_total',
    help: "Errors per route and revision by class: the app's 4xx and 5xx, and the edge's own answers (edge).",
    labelNames: ['deployment_id', 'app', 'endpoint', 'revision', 'class'] as const,
    registers: [registry],
    collect() {
      this.reset();
      const source = read();
      for (const total of source?.totals ?? [])
        for (const cls of ERROR_CLASSES) this.inc({ ...labelsOf(source!, total), class: cls }, total.errors[cls]);
    },
  });
  new Counter({
    name: 'slipway_edge_request_log_lines_total',
    help: "HAProxy's request log lines: recorded, dropped (the queue was full), rejected (not the edge's).",
    labelNames: ['outcome'] as const,
    registers: [registry],
    collect() {
      this.reset();
      const counts = read()?.requestLog;
      if (!counts) return;
      this.inc({ outcome: 'recorded' }, counts.recorded);
      this.inc({ outcome: 'dropped' }, counts.dropped);
      this.inc({ outcome: 'rejected' }, counts.rejected);
    },
  });
}
