/**
 * The local data plane's runtime: builds revisions and runs them on this machine. It owns the app
 * processes (one supervisor per deployment's serving revision) and the proxy routes to them, and
 * makes each deployment's database and agent credential on first deploy. How one revision is built is
 * src/dataplane/app-build.ts, how its app is started and health-checked src/dataplane/app-start.ts, and
 * the instances serving its endpoints src/dataplane/endpoint-apps.ts; this module decides what serves.
 *
 * It writes no lifecycle state: a revision's steps are reported by the worker
 * (src/dataplane/local-worker.ts), which holds the revision's lease, at the points where this module
 * calls back; the conditions of a deployment it sees (a crash loop, healthy again, its database made)
 * it reports through the same data-plane reports (src/domain/data-plane.ts), whose rules the
 * lifecycle applies as it does to a listener's.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import type { DeploymentConditionName } from '../domain/conditions.ts';
import { endpointLabel } from '../domain/endpoints.ts';
import { getDeploymentRuntime } from '../store/deployment-runtimes.ts';
import { runningDeploymentState } from '../store/deployments.ts';
import { dropAppDatabase } from './app-database.ts';
import { describeScale, runningScale, sameScale, scaleInPlace, scaleOf, type Scale } from './app-scaling.ts';
import { createAppWorkTracking } from './app-work-tracking.ts';
import { reportDiskFull } from './app-exit-reports.ts';
import type { TreeUsage } from './disk-usage.ts';
import { appUrl } from './app-edge.ts';
import { removeTree } from './build-snapshot.ts';
import { createAppHostAccess } from './app-host-access.ts';
import { createLogWriter } from './log-writer.ts';
import { readBuild, revisionDirs, type BuildHooks } from './revision-build.ts';
import { legacyUploadFile } from './upload-source.ts';
import { buildApp } from './app-build.ts';
import { requireBuild as requireBuildOf, startApp, type AppStarter, type RunningApp } from './app-start.ts';
import { inSpan } from '../telemetry/tracing.ts';
import { createEndpointApps } from './endpoint-apps.ts';
import type { LocalRuntime, LocalRuntimeDeps, RevisionJob } from './local-runtime-types.ts';

export type {
  AppRuntimeStats,
  EndpointOutcome,
  LocalRuntime,
  LocalRuntimeDeps,
  RevisionJob,
  WantedEndpoint,
} from './local-runtime-types.ts';

export function createLocalRuntime(deps: LocalRuntimeDeps): LocalRuntime {
  const { config, db, sandbox, edge, logger } = deps;
  const apps = new Map<string, RunningApp>();
  const access = createAppHostAccess({
    config,
    sandbox,
    logger,
    disk: deps.disk,
    apiConnections: deps.apiConnections,
  });
  /** Scale changes under way, by deployment: one at a time per app. */
  const scaling = new Map<string, { app: RunningApp; work: Promise<void> }>();
  /** Stops under way, by deployment: a second stop (a teardown's) waits for the first to finish. */
  const stopping = new Map<string, Promise<void>>();
  const tracking = createAppWorkTracking(logger);

  const logWriter = (revisionId: string, type: 'build' | 'deploy', redact: string[]) =>
    createLogWriter({ db, reports: deps.reports, revisionId, type, maxLines: config.logMaxLines, redact, logger });
  const starter: AppStarter = {
    deps,
    access,
    tracking,
    logWriter,
    servingRevision: (deploymentId) => apps.get(deploymentId)?.revisionId,
  };
  const requireBuild = (job: RevisionJob) => requireBuildOf(config.dataDir, job);

  /** A condition of the deployment: moves its status as the conditions' table says (src/domain/conditions.ts). */
  async function reportCondition(
    deploymentId: string,
    condition: DeploymentConditionName,
    data: Record<string, unknown> = {},
  ): Promise<void> {
    await deps.reports.reportCondition({ deploymentId, condition, data });
  }

  /** Stops a running revision's processes and releases what it held. */
  async function release(deploymentId: string, app: RunningApp): Promise<void> {
    app.diskWatch?.stop();
    await app.supervisor.stop(config.drainTimeoutMs);
    // A scale-down of this app under way stops the instances it took out of the supervisor itself, and
    // the supervisor's stop does not wait for those: they may run for the whole drain time yet.
    const scale = scaling.get(deploymentId);
    if (scale?.app === app) await scale.work.catch(() => undefined);
    tracking.noteLeftovers(deploymentId, app.revisionId, app.supervisor);
    await access.closeForwards(app.forwards);
    await app.log.close();
  }

  /**
   * A serving app whose data and home directories went over their limit: its instances stop at once
   * (a second's grace: it writes for as long as it runs) and leave its route; its entry stays, so that
   * its runner lease is kept and nothing starts it again until a new revision serves.
   */
  async function stopForDisk(deploymentId: string, app: RunningApp, usage: TreeUsage): Promise<void> {
    if (apps.get(deploymentId) !== app) return;
    app.log.system('The data and home directories are over their disk limit: stopping every instance');
    app.stoppedBecause =
      `The app's instances were stopped because its data and home directories are full ` +
      `(${Math.round(deps.disk.appLimitBytes / 1024 ** 2)} MiB, SLIPWAY_APP_DISK_MB): it cannot be scaled. ` +
      'Deploy a revision that removes what it does not need at start.';
    await edge.remove(app.slug, { drainTimeoutMs: 0 });
    await app.supervisor.stop(1000);
    // Its endpoints' instances write the same directories: they stop too, and stay stopped (below).
    await endpointApps.stopAll(deploymentId);
    tracking.noteLeftovers(deploymentId, app.revisionId, app.supervisor);
    reportDiskFull(
      deps,
      { revisionId: app.revisionId, deployment: { id: deploymentId, workspace_id: app.workspaceId } },
      { limitBytes: deps.disk.appLimitBytes, ...usage },
    );
  }

  /** Routes the stable URL to `next`, then drains and stops what served before. */
  async function serve(deploymentId: string, next: RunningApp): Promise<void> {
    const previous = apps.get(deploymentId);
    apps.set(deploymentId, next);
    const root = path.dirname(next.dataDir);
    next.diskWatch ??= deps.disk.watchApp(root, [next.dataDir, path.join(root, 'home')], (usage) => {
      void stopForDisk(deploymentId, next, usage).catch((error: unknown) =>
        logger.error({ err: error, deploymentId }, 'could not stop an app over its disk limit'),
      );
    });
    await edge.setTargets(next.slug, next.supervisor.webTargets, { drainTimeoutMs: config.drainTimeoutMs });
    if (previous && previous !== next) {
      previous.log.system(`Revision ${next.revisionId} serves now; stopping this one`);
      await release(deploymentId, previous);
    }
  }

  const endpointApps = createEndpointApps({
    edge,
    logger,
    drainTimeoutMs: config.drainTimeoutMs,
    start: async (job, endpoint, signal) => startApp(starter, job, await requireBuild(job), signal, endpoint),
    release,
    removePreviewData: (deploymentId, keep) => access.removePreviewData(deploymentId, keep),
    track: (deploymentId, revisionId, work) => tracking.track(deploymentId, revisionId, work),
  });

  async function stop(deploymentId: string): Promise<void> {
    // Its endpoints' instances go with it (a deletion, a lost runner lease, the service stopping).
    await endpointApps.stopAll(deploymentId);
    const app = apps.get(deploymentId);
    // Being stopped already (the runner heartbeat, say): done only when that stop is.
    if (!app) return stopping.get(deploymentId);
    apps.delete(deploymentId);
    const work = (async () => {
      await edge.remove(app.slug, { drainTimeoutMs: config.drainTimeoutMs });
      await release(deploymentId, app);
    })();
    const settled = work.then(
      () => undefined,
      () => undefined,
    );
    stopping.set(deploymentId, settled);
    void settled.then(() => {
      if (stopping.get(deploymentId) === settled) stopping.delete(deploymentId);
    });
    await work;
  }

  const buildOnce = (job: RevisionJob, hooks: BuildHooks, signal: AbortSignal) => buildApp(starter, job, hooks, signal);

  async function deployOnce(
    job: RevisionJob,
    signal: AbortSignal,
    commit: (customUrl: string) => Promise<void>,
  ): Promise<void> {
    const build = await requireBuild(job);
    const next = await startApp(starter, job, build, signal);
    // DEPLOYED means served: the new instances join the route (beside the ones serving now, so
    // nothing is drained yet) before the commit, and leave it again if the commit fails.
    const serving = apps.get(job.deployment.id)?.supervisor.webTargets ?? [];
    try {
      await inSpan('switch', {}, async () => {
        await edge.setTargets(next.slug, [...serving, ...next.supervisor.webTargets]);
        await commit(appUrl(edge, next.slug));
      });
    } catch (error) {
      await (serving.length > 0 ? edge.setTargets(next.slug, serving) : edge.remove(next.slug)).catch(
        (routeError: unknown) => logger.error({ err: routeError }, 'the app route could not be restored'),
      );
      await release(job.deployment.id, next);
      throw error;
    }
    await serve(job.deployment.id, next);
    await pauseIfWanted(job.deployment.id, next);
  }

  async function resumeOnce(job: RevisionJob): Promise<void> {
    let build = await readBuild(revisionDirs(config.dataDir, job.revisionId));
    if (!build?.sealed) {
      // Another machine built it, its files were removed, or a version that did not seal builds made it
      // (its app could change it, even replace its src with a link): build it again, quietly (it is DEPLOYED).
      build = await buildOnce(
        job,
        { building: async () => undefined, commitResolved: async () => undefined },
        new AbortController().signal,
      );
    }
    const next = await startApp(starter, job, build, new AbortController().signal);
    await serve(job.deployment.id, next);
    await pauseIfWanted(job.deployment.id, next);
  }

  /**
   * Scales the serving app in place (one change at a time per app) and reports what it did to the
   * deployment's status: all its web instances stopped is `scaled_to_zero` (UNUSED), a web instance
   * running again after none is `scaled_up` (READY). Conditions only move a deployment the table allows.
   */
  async function scaleServing(deploymentId: string, app: RunningApp, to: Scale): Promise<void> {
    const fromWeb = runningScale(app.supervisor).web;
    const work = scaleInPlace(app, deploymentId, to, {
      reports: deps.reports,
      logger,
      edge,
      healthTimeoutMs: config.healthTimeoutMs,
      drainTimeoutMs: config.drainTimeoutMs,
      serving: () => apps.get(deploymentId) === app,
    }).finally(() => scaling.delete(deploymentId));
    scaling.set(deploymentId, { app, work });
    await work;
    if (apps.get(deploymentId) !== app) return;
    const nowWeb = runningScale(app.supervisor).web;
    if (to.web === 0 && nowWeb === 0)
      await reportCondition(deploymentId, 'scaled_to_zero', {
        message: 'resource_spec.min_scale is 0: no web instance runs.',
        revision_id: app.revisionId,
      });
    else if (fromWeb === 0 && nowWeb > 0)
      await reportCondition(deploymentId, 'scaled_up', {
        message: `The app runs ${describeScale(runningScale(app.supervisor))} again.`,
        revision_id: app.revisionId,
      });
  }

  /** A revision started for a paused deployment (min_scale 0) passed its health check: its web instances stop. */
  async function pauseIfWanted(deploymentId: string, app: RunningApp): Promise<void> {
    if (!app.pauseAfterStart) return;
    app.pauseAfterStart = false;
    // A scale of the app under way (the worker's pass) finishes first; then it is what runs that counts.
    await scaling.get(deploymentId)?.work.catch(() => undefined);
    if (apps.get(deploymentId) !== app || app.stoppedBecause) return;
    const running = runningScale(app.supervisor);
    if (running.web === 0) return;
    app.log.system('resource_spec.min_scale is 0: the revision passed its health check and is paused now');
    await scaleServing(deploymentId, app, { web: 0, worker: running.worker });
  }

  return {
    isolation: sandbox.description,

    build(job, hooks, signal) {
      return tracking.track(job.deployment.id, job.revisionId, buildOnce(job, hooks, signal));
    },

    deploy(job, signal, commit) {
      return tracking.track(job.deployment.id, job.revisionId, deployOnce(job, signal, commit));
    },

    resume(job) {
      return tracking.track(job.deployment.id, job.revisionId, resumeOnce(job));
    },

    running: () => [...apps.keys()],

    serveEndpoints: (deploymentId, wanted, report) =>
      // A deployment stopped for its disk serves no endpoint until a new revision serves it.
      apps.get(deploymentId)?.stoppedBecause ? Promise.resolve() : endpointApps.serve(deploymentId, wanted, report),

    appStats: () =>
      Promise.all([
        ...[...apps].map(async ([deploymentId, app]) => ({
          deploymentId,
          slug: app.slug,
          revisionId: app.revisionId,
          instances: await app.supervisor.stats(),
        })),
        // Each endpoint's instances, under its own host label (the edge counts its route by it).
        ...endpointApps.all().map(async ({ deploymentId, name, app }) => ({
          deploymentId,
          slug: endpointLabel(app.slug, name),
          endpoint: name,
          revisionId: app.revisionId,
          instances: await app.supervisor.stats(),
        })),
      ]),

    async rescale(deploymentId, revisionId, resourceSpec) {
      const app = apps.get(deploymentId);
      if (!app || app.revisionId !== revisionId || scaling.has(deploymentId)) return;
      const to = scaleOf(resourceSpec, app.appConfig, config.defaultLimits.maximum?.instances);
      if (sameScale(runningScale(app.supervisor), to)) {
        app.failedScale = null;
        return;
      }
      if (app.failedScale && sameScale(app.failedScale, to)) return;
      await scaleServing(deploymentId, app, to);
    },

    async check() {
      for (const [deploymentId, app] of apps) {
        const row = await runningDeploymentState(db, deploymentId);
        if (!row || row.status === 'AWAITING_DELETE' || row.active_revision_id !== app.revisionId) continue;
        // A paused app (no web instance) is not said to be serving again.
        if (
          row.status === 'UNKNOWN' &&
          app.supervisor.instanceIds('web').length > 0 &&
          (await app.supervisor.healthy())
        ) {
          await reportCondition(deploymentId, 'recovered', {
            message: 'The app is healthy again.',
            revision_id: app.revisionId,
          });
        }
      }
    },

    stop,

    async teardown(deployment, revisionIds) {
      // Nothing of the app may run while what it could write goes (docs/data-plane.md): the app serving
      // here stops, and every build or start of its revisions still under way ends first (the worker has
      // aborted them), each of their processes confirmed gone. A start that ended by serving is stopped too.
      await stop(deployment.id);
      await tracking.deploymentWorkEnded(deployment.id);
      await stop(deployment.id);
      tracking.assertRemovable(deployment.id);
      for (const revisionId of revisionIds) tracking.assertRemovable(revisionId);
      const runtime = await getDeploymentRuntime(db, deployment.id);
      if (runtime?.database_name) await dropAppDatabase(deps.pool, runtime.database_name);
      for (const revisionId of revisionIds)
        await removeTree(revisionDirs(config.dataDir, revisionId).root, sandbox.ids);
      // Its own file system unmounted and its image removed, or its plain directory removed.
      await deps.disk.removeDeploymentDir(deployment.id, path.dirname(access.dataDirOf(deployment.id)));
    },

    async removeRevisionFiles(revisionId) {
      await tracking.revisionWorkEnded(revisionId);
      tracking.assertRemovable(revisionId);
      await removeTree(revisionDirs(config.dataDir, revisionId).root, sandbox.ids);
    },

    async removeUpload(relativePath) {
      const legacy = legacyUploadFile(config.dataDir, relativePath);
      if (legacy) await fs.rm(legacy, { force: true });
    },

    async close() {
      await Promise.all([...apps.keys()].map((id) => stop(id)));
      await Promise.allSettled([...scaling.values()].map((scale) => scale.work));
    },
  };
}
