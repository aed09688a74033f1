/**
 * Starts the worker role: the sandbox, the local runtime and the worker that drives it, both reporting
 * through the lifecycle's data-plane reports as this worker (src/service/lifecycle.ts). main.ts calls
 * this when SLIPWAY_ROLES includes `worker`; end-to-end tests call it the same way.
 */
import type { Kysely } from 'kysely';
import type pg from 'pg';
import type { Logger } from 'pino';
import type { Config } from '../config.ts';
import type { SecretBox } from '../crypto/secret-box.ts';
import type { ChangeFeed } from '../db/change-feed.ts';
import type { Worker } from '../domain/data-plane.ts';
import { createOwnPlaneReports } from '../service/lifecycle-reports.ts';
import { getIntegration } from '../store/codehost-integrations.ts';
import type { Database } from '../store/schema.ts';
import { appUrlParts, type AppEdge } from './app-edge.ts';
import { startDatabaseStorageWatch } from './app-database-storage.ts';
import { createDiskLimiter } from './disk-limits.ts';
import { createLocalRuntime, type AppRuntimeStats } from './local-runtime.ts';
import { startUsageSampler } from './usage-sampler.ts';
import { leaseOwnerFor, startWorker } from './local-worker.ts';
import { RevisionFailure, type SourceFetcher } from './revision-build.ts';
import { protectServiceDatabases } from './app-database.ts';
import { createResourceControl } from './resource-limits.ts';
import { createSandbox } from './sandbox.ts';
import { createAppUsers } from './app-uids.ts';
import { probeSubordinateIds } from './subordinate-ids.ts';
import type { AppConnectionSink } from '../http/app-connections.ts';
import type { Tracing } from '../telemetry/tracing.ts';

/** Downloads a codehost revision's repository (src/service/codehost-integrations.ts does the talking). */
export interface RepositoryDownloader {
  downloadSource(
    integration: NonNullable<Awaited<ReturnType<typeof getIntegration>>>,
    repoUrl: string,
    ref: string,
    destFile: string,
  ): Promise<{ commitSha: string }>;
}

export interface LocalDataPlaneDeps {
  config: Config;
  db: Kysely<Database>;
  pool: pg.Pool;
  databaseUrl: string;
  secretBox: SecretBox;
  changes: ChangeFeed;
  edge: AppEdge;
  repositories: RepositoryDownloader;
  logger: Logger;
  /** Traces of each revision's work (src/telemetry/tracing.ts); none when absent. */
  tracing?: Tracing;
  /** The API of this process, when it serves one: apps' connections to the API go to it (src/http/app-connections.ts). */
  apiConnections?: AppConnectionSink;
  /**
   * How to start what carries the apps' traffic so that it runs outside the service's CPU reserve
   * (src/dataplane/service-cpu-reserve.ts); as it is when there is none.
   */
  ordinary?: (argv: readonly string[]) => string[];
  /** Tests shorten these. */
  leaseSeconds?: number;
  backoff?: { initialMs: number; maxMs: number };
}

/** The worker of the local data plane, and what isolation its sandbox gives (as the start log says). */
export interface LocalDataPlane extends Worker {
  readonly isolation: string;
  /** The apps running here: instances, restarts, usage (per-deployment metrics). */
  appStats(): Promise<AppRuntimeStats[]>;
  /** Samples the instances' CPU and memory into the edge's series now (also done every 10 s). */
  sampleUsage(): Promise<void>;
}

