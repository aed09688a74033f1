/**
 * `GET /v2/deployments/{deployment_id}/metrics`: a deployment's series per route (its own URL and each
 * endpoint) and per revision, from the app edge (docs/metrics.md, "Series per revision"). An addition to
 * the interface: no existing shape changes.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import { workspaceOf } from '../http/authenticate.ts';
import { needs } from '../http/route-needs.ts';
import { DateTime, Nullable, Uuid, errorResponses } from '../http/schema-helpers.ts';
import {
  parseSeriesWindow,
  type DeploymentMetricsService,
  type DeploymentSeries,
} from '../service/deployment-metrics.ts';
import type { SeriesPoint } from '../dataplane/traffic-series.ts';

const Seconds = (description: string) => Nullable(Type.Number({ description }));

const Errors = Type.Object(
  {
    '4xx': Type.Integer({ description: "The app's own 4xx answers." }),
    '5xx': Type.Integer({ description: "The app's own 5xx answers." }),
    edge: Type.Integer({
      description:
        "The edge's own answers: no instance running, none accepted the connection, none answered in time (502, 503, 504).",
    }),
  },
  { title: 'DeploymentMetricsErrors' },
);

const Latency = Type.Object(
  {
    p50: Seconds('Median time from the request to the end of its response at the app edge; null without requests.'),
    p90: Seconds('90th percentile.'),
    p99: Seconds('99th percentile.'),
  },
  {
    title: 'DeploymentMetricsLatency',
    description: 'Seconds, from a histogram (each value within a third of the true one).',
  },
);

const Point = Type.Object(
  {
    start: DateTime({ description: 'Start of the step.' }),
    requests: Type.Integer({ description: 'Requests answered in the step (errors included).' }),
    errors: Errors,
    latency_seconds: Latency,
    cpu_cores: Seconds("Mean CPU the revision's instances used over the step, in cores; null when not measured."),
    memory_bytes: Seconds("Highest memory the revision's instances held in the step; null when not measured."),
    dropped: Type.Integer({
      description:
        'Requests the edge served but could not record in the step (its buffer was full in a flood): they are in no other count. On the series without a revision.',
    }),
  },
  { title: 'DeploymentMetricsPoint' },
);

const Series = Type.Object(
  {
    endpoint: Nullable(Type.String({ description: "The endpoint's name; null for the deployment's own URL." })),
    revision_id: Nullable(
      Uuid({
        description: "The revision that answered; null for the edge's own answers and dropped records.",
      }),
    ),
    points: Type.Array(Point, { description: 'Oldest first, one per step, up to now.' }),
    total: Type.Object(
      {
        requests: Type.Integer(),
        errors: Errors,
        latency_seconds: Latency,
        dropped: Type.Integer(),
      },
      { description: 'Over the whole window.' },
    ),
  },
  { title: 'DeploymentMetricsSeries' },
);

const SeriesList = Type.Object(
  {
    deployment_id: Uuid(),
    window_seconds: Type.Integer(),
    step_seconds: Type.Integer(),
    measured: Type.Boolean({
      description:
        'False when the replica that answered runs no app edge (SLIPWAY_ROLES without worker): its series are empty.',
    }),
    series: Type.Array(Series, {
      description:
        'Per route (own URL first, then endpoints by name) and revision; a route or revision without any request, ' +
        'sample or drop in the window is left out. Two revisions of one endpoint (a move, a split) are two series.',
    }),
  },
  { title: 'DeploymentMetrics' },
);

const point = (p: SeriesPoint) => ({
  start: new Date(p.at).toISOString(),
  requests: p.requests,
  errors: p.errors,
  latency_seconds: p.latency,
  cpu_cores: p.cpuCores,
  memory_bytes: p.memoryBytes,
  dropped: p.dropped,
});

const response = (found: DeploymentSeries) => ({
  deployment_id: found.deploymentId,
  window_seconds: found.window.windowSeconds,
  step_seconds: found.window.stepSeconds,
  measured: found.measured,
  series: found.series.map((s) => ({
    endpoint: s.endpoint,
    revision_id: s.revisionId,
    points: s.points.map(point),
    total: {
      requests: s.total.requests,
      errors: s.total.errors,
      latency_seconds: s.total.latency,
      dropped: s.total.dropped,
    },
  })),
});

export const deploymentMetricsRoutes: FastifyPluginAsyncTypebox<{ metrics: DeploymentMetricsService }> = async (
  app,
  { metrics },
) => {
  app.get(
    '/v2/deployments/:deployment_id/metrics',
    {
      config: needs({ auth: 'workspace' }),
      schema: {
        operationId: 'getDeploymentMetrics',
        tags: ['deployments'],
        summary: "A deployment's requests, errors, latency, CPU and memory as series",
        description:
          "Per route (the deployment's own URL and each endpoint) and per revision, measured at the app edge and from " +
          "the instances' cgroups, in steps over the last hour at most. Kept in the memory of the replica that runs the " +
          'app edge (lost when it restarts). `window`: 1m to 1h (default 15m); `step`: a multiple of 10s giving at most ' +
          '360 points (default: at most 60). A window or step out of those bounds is 400.',
        params: Type.Object({ deployment_id: Uuid() }),
        querystring: Type.Object({
          window: Type.Optional(Type.String({ maxLength: 16, description: 'Such as 90s, 15m, 1h.' })),
          step: Type.Optional(Type.String({ maxLength: 16, description: 'Such as 10s, 1m.' })),
        }),
        response: { 200: SeriesList, ...errorResponses(400, 401, 403, 404, 422) },
      },
    },
    async (request) => {
      const window = parseSeriesWindow(request.query.window, request.query.step);
      return response(await metrics.series(workspaceOf(request), request.params.deployment_id, window));
    },
  );
};
