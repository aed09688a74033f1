/**
 * Entry point: read the configuration, take the data directory, open the database (embedded or
 * DATABASE_URL), check the encryption key against it, make the first-start defaults, serve HTTP, and
 * shut down gracefully on SIGTERM/SIGINT: stop accepting, finish in-flight requests, close the pool,
 * stop the embedded server. If the embedded server dies under it, the service exits non-zero so that a
 * supervisor restarts it (a restart recovers the server) instead of answering 500s.
 */
import os from 'node:os';
import type { Logger } from 'pino';
import { buildApp } from './app.ts';
import { bootstrap, handOverFirstKey } from './bootstrap.ts';
import { ConfigError, loadConfig, type Config } from './config.ts';
import { databaseHoldsNoSealedValue, openSecretBox } from './crypto/key-check.ts';
import { loadEncryptionKeys } from './crypto/secret-box.ts';
import { lockDataDir } from './db/data-dir-lock.ts';
import { openDatabase, type OpenDatabase } from './db/database.ts';
import { createLogger } from './logger.ts';
import { startDeadlineSweeper } from './pipeline/deadlines.ts';
import { startRetentionSweeper } from './pipeline/retention.ts';
import { openChangeFeed, type ChangeFeed } from './db/change-feed.ts';
import { createSplitRollbackMonitor } from './service/split-rollback-monitor.ts';
import { startAppEdge, type AppEdge } from './dataplane/app-edge.ts';
import type { TrafficSeries } from './dataplane/traffic-series.ts';
import { startLocalDataPlane } from './dataplane/local-data-plane.ts';
import { parentGroupName } from './dataplane/resource-limits.ts';
import { reserveServiceCpu } from './dataplane/service-cpu-reserve.ts';
import { startTracing } from './telemetry/tracing.ts';
import { createServices, type Services } from './services.ts';
import { createPreviewStatusPoster, startPreviewStatusPoster } from './service/preview-statuses.ts';

/** Start-up notices about the configuration that are not errors but surprise people later. */
function warnAboutSetup(config: Config, logger: Logger): void {
  const publicHost = new URL(config.publicUrl).hostname;
  if (publicHost === '0.0.0.0' || publicHost === '[::]') {
    logger.warn(
      { publicUrl: config.publicUrl },
      `HOST is ${config.host} and SLIPWAY_PUBLIC_URL is not set: OAuth redirect and webhook ` +
        `URLs would name ${config.publicUrl}, which no browser or code host can reach. Set ` +
        `SLIPWAY_PUBLIC_URL to the address users reach this service at.`,
    );
  }
  if (process.getuid?.() === 0 && config.databaseUrl === null) {
    logger.warn(
      "running as root: the embedded PostgreSQL runs as the system user 'postgres' (created " +
        'if missing), which owns the cluster directory; see docs/operations.md',
    );
  }
}

/** A one-line reason for a failed listen, naming the setting to change; null for other errors. */
function listenFailure(error: unknown, config: Config): string | null {
  const code = (error as NodeJS.ErrnoException).code;
  if (code === 'EADDRINUSE')
    return `PORT: ${config.port} is already in use on ${config.host} (another process listens there): stop it, or set PORT to a free port`;
  if (code === 'EACCES') return `PORT: this user may not listen on port ${config.port}: set PORT to 1024 or above`;
  if (code === 'EADDRNOTAVAIL' || code === 'ENOTFOUND')
    return `HOST: ${config.host} is not an address of this machine: set HOST to one (127.0.0.1, or 0.0.0.0 for all)`;
  return null;
}

/** The configuration, or exit 2 naming what is wrong with it. */
function readConfig(): Config {
  try {
    return loadConfig();
  } catch (error) {
    if (error instanceof ConfigError) {
      process.stderr.write(`slipway: invalid configuration: ${error.message}\n`);
      process.exit(2);
    }
    throw error;
  }
}

/**
 * The encryption keys checked against the database, and the first-start defaults (the bootstrap key, the
 * first API key handed over). Closes the database if either fails.
 */
