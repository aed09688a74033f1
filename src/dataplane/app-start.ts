/**
 * Starting a revision's app on the own data plane: its database and credential made (first deploy), its
 * ways to the host opened, its environment put together, its instances started under one supervisor,
 * and its health check awaited. What serves, and what is stopped, is the local runtime's
 * decision (src/dataplane/local-runtime-serving.ts); a start that fails stops what it started and says why in
 * the revision's failure.
 */
import { tracingProjectName } from '../store/tracing-projects.ts';
import { runningDeploymentState } from '../store/deployments.ts';
import type { StoredSecret } from '../store/schema.ts';
import type { SecretBox } from '../crypto/secret-box.ts';
import { inSpan } from '../telemetry/tracing.ts';
import { runEnvironment } from './app-environment.ts';
import { reportAppExit } from './app-exit-reports.ts';
import { queueResourceSpec, type AppHostAccess } from './app-host-access.ts';
import { provisionAppResources } from './app-provisioning.ts';
import { describeScale, scaleOf, type ScalingApp } from './app-scaling.ts';
import { createAppSupervisor } from './app-supervisor.ts';
import type { AppWorkTracking } from './app-work-tracking.ts';
import type { DiskWatch } from './disk-usage.ts';
import type { HostForward } from './host-forwards.ts';
import type { LocalRuntimeDeps, RevisionJob } from './local-runtime-types.ts';
import type { LogWriter } from './log-writer.ts';
import { limitsFromResourceSpec } from './resource-limits.ts';
import {
  FORK_PREVIEW_UNSANDBOXED,
  forkPreviewProblem,
  readBuild,
  revisionDirs,
  RevisionFailure,
  type BuildRecord,
} from './revision-build.ts';

/** The processes serving a deployment's revision, what scaling them in place needs, and its ways to the host. */
export type RunningApp = ScalingApp & {
  forwards: HostForward[];
  dataDir: string;
  /**
   * The deployment's database as the service reaches it, with the app's own role; null when the app has
   * none. Where a replaced revision's instances are told so (src/dataplane/app-replaced.ts).
   */
  databaseUrl: string | null;
  diskWatch?: DiskWatch;
  /** Started with one web instance only to prove itself: `min_scale` is 0, so it is paused once it serves. */
  pauseAfterStart?: boolean;
};

/** What a start needs of the runtime that owns the running apps. */
export interface AppStarter {
  deps: LocalRuntimeDeps;
  access: AppHostAccess;
  tracking: AppWorkTracking;
  logWriter(revisionId: string, type: 'build' | 'deploy', redact: string[]): LogWriter;
  /** The revision serving at the deployment's own URL now, if any. */
  servingRevision(deploymentId: string): string | undefined;
}

/** A job's secrets, opened. */
export function openSecrets(secretBox: SecretBox, secrets: StoredSecret[]): Record<string, string> {
  return Object.fromEntries(secrets.map((s) => [s.name, secretBox.open(s.value)]));
}

/**
 * Starts the revision's processes and waits for health; the caller decides what serves. `endpoint`
 * names the endpoint they are for (src/dataplane/endpoint-apps.ts), null for the deployment's own URL.
 */
export async function startApp(
  starter: AppStarter,
  job: RevisionJob,
  build: BuildRecord,
  signal: AbortSignal,
  endpoint: string | null = null,
): Promise<RunningApp> {
  const { deps, access, tracking } = starter;
  const { config, db, sandbox } = deps;
  const forkProblem = forkPreviewProblem(sandbox, job.snapshot);
  if (forkProblem) throw new RevisionFailure('DEPLOY_FAILED', FORK_PREVIEW_UNSANDBOXED, forkProblem);
  const { appConfig } = build;
  const dirs = revisionDirs(config.dataDir, job.revisionId);
  const secrets = openSecrets(deps.secretBox, job.secrets);
  const platform = await provisionAppResources(deps, job.deployment, appConfig);
  // A preview without the deployment's secrets (a fork's pull request) gets its database and agent
  // credential neither: they are secrets of the deployment too (docs/codehost.md, "Pull-request previews").
  const isolated = job.snapshot.preview?.secrets === false;
  // Its database exists (or it wants none): no longer AWAITING_DATABASE, and not serving until DEPLOYED.
  if (endpoint === null)
    await deps.reports.reportCondition({ deploymentId: job.deployment.id, condition: 'database_ready', data: {} });
  const tracingProject = await tracingProjectName(db, job.deployment.tracing_project_id);
  // A pull request's preview has data of its own, never the deployment's (docs/codehost.md).
  const dataDir = await access.prepareDataDir(job.deployment.id, job.snapshot.preview?.pull_request ?? null);
  const reach = await access.openForwards(
    { deploymentId: job.deployment.id, revisionId: job.revisionId, workspaceId: job.deployment.workspace_id },
    isolated ? null : platform.databaseUrl,
  );
  const env = runEnvironment(sandbox.appPaths(dirs.app, dataDir), appConfig.env, secrets, {
    deploymentId: job.deployment.id,
    revisionId: job.revisionId,
    endpoint,
    tracingProjectId: job.deployment.tracing_project_id,
    tracingProjectName: tracingProject ?? job.deployment.name,
    apiUrl: reach.apiUrl,
    publicUrl: config.publicUrl,
    agentCredential: isolated ? null : platform.agentCredential,
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
  const log = starter.logWriter(job.revisionId, 'deploy', redact);
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
    revisionId: job.revisionId,
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
        endpoint === null && starter.servingRevision(job.deployment.id) === job.revisionId,
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
        : starter.servingRevision(job.deployment.id) !== undefined
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
    databaseUrl: isolated ? null : platform.databaseUrl,
    pauseAfterStart: endpoint === null && wanted.web === 0,
  };
}

/** The revision's sealed build output, which a start runs. */
export async function requireBuild(dataDir: string, job: RevisionJob): Promise<BuildRecord> {
  const build = await readBuild(revisionDirs(dataDir, job.revisionId));
  // Only a sealed build is started: an unsealed one (made before builds were sealed) may have been changed.
  if (!build?.sealed)
    throw new RevisionFailure(
      'DEPLOY_FAILED',
      'worker_lost',
      'The build output of this revision is gone (the worker that built it stopped). Redeploy the revision to build it again.',
    );
  return build;
}
