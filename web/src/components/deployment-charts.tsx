/**
 * A deployment's traffic and resources as charts (GET /v2/deployments/{id}/metrics): per route (its own
 * URL, each endpoint) and per revision, requests, errors by class, p50/p99 latency, CPU and memory over
 * the last 15 minutes. An endpoint that served two revisions in the window (a move, a split) shows them
 * side by side, one column each, on the same steps.
 */
import { data } from '../api/client.ts';
import type { DeploymentMetrics, MetricsSeries } from '../api/types.ts';
import { useApp, useInterval, useResource } from '../hooks.ts';
import { LineChart } from './line-chart.tsx';
import { ErrorNotice } from './notice.tsx';

const REFRESH_MS = 10_000;
const COLORS = { a: '#0b5cad', b: '#c2410c', c: '#7c3aed' };

const count = (n: number) => n.toLocaleString('en');
function seconds(s: number): string {
  return s < 1 ? `${(s * 1000).toFixed(s < 0.01 ? 1 : 0)} ms` : `${s.toFixed(2)} s`;
}
const cores = (c: number) => `${c.toFixed(c < 0.1 ? 3 : 2)} CPU`;
const bytes = (b: number) => `${(b / 1024 / 1024).toFixed(1)} MiB`;
const last = (values: (number | null)[]) => [...values].reverse().find((v) => v !== null) ?? null;

function RevisionCharts({ series }: { series: MetricsSeries }) {
  const p = series.points;
  const errors = series.total.errors;
  const errorCount = errors['4xx'] + errors['5xx'] + errors.edge;
  const memory = last(p.map((x) => x.memory_bytes));
  const cpu = last(p.map((x) => x.cpu_cores));
  const latency = series.total.latency_seconds;
  return (
    <div
      class="chart-column"
      data-revision={series.revision_id ?? 'none'}
      data-requests={series.total.requests}
      data-errors={errorCount}
    >
      <h4>
        {series.revision_id === null ? (
          "Edge's own answers"
        ) : (
          <>
            Revision <code>{series.revision_id.slice(0, 8)}</code>
          </>
        )}
      </h4>
      <LineChart
        name="requests"
        title="Requests"
        summary={count(series.total.requests)}
        format={count}
        lines={[{ name: 'requests', values: p.map((x) => x.requests), color: COLORS.a }]}
      />
      <LineChart
        name="errors"
        title="Errors"
        summary={`${count(errorCount)} (4xx ${errors['4xx']}, 5xx ${errors['5xx']}, edge ${errors.edge})`}
        format={count}
        lines={[
          { name: '4xx', values: p.map((x) => x.errors['4xx']), color: COLORS.a },
          { name: '5xx', values: p.map((x) => x.errors['5xx']), color: COLORS.b },
          { name: 'edge', values: p.map((x) => x.errors.edge), color: COLORS.c },
        ]}
      />
      <LineChart
        name="latency"
        title="Latency p50 / p99"
        summary={
          latency.p50 === null || latency.p99 === null ? '–' : `${seconds(latency.p50)} / ${seconds(latency.p99)}`
        }
        format={seconds}
        lines={[
          { name: 'p50', values: p.map((x) => x.latency_seconds.p50), color: COLORS.a },
          { name: 'p99', values: p.map((x) => x.latency_seconds.p99), color: COLORS.b },
        ]}
      />
      <LineChart
        name="cpu"
        title="CPU"
        summary={cpu === null ? '–' : cores(cpu)}
        format={cores}
        lines={[{ name: 'cpu', values: p.map((x) => x.cpu_cores), color: COLORS.a }]}
      />
      <LineChart
        name="memory"
        title="Memory"
        summary={memory === null ? '–' : bytes(memory)}
        format={bytes}
        lines={[{ name: 'memory', values: p.map((x) => x.memory_bytes), color: COLORS.a }]}
      />
    </div>
  );
}

/** The series of one route, its revisions side by side (newest traffic first is not assumed: by id). */
function RouteCharts({ endpoint, series }: { endpoint: string | null; series: MetricsSeries[] }) {
  const revisions = series.filter((s) => s.revision_id !== null);
  const dropped = series.reduce((n, s) => n + s.total.dropped, 0);
  const edgeOnly = series.find((s) => s.revision_id === null && s.total.requests > 0);
  return (
    <section class="chart-route" data-endpoint={endpoint ?? ''} aria-label={endpoint ?? 'Stable URL'}>
      <h3>
        {endpoint === null ? (
          'Stable URL'
        ) : (
          <>
            Endpoint <code>{endpoint}</code>
          </>
        )}
        {revisions.length > 1 && <span class="muted"> — {revisions.length} revisions side by side</span>}
      </h3>
      {dropped > 0 && (
        <p class="notice" role="status">
          {count(dropped)} requests were served but not recorded (the edge's log was flooded): the charts miss them.
        </p>
      )}
      <div class={`chart-columns${revisions.length > 1 ? ' side-by-side' : ''}`}>
        {revisions.map((s) => (
          <RevisionCharts key={s.revision_id} series={s} />
        ))}
        {edgeOnly && <RevisionCharts series={edgeOnly} />}
      </div>
    </section>
  );
}

export function DeploymentCharts({ deploymentId }: { deploymentId: string }) {
  const { api } = useApp();
  const metrics = useResource<DeploymentMetrics>(
    () =>
      data(
        api.GET('/v2/deployments/{deployment_id}/metrics', {
          params: { path: { deployment_id: deploymentId }, query: { window: '15m' } },
        }),
      ),
    [deploymentId],
  );
  useInterval(() => metrics.reload(), REFRESH_MS, true);
  const value = metrics.value;
  const routes = new Map<string | null, MetricsSeries[]>();
  for (const s of value?.series ?? []) routes.set(s.endpoint, [...(routes.get(s.endpoint) ?? []), s]);
  return (
    <div class="charts" data-loaded={value ? 'yes' : 'no'}>
      <ErrorNotice error={metrics.error} />
      {value && !value.measured && (
        <p class="muted">This replica runs no app edge: its traffic is measured where the worker runs.</p>
      )}
      {value && value.measured && routes.size === 0 && <p class="muted">No traffic in the last 15 minutes.</p>}
      {[...routes].map(([endpoint, series]) => (
        <RouteCharts key={endpoint ?? ''} endpoint={endpoint} series={series} />
      ))}
      {value && (
        <p class="muted chart-note">
          Last 15 minutes in steps of {value.step_seconds} s, measured at the app edge; CPU and memory from the
          instances' cgroups.
        </p>
      )}
    </div>
  );
}