export async function startLocalDataPlane(deps: LocalDataPlaneDeps): Promise<LocalDataPlane> {
  const { config, db, logger } = deps;
  // What this worker sees and does is reported through the lifecycle, as this lease owner.
  const owner = await leaseOwnerFor(config.dataDir);
  const leaseSeconds = deps.leaseSeconds ?? 30;
  const reports = createOwnPlaneReports(db, { owner, leaseSeconds, logger });
  // Its parent cgroup is named after its user and data directory: no other service's (src/dataplane/resource-limits.ts).
  const limits = await createResourceControl({
    logger,
    service: config.dataDir,
    parentLimits: { memoryBytes: config.limits.appsMemoryMb * 1024 ** 2, pids: config.limits.appsPids },
  });
  // A uid per deployment, kept in the database by the lifecycle (claimAppUid; src/dataplane/app-uids.ts):
  // from SLIPWAY_APP_UIDS when root, else from the service user's subordinate range where the host gives
  // one (subordinate-ids.ts).
  const subordinate = process.getuid?.() === 0 ? undefined : await probeSubordinateIds();
  const range = subordinate?.ids?.deployments ?? config.appUids;
  const users = createAppUsers({ range, uidOf: (id) => reports.claimAppUid(id, range), subordinate });
  const sandbox = await createSandbox({
    mode: config.sandbox,
    dataDir: config.dataDir,
    limits,
    logger,
    users,
    ...(deps.ordinary ? { ordinary: deps.ordinary } : {}),
  });
  const contained = sandbox.kind === 'bwrap' && sandbox.networkIsolated && limits.kind !== 'none';
  // Said loudly when anything is missing: an operator must know that apps are not contained.
  (contained ? logger.info.bind(logger) : logger.warn.bind(logger))(
    { isolation: sandbox.kind, network: sandbox.networkIsolated ? 'own' : 'host', limits: limits.kind },
    `local data plane: ${sandbox.description}${contained ? '' : ' — APPS ARE NOT FULLY CONTAINED (see docs/data-plane.md, "What an app can reach")'}`,
  );
  for (const warning of await protectServiceDatabases(deps.pool)) logger.warn(warning);
  const fetcher: SourceFetcher = {
    async downloadRepository(deployment, ref, destFile) {
      const integrationId = deployment.source_config.integration_id;
      const repoUrl = deployment.source_config.repo_url;
      const integration =
        typeof integrationId === 'string'
          ? await getIntegration(db, deployment.workspace_id, integrationId)
          : undefined;
      if (!integration || typeof repoUrl !== 'string') {
        throw new RevisionFailure(
          'BUILD_FAILED',
          'integration_missing',
          `The deployment's code-host integration ${String(integrationId)} no longer exists; create the deployment again with an existing integration.`,
        );
      }
      return deps.repositories.downloadSource(integration, repoUrl, ref, destFile);
    },
  };
  // A restore on another apps port or domain (or a changed SLIPWAY_APPS_PUBLIC_URL): the stable URLs
  // stored with the deployments name where their apps answer now (issue 34, item 6), before any runs.
  const moved = await reports.reportAppEdge(appUrlParts(deps.edge));
  if (moved > 0)
    logger.info({ deployments: moved, apps_url: deps.edge.publicUrl }, 'stable URLs moved to this app edge');
  const disk = await createDiskLimiter({ config, logger, ids: sandbox.ids });
  logger.info(`local data plane: ${disk.description}`);
  const runtime = createLocalRuntime({ ...deps, reports, sandbox, fetcher, disk });
  const worker = startWorker({
    db,
    runtime,
    reports,
    changes: deps.changes,
    logger,
    owner,
    concurrency: config.workerConcurrency,
    leaseSeconds,
    ...(deps.tracing ? { tracing: deps.tracing } : {}),
  });
  // Each app database against its storage limit (issue 33): read-only over it, cut off past the margin.
  const databaseStorage = startDatabaseStorageWatch({
    db,
    reports,
    pool: deps.pool,
    logger,
    defaults: {
      databaseStorageGi: config.limits.defaultDatabaseStorageGi,
      maxDatabaseStorageGi: config.limits.databaseStorageGi,
    },
    intervalMs: config.databaseCheckIntervalMs,
  });
  // CPU and memory of each route's instances into the edge's series per revision.
  const usage = startUsageSampler({ traffic: deps.edge.traffic, appStats: () => runtime.appStats(), logger });
  return {
    isolation: `${sandbox.description}; ${disk.description}`,
    appStats: () => runtime.appStats(),
    sampleUsage: () => usage.sample(),
    async stop() {
      await usage.stop();
      await databaseStorage.stop();
      await worker.stop();
      await sandbox.dispose();
      await limits.dispose();
    },
  };
}
