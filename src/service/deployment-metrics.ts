/**
 * A deployment's series (docs/metrics.md, "Series per revision"): requests, errors by class, latency
 * percentiles, CPU and memory per route (its own URL and each endpoint) and per revision, read from the
 * app edge of this process (src/dataplane/traffic-series.ts). The deployment must be the caller's
 * workspace's (404 otherwise, before anything of the series is read).
 */
import type { Kysely } from 'kysely';
import { endpointLabel } from '../domain/endpoints.ts';
import { AppError, notFound } from '../errors.ts';
import { listEndpoints } from '../store/deployment-endpoints.ts';
import { getDeployment } from '../store/deployments.ts';
import type { Database } from '../store/schema.ts';
import { BUCKET_SECONDS, BUCKETS, type SeriesOfRoute, type TrafficSeries } from '../dataplane/traffic-series.ts';

export interface DeploymentMetricsDeps {
  db: Kysely<Database>;
  /** The series of this process's app edge; null where this process runs none (an API-only replica). */
  traffic: () => TrafficSeries | null;
}

export interface SeriesWindow {
  windowSeconds: number;
  stepSeconds: number;
}

export interface DeploymentSeries {
  deploymentId: string;
  window: SeriesWindow;
  /** Whether this process runs the app edge that measured them (else the series are empty). */
  measured: boolean;
  series: (SeriesOfRoute & { endpoint: string | null })[];
}

const MAX_WINDOW = BUCKETS * BUCKET_SECONDS;
/** Points a series may have at most: a step shorter than window / 360 is refused. */
const MAX_POINTS = BUCKETS;

/** `90s`, `15m`, `1h`: a duration in seconds; null when it is none. */
function seconds(text: string): number | null {
  const match = /^(\d{1,4})([smh])$/.exec(text);
  if (match === null) return null;
  return Number(match[1]) * { s: 1, m: 60, h: 3600 }[match[2] as 's' | 'm' | 'h'];
}

/**
 * The window and step a query asks for, checked: the window 1 minute to 1 hour, the step a multiple of
 * 10 s that gives at most 360 points (by default the smallest giving at most 60).
 */
export function parseSeriesWindow(window: string | undefined, step: string | undefined): SeriesWindow {
  const windowSeconds = window === undefined ? 900 : seconds(window);
  if (windowSeconds === null || windowSeconds < 60 || windowSeconds > MAX_WINDOW)
    throw new AppError('invalid_request', 'window must be a duration from 1m to 1h, such as 90s, 15m or 1h');
  if (windowSeconds % BUCKET_SECONDS !== 0)
    throw new AppError('invalid_request', `window must be a multiple of ${BUCKET_SECONDS}s`);
  const fallback = Math.max(1, Math.ceil(windowSeconds / BUCKET_SECONDS / 60)) * BUCKET_SECONDS;
  const stepSeconds = step === undefined ? fallback : seconds(step);
  if (stepSeconds === null || stepSeconds < BUCKET_SECONDS || stepSeconds % BUCKET_SECONDS !== 0)
    throw new AppError('invalid_request', `step must be a multiple of ${BUCKET_SECONDS}s, such as 10s or 1m`);
  if (stepSeconds > windowSeconds) throw new AppError('invalid_request', 'step must not be longer than window');
  if (windowSeconds / stepSeconds > MAX_POINTS)
    throw new AppError('invalid_request', `window / step must be at most ${MAX_POINTS} points`);
  return { windowSeconds, stepSeconds };
}

export function createDeploymentMetricsService({ db, traffic }: DeploymentMetricsDeps) {
  return {
    async series(workspaceId: string, deploymentId: string, window: SeriesWindow): Promise<DeploymentSeries> {
      const deployment = await getDeployment(db, workspaceId, deploymentId);
      if (!deployment) throw notFound('Deployment', deploymentId);
      const edge = traffic();
      const slug = deployment.app_slug;
      if (edge === null) return { deploymentId, window, measured: false, series: [] };
      // Only this deployment's own routes: its slug and its endpoints' labels.
      const endpointOf = new Map<string, string | null>([[slug, null]]);
      for (const endpoint of await listEndpoints(db, deploymentId))
        endpointOf.set(endpointLabel(slug, endpoint.name), endpoint.name);
      const found = edge.query([...endpointOf.keys()], window.windowSeconds, window.stepSeconds);
      const series = found
        .map((s) => ({ ...s, endpoint: endpointOf.get(s.label) ?? null }))
        .sort(
          (a, b) =>
            (a.endpoint ?? '').localeCompare(b.endpoint ?? '') ||
            (a.revisionId ?? '').localeCompare(b.revisionId ?? ''),
        );
      return { deploymentId, window, measured: true, series };
    },
  };
}

export type DeploymentMetricsService = ReturnType<typeof createDeploymentMetricsService>;
