/**
 * The local data plane's runtime: builds revisions and runs them on this machine. It owns the app
 * processes (one supervisor per deployment's serving revision) and the proxy routes to them, and
 * makes each deployment's database and agent credential on first deploy. How one revision is built is
 * src/dataplane/app-build.ts, how its app is started and health-checked src/dataplane/app-start.ts, and
 * the instances serving its endpoints src/dataplane/endpoint-apps.ts; this module decides what serves.
 *
 * The parts of it: what serves each deployment (src/dataplane/local-runtime-serving.ts, which holds the
 * state they share), a revision's build, deploy and resume (local-runtime-deploys.ts), and the serving
 * app's scale (local-runtime-scaling.ts).
 *
 * It writes no lifecycle state: a revision's steps are reported by the worker
 * (src/dataplane/local-worker.ts), which holds the revision's lease, at the points where this module
 * calls back; the conditions of a deployment it sees (a crash loop, healthy again, its database made)
 * it reports through the same data-plane reports (src/domain/data-plane.ts), whose rules the
 * lifecycle applies as it does to a listener's.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { endpointLabel } from '../domain/endpoints.ts';
import { getDeploymentRuntime } from '../store/deployment-runtimes.ts';
import { runningDeploymentState } from '../store/deployments.ts';
import { dropAppDatabase } from './app-database.ts';
import { createAppWorkTracking } from './app-work-tracking.ts';
import { removeTree } from './build-snapshot.ts';
import { createAppHostAccess } from './app-host-access.ts';
import { createLogWriter } from './log-writer.ts';
import { revisionDirs } from './revision-build.ts';
import { legacyUploadFile } from './upload-source.ts';
import { requireBuild, startApp, type AppStarter, type RunningApp } from './app-start.ts';
import { createEndpointApps } from './endpoint-apps.ts';
import type { AppRuntimeStats, LocalRuntime, LocalRuntimeDeps } from './local-runtime-types.ts';
import { buildOnce, deployOnce, resumeOnce } from './local-runtime-deploys.ts';
import { rescale } from './local-runtime-scaling.ts';
import { release, reportCondition, stop, type RuntimeState } from './local-runtime-serving.ts';

export type {
  AppRuntimeStats,
  EndpointOutcome,
  LocalRuntime,
  LocalRuntimeDeps,
  RevisionJob,
  WantedEndpoint,
} from './local-runtime-types.ts';

/** Each running app's instances, the deployments' own and their endpoints'. */
function appStats(r: RuntimeState): Promise<AppRuntimeStats[]> {
  return Promise.all([
    ...[...r.apps].map(async ([deploymentId, app]) => ({
      deploymentId,
      slug: app.slug,
      revisionId: app.revisionId,
      instances: await app.supervisor.stats(),
    })),
    // Each endpoint's instances, under its own host label (the edge counts its route by it).
    ...r.endpointApps.all().map(async ({ deploymentId, name, app }) => ({
      deploymentId,
      slug: endpointLabel(app.slug, name),
      endpoint: name,
      revisionId: app.revisionId,
      instances: await app.supervisor.stats(),
    })),
  ]);
}

/** A deployment reported UNKNOWN whose app is healthy again is reported recovered. */
async function check(r: RuntimeState): Promise<void> {
  for (const [deploymentId, app] of r.apps) {
    const row = await runningDeploymentState(r.deps.db, deploymentId);
    if (!row || row.status === 'AWAITING_DELETE' || row.active_revision_id !== app.revisionId) continue;
    // A paused app (no web instance) is not said to be serving again.
    if (row.status === 'UNKNOWN' && app.supervisor.instanceIds('web').length > 0 && (await app.supervisor.healthy())) {
      await reportCondition(r, deploymentId, 'recovered', {
        message: 'The app is healthy again.',
        revision_id: app.revisionId,
      });
    }
  }
}

/** Everything a deleted deployment leaves here: its processes first, then its database and directories. */
async function teardown(r: RuntimeState, deployment: { id: string }, revisionIds: string[]): Promise<void> {
  const { deps, tracking } = r;
  const { config, sandbox } = deps;
  // Nothing of the app may run while what it could write goes (docs/data-plane.md): the app serving
  // here stops, and every build or start of its revisions still under way ends first (the worker has
  // aborted them), each of their processes confirmed gone. A start that ended by serving is stopped too.
  await stop(r, deployment.id);
  await tracking.deploymentWorkEnded(deployment.id);
  await stop(r, deployment.id);
  tracking.assertRemovable(deployment.id);
  for (const revisionId of revisionIds) tracking.assertRemovable(revisionId);
  const runtime = await getDeploymentRuntime(deps.db, deployment.id);
  if (runtime?.database_name) await dropAppDatabase(deps.pool, runtime.database_name);
  for (const revisionId of revisionIds) await removeTree(revisionDirs(config.dataDir, revisionId).root, sandbox.ids);
  // Its own file system unmounted and its image removed, or its plain directory removed.
  await deps.disk.removeDeploymentDir(deployment.id, path.dirname(r.access.dataDirOf(deployment.id)));
}

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

  const r: RuntimeState = {
    deps,
    apps,
    access,
    scaling: new Map(),
    stopping: new Map(),
    tracking,
    starter,
    endpointApps: createEndpointApps({
      edge,
      logger,
      drainTimeoutMs: config.drainTimeoutMs,
      start: async (job, endpoint, signal) =>
        startApp(starter, job, await requireBuild(config.dataDir, job), signal, endpoint),
      release: (deploymentId, app) => release(r, deploymentId, app),
      removePreviewData: (deploymentId, keep) => access.removePreviewData(deploymentId, keep),
      track: (deploymentId, revisionId, work) => tracking.track(deploymentId, revisionId, work),
    }),
  };

  return {
    isolation: sandbox.description,

    build(job, hooks, signal) {
      return tracking.track(job.deployment.id, job.revisionId, buildOnce(r, job, hooks, signal));
    },

    deploy(job, signal, commit) {
      return tracking.track(job.deployment.id, job.revisionId, deployOnce(r, job, signal, commit));
    },

    resume(job) {
      return tracking.track(job.deployment.id, job.revisionId, resumeOnce(r, job));
    },

    running: () => [...apps.keys()],

    serveEndpoints: (deploymentId, wanted, report) =>
      // A deployment stopped for its disk serves no endpoint until a new revision serves it.
      apps.get(deploymentId)?.stoppedBecause ? Promise.resolve() : r.endpointApps.serve(deploymentId, wanted, report),

    appStats: () => appStats(r),
    rescale: (deploymentId, revisionId, resourceSpec) => rescale(r, deploymentId, revisionId, resourceSpec),
    check: () => check(r),
    stop: (deploymentId) => stop(r, deploymentId),
    teardown: (deployment, revisionIds) => teardown(r, deployment, revisionIds),

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
      await Promise.all([...apps.keys()].map((id) => stop(r, id)));
      await Promise.allSettled([...r.scaling.values()].map((scale) => scale.work));
    },
  };
}