async function openSecretsAndDefaults(config: Config, database: OpenDatabase, logger: Logger) {
  let secretBox;
  let first;
  try {
    const keys = await loadEncryptionKeys({
      configured: config.encryptionKey,
      previous: config.previousEncryptionKey,
      dataDir: config.dataDir,
      mayCreate: await databaseHoldsNoSealedValue(database.db),
    });
    secretBox = await openSecretBox(database.db, keys);
    first = await bootstrap(database.db, config.bootstrapApiKey);
  } catch (error) {
    await database.close();
    throw error;
  }
  if (first.revokedBootstrapKeys.length > 0) {
    logger.warn(
      { revoked: first.revokedBootstrapKeys },
      config.bootstrapApiKey === null
        ? 'SLIPWAY_BOOTSTRAP_API_KEY is no longer set: revoked the bootstrap key it made'
        : 'SLIPWAY_BOOTSTRAP_API_KEY changed: revoked the previous bootstrap key',
    );
  }
  if (first.generatedKey !== null) await handOverFirstKey(first.generatedKey, config.dataDir, logger);
  return secretBox;
}

/**
 * The service's periodic work besides the API and the worker: deadlines, pull-request previews' commit
 * statuses, retention, and the automatic rollback of traffic splits (started with the worker).
 */
function startBackgroundWork(deps: {
  config: Config;
  db: OpenDatabase['db'];
  services: Services;
  changes: ChangeFeed;
  logger: Logger;
  traffic: () => TrafficSeries | null;
}) {
  const { config, db, services, changes, logger } = deps;
  const sweeper = startDeadlineSweeper({ db, logger, intervalMs: 30_000 });
  // Pull-request previews' commit statuses go back to the code host (src/service/preview-statuses.ts).
  const previewStatuses = startPreviewStatusPoster({
    poster: createPreviewStatusPoster({ db, integrations: services.integrations, logger }),
    changes,
    logger,
  });
  const retention = startRetentionSweeper({
    db,
    dataDir: config.dataDir,
    policy: config,
    logger,
    intervalMs: 60 * 60_000,
  });
  // Traffic splits taken back by themselves, judged from this process's app edge (docs/app-urls.md).
  const splitRollback = createSplitRollbackMonitor({
    db,
    splits: services.splits,
    traffic: deps.traffic,
    logger,
  });
  return {
    splitRollback,
    async stop(): Promise<void> {
      await sweeper.stop();
      await previewStatuses.stop();
      await retention.stop();
      await splitRollback.stop();
    },
  };
}

