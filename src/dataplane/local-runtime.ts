/**
 * The local data plane's runtime: builds revisions and runs them on this machine. It owns the app
 * processes (one supervisor per deployment's serving revision) and the proxy routes to them, and
 * makes each deployment's database and agent credential on first deploy.
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
import type { StoredSecret } from '../store/schema.ts';
import { tracingProjectName } from '../store/tracing-projects.ts';
import { dropAppDatabase } from './app-database.ts';
import { provisionAppResources } from './app-provisioning.ts';
import { runEnvironment } from './app-environment.ts';
import {
  describeScale,
  runningScale,
  sameScale,
  scaleInPlace,
  scaleOf,
  type Scale,
  type ScalingApp,
} from './app-scaling.ts';
import { createAppWorkTracking } from './app-work-tracking.ts';
import { createAppSupervisor } from './app-supervisor.ts';
import { reportAppExit, reportDiskFull } from './app-exit-reports.ts';
import type { DiskWatch, TreeUsage } from './disk-usage.ts';
import { appUrl } from './app-edge.ts';
import { removeTree } from './build-snapshot.ts';
import { createAppHostAccess, queueResourceSpec } from './app-host-access.ts';
import type { HostForward } from './host-forwards.ts';
import { limitsFromResourceSpec } from './resource-limits.ts';
import { createLogWriter } from './log-writer.ts';
import {
  buildRevision,
  PROCESSES_LEFT,
  readBuild,
  revisionDirs,
  RevisionFailure,
  type BuildHooks,
  type BuildRecord,
} from './revision-build.ts';
import { copyUpload, legacyUploadFile } from './upload-source.ts';
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

/** The processes serving a deployment's revision, what scaling them in place needs, and its ways to the host. */
type RunningApp = ScalingApp & {
  forwards: HostForward[];
  dataDir: string;
  diskWatch?: DiskWatch;
  /** Started with one web instance only to prove itself: `min_scale` is 0, so it is paused once it serves. */
  pauseAfterStart?: boolean;
};

