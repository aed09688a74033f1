/**
 * Applies a deployment's resource spec to its running app in place. The local data plane honours
 * `min_scale` (web instances; 0 pauses the deployment: no web instance runs) and `queue_min_scale` (instances of the app config's `worker`
 * command); a change of either starts or stops instances of the serving revision without a new
 * revision. New web instances get requests only once their health check passes; web instances that
 * go are taken out of the route first and stopped once their requests are finished.
 */
import type { Logger } from 'pino';
import type { AppConfig } from '../domain/app-config.ts';
import type { OwnPlaneReports, DeploymentFactType } from '../domain/data-plane.ts';
import type { ResourceSpec } from '../domain/resource-spec.ts';
import type { AppRoutes } from './app-edge.ts';
import type { AppSupervisor } from './app-supervisor.ts';
import type { LogWriter } from './log-writer.ts';

export interface Scale {
  web: number;
  worker: number;
}

/**
 * The instance counts a resource spec asks of an app; fields the local data plane ignores are ignored.
 * Each count is clamped to `maxInstances`, the operator's maximum (config.defaultLimits.maximum.instances):
 * a spec stored before the maximum existed never starts more.
 */
export function scaleOf(
  spec: ResourceSpec | null | undefined,
  appConfig: AppConfig,
  maxInstances: number = Number.POSITIVE_INFINITY,
): Scale {
  const count = (value: unknown, fallback: number, least: number) =>
    Math.min(
      typeof value === 'number' && Number.isSafeInteger(value) && value >= least ? value : fallback,
      Math.max(least, maxInstances),
    );
  // 0 is a pause (docs/data-plane.md, "Paused"): the data plane stops every web instance once the revision is healthy.
  const web = count(spec?.min_scale, 1, 0);
  const worker = appConfig.worker ? count(spec?.queue_min_scale, 1, 0) : 0;
  return { web, worker };
}

export const runningScale = (supervisor: AppSupervisor): Scale => ({
  web: supervisor.instanceIds('web').length,
  worker: supervisor.instanceIds('worker').length,
});

export const sameScale = (a: Scale, b: Scale): boolean => a.web === b.web && a.worker === b.worker;

export const describeScale = (scale: Scale): string =>
  `${scale.web} web instance(s)${scale.worker ? ` and ${scale.worker} worker instance(s)` : ''}`;

/** Thrown when new web instances fail their health check; the app keeps its previous instances. */
class ScaleError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ScaleError';
  }
}

export interface ScalingApp {
  revisionId: string;
  workspaceId: string;
  slug: string;
  supervisor: AppSupervisor;
  log: LogWriter;
  appConfig: AppConfig;
  /** Counts whose web instances failed their health check: not tried again until the spec changes. */
  failedScale: Scale | null;
  /** Why its instances were all stopped (its disk is full): no scale is tried, and the failure says so. */
  stoppedBecause?: string;
}

export interface ScalingOptions {
  edge: AppRoutes;
  healthTimeoutMs: number;
  drainTimeoutMs: number;
  /** False once another revision serves the deployment or it was stopped: its route is not ours to set. */
  serving(): boolean;
}

/**
 * Scales the app and reports the outcome as a fact (src/domain/data-plane.ts): `deployment.scaled`,
 * or `deployment.scale_failed` (and `failedScale`) when new web instances failed. Nothing is reported
 * for an app that stopped serving meanwhile: its revision was replaced or the deployment stopped here.
 */
export async function scaleInPlace(
  app: ScalingApp,
  deploymentId: string,
  to: Scale,
  options: ScalingOptions & { reports: OwnPlaneReports; logger: Logger },
): Promise<void> {
  const from = runningScale(app.supervisor);
  const event = (
    type: Extract<DeploymentFactType, 'deployment.scaled' | 'deployment.scale_failed'>,
    data: Record<string, unknown>,
  ) =>
    options.reports.reportFact({
      deploymentId,
      workspaceId: app.workspaceId,
      type,
      data: { revision_id: app.revisionId, from, to, ...data },
    });
  try {
    if (app.stoppedBecause) throw new ScaleError(app.stoppedBecause);
    await applyScale(app, to, options);
  } catch (error) {
    if (!options.serving()) return;
    if (!(error instanceof ScaleError)) throw error;
    app.failedScale = to;
    app.log.system(`Scaling failed: ${error.message}`);
    await event('deployment.scale_failed', { message: error.message });
    return;
  }
  if (!options.serving()) return;
  options.logger.info({ deploymentId, from, to }, 'running app scaled in place');
  await event('deployment.scaled', {});
}

/** Brings the app from its running counts to `to`: web instances first, then workers. */
async function applyScale(app: ScalingApp, to: Scale, options: ScalingOptions): Promise<void> {
  const { supervisor, log } = app;
  const from = runningScale(supervisor);
  log.system(`Resource spec changed: scaling from ${describeScale(from)} to ${describeScale(to)}`);

  if (to.web > from.web) {
    const added = await supervisor.add({ kind: 'web', command: app.appConfig.start }, to.web - from.web);
    try {
      await supervisor.waitHealthy(options.healthTimeoutMs, new AbortController().signal, added);
    } catch (error) {
      await supervisor.remove(added, options.drainTimeoutMs);
      throw new ScaleError(
        `${error instanceof Error ? error.message : String(error)} The app keeps running ${describeScale(from)}.`,
      );
    }
    if (!options.serving()) return;
    await options.edge.setTargets(app.slug, supervisor.webTargets, { drainTimeoutMs: options.drainTimeoutMs });
    log.system(
      `Web instance(s) ${added.join(', ')} passed the health check on ${app.appConfig.healthCheckPath} and get requests`,
    );
  } else if (to.web < from.web) {
    const leaving = supervisor.instanceIds('web').slice(to.web);
    if (options.serving()) {
      const staying = supervisor.webTargets.filter((t) => !leaving.includes(t.instanceId));
      // Resolves once the requests in flight to the leaving instances are finished (or the drain time is up).
      await options.edge.setTargets(app.slug, staying, {
        drainTimeoutMs: options.drainTimeoutMs,
        scaledToZero: staying.length === 0,
      });
    }
    await supervisor.remove(leaving, options.drainTimeoutMs);
    log.system(`Web instance(s) ${leaving.join(', ')} drained and stopped`);
  }

  if (to.worker > from.worker && app.appConfig.worker) {
    const added = await supervisor.add({ kind: 'worker', command: app.appConfig.worker }, to.worker - from.worker);
    log.system(`Worker instance(s) ${added.join(', ')} started`);
  } else if (to.worker < from.worker) {
    const leaving = supervisor.instanceIds('worker').slice(to.worker);
    await supervisor.remove(leaving, options.drainTimeoutMs);
    log.system(`Worker instance(s) ${leaving.join(', ')} stopped`);
  }
  log.system(`Now running ${describeScale(runningScale(supervisor))}`);
}
