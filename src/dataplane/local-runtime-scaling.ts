/**
 * The serving app's scale on this machine (src/dataplane/local-runtime.ts): changed in place to what its
 * resource spec asks, one change at a time per app, paused after its health check when min_scale is 0,
 * and each change reported as a condition of the deployment. How instances are added and taken out is
 * src/dataplane/app-scaling.ts.
 */
import { describeScale, runningScale, sameScale, scaleInPlace, scaleOf, type Scale } from './app-scaling.ts';
import type { RunningApp } from './app-start.ts';
import { reportCondition, type RuntimeState } from './local-runtime-serving.ts';

/**
 * Scales the serving app in place (one change at a time per app) and reports what it did to the
 * deployment's status: all its web instances stopped is `scaled_to_zero` (UNUSED), a web instance
 * running again after none is `scaled_up` (READY). Conditions only move a deployment the table allows.
 */
async function scaleServing(r: RuntimeState, deploymentId: string, app: RunningApp, to: Scale): Promise<void> {
  const { deps, apps, scaling } = r;
  const fromWeb = runningScale(app.supervisor).web;
  const work = scaleInPlace(app, deploymentId, to, {
    reports: deps.reports,
    logger: deps.logger,
    edge: deps.edge,
    healthTimeoutMs: deps.config.healthTimeoutMs,
    drainTimeoutMs: deps.config.drainTimeoutMs,
    serving: () => apps.get(deploymentId) === app,
  }).finally(() => scaling.delete(deploymentId));
  scaling.set(deploymentId, { app, work });
  await work;
  if (apps.get(deploymentId) !== app) return;
  const nowWeb = runningScale(app.supervisor).web;
  if (to.web === 0 && nowWeb === 0)
    await reportCondition(r, deploymentId, 'scaled_to_zero', {
      message: 'resource_spec.min_scale is 0: no web instance runs.',
      revision_id: app.revisionId,
    });
  else if (fromWeb === 0 && nowWeb > 0)
    await reportCondition(r, deploymentId, 'scaled_up', {
      message: `The app runs ${describeScale(runningScale(app.supervisor))} again.`,
      revision_id: app.revisionId,
    });
}

/** A revision started for a paused deployment (min_scale 0) passed its health check: its web instances stop. */
export async function pauseIfWanted(r: RuntimeState, deploymentId: string, app: RunningApp): Promise<void> {
  if (!app.pauseAfterStart) return;
  app.pauseAfterStart = false;
  // A scale of the app under way (the worker's pass) finishes first; then it is what runs that counts.
  await r.scaling.get(deploymentId)?.work.catch(() => undefined);
  if (r.apps.get(deploymentId) !== app || app.stoppedBecause) return;
  const running = runningScale(app.supervisor);
  if (running.web === 0) return;
  app.log.system('resource_spec.min_scale is 0: the revision passed its health check and is paused now');
  await scaleServing(r, deploymentId, app, { web: 0, worker: running.worker });
}

/**
 * Brings the serving app to its resource spec's instance counts, unless `revisionId` is not what serves
 * here, a change of it is under way, or the same counts failed already.
 */
export async function rescale(
  r: RuntimeState,
  deploymentId: string,
  revisionId: string,
  resourceSpec: Record<string, unknown> | null,
): Promise<void> {
  const app = r.apps.get(deploymentId);
  if (!app || app.revisionId !== revisionId || r.scaling.has(deploymentId)) return;
  const to = scaleOf(resourceSpec, app.appConfig, r.deps.config.defaultLimits.maximum?.instances);
  if (sameScale(runningScale(app.supervisor), to)) {
    app.failedScale = null;
    return;
  }
  if (app.failedScale && sameScale(app.failedScale, to)) return;
  await scaleServing(r, deploymentId, app, to);
}