export function createLocalRuntime(deps: LocalRuntimeDeps): LocalRuntime {
  const { config, db, secretBox, sandbox, edge, logger } = deps;
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

  const openSecrets = (secrets: StoredSecret[]): Record<string, string> =>
    Object.fromEntries(secrets.map((s) => [s.name, secretBox.open(s.value)]));
  const logWriter = (revisionId: string, type: 'build' | 'deploy', redact: string[]) =>
    createLogWriter({ db, reports: deps.reports, revisionId, type, maxLines: config.logMaxLines, redact, logger });

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
   * Starts the revision's processes and waits for health; the caller decides what serves. `endpoint`
   * names the endpoint they are for (src/dataplane/endpoint-apps.ts), null for the deployment's own URL.
   */
  async function startApp(
    job: RevisionJob,
    build: BuildRecord,
    signal: AbortSignal,
    endpoint: string | null = null,
  ): Promise<RunningApp> {
    const { appConfig } = build;
    const dirs = revisionDirs(config.dataDir, job.revisionId);
    const secrets = openSecrets(job.secrets);
    const platform = await provisionAppResources(deps, job.deployment, appConfig);
    // Its database exists (or it wants none): no longer AWAITING_DATABASE, and not serving until DEPLOYED.
    if (endpoint === null) await reportCondition(job.deployment.id, 'database_ready');
    const tracingProject = await tracingProjectName(db, job.deployment.tracing_project_id);
    const dataDir = await access.prepareDataDir(job.deployment.id);
    const reach = await access.openForwards(
      { deploymentId: job.deployment.id, revisionId: job.revisionId, workspaceId: job.deployment.workspace_id },
      platform.databaseUrl,
    );
    const env = runEnvironment(sandbox.appPaths(dirs.app, dataDir), appConfig.env, secrets, {
      deploymentId: job.deployment.id,
      revisionId: job.revisionId,
      tracingProjectId: job.deployment.tracing_project_id,
      tracingProjectName: tracingProject ?? job.deployment.name,
      apiUrl: reach.apiUrl,
      publicUrl: config.publicUrl,
      agentCredential: platform.agentCredential,
      protocolsAuth: config.appsProtocolsAuth === 'credential' ? 'credential' : null,
      databaseUrl: reach.databaseUrl,
      listenHost: sandbox.listenHost,
      otlp: reach.otlpEndpoint
        ? {
            endpoint: reach.otlpEndpoint,
            serviceName: job.deployment.name,
            resourceAttributes: {
              'slipway.deployment.id': job.deployment.id,
              'slipway.revision.id': job.revisionId,
              'slipway.workspace.id': job.deployment.workspace_id,
            },
          }
        : null,
    });
    const redact = [
      ...Object.values(secrets),
      platform.agentCredential,
      ...(platform.databaseUrl ? [new URL(platform.databaseUrl).password] : []),
    ].filter((v) => v.length >= 4);
    const log = logWriter(job.revisionId, 'deploy', redact);
    // The deployment's resource spec as it is now, not the snapshot's: a patch of it alone applies in
    // place (rescale), so a start after a restart must not go back to the counts of the revision's time.
    const current = await runningDeploymentState(db, job.deployment.id);
    const resourceSpec = current ? current.source_config.resource_spec : job.snapshot.resource_spec;
    const wanted = scaleOf(resourceSpec, appConfig, config.defaultLimits.maximum?.instances);
    // A paused deployment's revision (min_scale 0) still proves itself: one web instance is started and
    // health-checked, and stopped once the revision serves (pauseAfterStart). An endpoint's keeps it.
    const webCount = Math.max(1, wanted.web);
    const workerCount = wanted.worker;
    const limits = limitsFromResourceSpec(resourceSpec, config.defaultLimits);
    const workerLimits = limitsFromResourceSpec(queueResourceSpec(resourceSpec), config.defaultLimits);
    const instances = [
      ...Array.from({ length: webCount }, () => ({ kind: 'web' as const, command: appConfig.start })),
      ...Array.from({ length: workerCount }, () => ({ kind: 'worker' as const, command: appConfig.worker! })),
    ];
    let outOfMemory = false;
    const supervisor = createAppSupervisor({
      sandbox,
      run: { appDir: dirs.app, dataDir, forwards: reach.forwards },
      limits: { web: limits, worker: workerLimits },
      // Unique per running set of instances (cgroup names): a revision may serve at its deployment's
      // URL and at an endpoint at once.
      name: endpoint === null ? `app-${job.revisionId}` : `app-${job.revisionId}-at-${endpoint}`,
      env,
      output: log,
      instances,
      healthCheckPath: appConfig.healthCheckPath,
      backoff: deps.backoff,
      onExit: (exit) => {
        if (exit.exit.outOfMemory) outOfMemory = true;
        // An endpoint's instances are not what the deployment's status is about: their exits are logged only.
        reportAppExit(
          deps,
          job,
          log,
          exit,
          endpoint === null && apps.get(job.deployment.id)?.revisionId === job.revisionId,
        );
      },
    });
    log.system(
      `Starting ${describeScale({ web: webCount, worker: workerCount })}${endpoint === null ? '' : ` for endpoint ${endpoint}`}: ${appConfig.start}`,
    );
    await inSpan('start', { 'slipway.instances': webCount + workerCount }, () => supervisor.start());
    try {
      await inSpan('health', { 'slipway.health_check_path': appConfig.healthCheckPath }, () =>
        supervisor.waitHealthy(config.healthTimeoutMs, signal),
      );
    } catch (error) {
      await supervisor.stop(config.drainTimeoutMs);
      tracking.noteLeftovers(job.deployment.id, job.revisionId, supervisor);
      await access.closeForwards(reach.forwards);
      const tail = log.tail(20).join('\n');
      await log.close();
      if (signal.aborted) throw signal.reason;
      // Said only when true: a first deploy has nothing serving.
      const serving =
        endpoint !== null
          ? ' What served at the endpoint keeps serving.'
          : apps.has(job.deployment.id)
            ? ' The previous revision keeps serving.'
            : '';
      if (outOfMemory) {
        throw new RevisionFailure(
          'DEPLOY_FAILED',
          'out_of_memory',
          `The app was killed for going over its memory limit of ${Math.round(limits.memoryBytes / 1024 ** 2)} MiB ` +
            `before its health check passed; raise resource_spec.memory_limit_mb (or memory_mb).${serving} ` +
            `Last lines of the app's output:\n${tail}`,
        );
      }
      throw new RevisionFailure(
        'DEPLOY_FAILED',
        'health_check_failed',
        `${error instanceof Error ? error.message : String(error)}${serving} Last lines of the app's output:\n${tail}`,
      );
    }
    log.system(`Health check passed on ${appConfig.healthCheckPath}`);
    return {
      revisionId: job.revisionId,
      workspaceId: job.deployment.workspace_id,
      slug: job.deployment.app_slug,
      supervisor,
      log,
      appConfig,
      failedScale: null,
      forwards: reach.forwards,
      dataDir,
      pauseAfterStart: endpoint === null && wanted.web === 0,
    };
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
    start: async (job, endpoint, signal) => startApp(job, await requireBuild(job), signal, endpoint),
    release,
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

  async function requireBuild(job: RevisionJob): Promise<BuildRecord> {
    const build = await readBuild(revisionDirs(config.dataDir, job.revisionId));
    // Only a sealed build is started: an unsealed one (made before builds were sealed) may have been changed.
    if (!build?.sealed)
      throw new RevisionFailure(
        'DEPLOY_FAILED',
        'worker_lost',
        'The build output of this revision is gone (the worker that built it stopped). Redeploy the revision to build it again.',
      );
    return build;
  }

  async function buildOnce(job: RevisionJob, hooks: BuildHooks, signal: AbortSignal): Promise<BuildRecord> {
    const log = logWriter(
      job.revisionId,
      'build',
      Object.values(openSecrets(job.secrets)).filter((v) => v.length >= 4),
    );
    // The build's directory is measured while it runs: over its limit, the build is stopped and fails.
    const disk = new AbortController();
    const dirs = revisionDirs(config.dataDir, job.revisionId);
    const buildDisk = deps.disk.buildDisk(job.revisionId, dirs.root, dirs.app);
    const watch = buildDisk.watch(disk);
    try {
      return await buildRevision(
        {
          dataDir: config.dataDir,
          sandbox,
          fetcher: deps.fetcher,
          copyUpload: (workspaceId, uploadPath, destFile) =>
            copyUpload(db, config.dataDir, workspaceId, uploadPath, destFile),
          defaultLimits: config.defaultLimits,
          registries: config.buildRegistries,
          deploymentDataDir: (deploymentId) => access.dataDirOf(deploymentId),
          disk: buildDisk,
        },
        { ...job, secrets: openSecrets(job.secrets) },
        hooks,
        log,
        AbortSignal.any([signal, disk.signal]),
      );
    } catch (caught) {
      // Stopped for its disk: whatever the stop made the build throw, the failure is the disk's (unless
      // its processes could not be confirmed gone: what they may write is kept, below).
      const leftover = caught instanceof RevisionFailure && caught.reason === PROCESSES_LEFT;
      const error: unknown = disk.signal.aborted && !signal.aborted && !leftover ? disk.signal.reason : caught;
      // The first line only: the rest of a failure message quotes the log's own last lines (for
      // readers of the API), which the log has just above.
      if (error instanceof RevisionFailure) log.system(`Build failed: ${error.message.split('\n')[0]}`);
      if (error instanceof RevisionFailure && error.reason === PROCESSES_LEFT) {
        tracking.keepFiles(job.deployment.id, job.revisionId, error.message);
      }
      throw error;
    } finally {
      watch.stop();
      await log.close();
    }
  }

  async function deployOnce(
    job: RevisionJob,
    signal: AbortSignal,
    commit: (customUrl: string) => Promise<void>,
  ): Promise<void> {
    const build = await requireBuild(job);
    const next = await startApp(job, build, signal);
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
    const next = await startApp(job, build, new AbortController().signal);
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
          instances: await app.supervisor.stats(),
        })),
        // Each endpoint's instances, under its own host label (the edge counts its route by it).
        ...endpointApps.all().map(async ({ deploymentId, name, app }) => ({
          deploymentId,
          slug: endpointLabel(app.slug, name),
          endpoint: name,
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