async function main(): Promise<void> {
  const config = readConfig();
  const logger = createLogger(config.logLevel);
  warnAboutSetup(config, logger);

  // Signals during the start: stop what was started so far (the exit hooks of the embedded server and
  // of the lock do the rest), then exit. Replaced by the graceful shutdown once serving.
  let database: OpenDatabase | null = null;
  let shutdown: ((reason: string, exitCode: number) => void) | null = null;
  const onSignal = (signal: NodeJS.Signals) => {
    if (shutdown) return shutdown(signal, 0);
    void (database?.close() ?? Promise.resolve()).finally(() =>
      process.exit(128 + (os.constants.signals[signal] ?? 15)),
    );
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  // A closed terminal: Node would exit at once, leaving the embedded server (in its own session) behind.
  process.on('SIGHUP', onSignal);

  const lock = await lockDataDir(config.dataDir, { logger, command: 'service' });
  // Where apps run here, the service (and the embedded PostgreSQL it starts next) gets a CPU group that
  // weighs four times as much as all apps together, so the API answers promptly under app load.
  const cpuReserve = config.roles.includes('worker')
    ? await reserveServiceCpu({
        enabled: config.serviceCpuReserve,
        parent: parentGroupName(process.getuid?.() ?? null, config.dataDir),
        cpus: os.availableParallelism(),
        logger,
      })
    : null;
  if (cpuReserve) logger.info(`CPU: ${cpuReserve.description}`);
  let databaseLost: (exit: { code: number | null; signal: NodeJS.Signals | null }) => void = () => process.exit(1);
  database = await openDatabase(config, logger, { onServerExit: (exit) => databaseLost(exit) });
  const db = database.db;
  const secretBox = await openSecretsAndDefaults(config, database, logger);
  const changes = await openChangeFeed(database.url, logger);
  // The apps' edge, which lives with the worker that runs them (docs/app-urls.md), and the worker: started
  // below, before the API listens, so that /readyz answers once everything runs.
  let edge: AppEdge | null = null;
  // One set of services for the API and the worker (src/services.ts).
  const services = createServices({
    config,
    db,
    secretBox,
    logger,
    pool: database.pool,
    traffic: () => edge?.traffic ?? null,
  });
  const tracing = startTracing(config.tracing, logger);
  let worker: Awaited<ReturnType<typeof startLocalDataPlane>> | null = null;
  const apps = async () =>
    edge === null
      ? null
      : {
          edge: await edge.stats(),
          runtime: worker ? await worker.appStats() : [],
          traffic: edge.traffic.totals(),
          requestLog: edge.requestLogCounts(),
        };
  const app = await buildApp({
    config,
    db,
    pool: database.pool,
    secretBox,
    logger,
    changes,
    services,
    tracing,
    apps,
  });
  const background = startBackgroundWork({
    config,
    db,
    services,
    changes,
    logger,
    traffic: () => edge?.traffic ?? null,
  });
  const opened = database;
  let closing: Promise<void> | null = null;
  shutdown = (reason: string, exitCode: number) => {
    closing ??= (async () => {
      logger.info({ reason }, 'shutting down');
      try {
        await background.stop();
        // API requests first, then the apps and builds (the edge keeps serving them meanwhile), then the feed.
        await app.close();
        await worker?.stop();
        await edge?.close();
        await changes.close();
        await tracing.shutdown();
      } finally {
        // The embedded server last, once nothing uses it; the data directory once the server is down.
        await opened.close();
        await cpuReserve?.release();
        await lock.release();
      }
      logger.info('stopped');
    })().then(
      () => process.exit(exitCode),
      (error: unknown) => {
        logger.error({ err: error }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  const stop = shutdown;
  databaseLost = ({ code, signal }) => {
    logger.fatal(
      { code, signal },
      'the embedded PostgreSQL exited under the running service: stopping with exit code 1 (a restart recovers it)',
    );
    stop('embedded PostgreSQL exited', 1);
    // Stopping talks to a database that is gone; do not let a step that waits on it keep the process up.
    setTimeout(() => process.exit(1), config.drainTimeoutMs + 15_000).unref();
  };

  if (config.roles.includes('worker')) {
    try {
      const ordinary = cpuReserve ? { ordinary: cpuReserve.ordinary } : {};
      edge = await startAppEdge({ config, logger, ...ordinary });
      background.splitRollback.start();
      worker = await startLocalDataPlane({
        config,
        db,
        pool: database.pool,
        databaseUrl: database.url,
        secretBox,
        changes,
        edge,
        repositories: services.integrations.repositories,
        logger,
        tracing,
        ...ordinary,
        // Apps reach this process's API through their own forwards, which tell it the deployment.
        ...(config.roles.includes('api') ? { apiConnections: app.appConnections.accept } : {}),
      });
    } catch (error) {
      if (error instanceof ConfigError) process.stderr.write(`slipway: cannot start: ${error.message}\n`);
      else logger.error({ err: error }, 'the worker could not start');
      stop('the worker could not start', 1);
      return;
    }
  }

  try {
    await app.listen({ port: config.port, host: config.host });
  } catch (error) {
    const reason = listenFailure(error, config);
    // What the operator must change, on one line where they started it; anything else to the log.
    if (reason !== null) process.stderr.write(`slipway: cannot start: ${reason}\n`);
    else logger.error({ err: error }, 'could not listen');
    stop('could not listen', 1);
  }
}

main().catch((error: unknown) => {
  // Configuration that cannot work (the data directory in use, the wrong encryption key): one line
  // naming the setting, no stack trace.
  if (error instanceof ConfigError) process.stderr.write(`slipway: cannot start: ${error.message}\n`);
  else
    process.stderr.write(
      `slipway: failed to start: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
    );
  process.exit(1);
});
