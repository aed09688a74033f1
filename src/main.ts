/**
 * Entry point: read the configuration, open the database (embedded or DATABASE_URL), make the first-
 * start defaults, serve HTTP, and shut down gracefully on SIGTERM/SIGINT: stop accepting, finish
 * in-flight requests, close the pool, stop the embedded server.
 */
import { buildApp } from './app.ts';
import { bootstrap } from './bootstrap.ts';
import { ConfigError, loadConfig } from './config.ts';
import { createSecretBox, loadEncryptionKey } from './crypto/secret-box.ts';
import { openDatabase } from './db/database.ts';
import { createLogger } from './logger.ts';
import { startDeadlineSweeper } from './pipeline/deadlines.ts';
import { startRetentionSweeper } from './pipeline/retention.ts';
import { openChangeFeed } from './db/change-feed.ts';
import { createAppRouter } from './dataplane/app-router.ts';
import { startLocalDataPlane } from './dataplane/local-data-plane.ts';
import { createCodehostIntegrationService } from './service/codehost-integrations.ts';

async function main(): Promise<void> {
  let config;
  try {
    config = loadConfig();
  } catch (error) {
    if (error instanceof ConfigError) {
      process.stderr.write(`slipway: invalid configuration: ${error.message}\n`);
      process.exit(2);
    }
    throw error;
  }
  const logger = createLogger(config.logLevel);
  const database = await openDatabase(config, logger);
  const secretBox = createSecretBox(await loadEncryptionKey(config.encryptionKey, config.dataDir));
  const first = await bootstrap(database.db, config.bootstrapApiKey);
  if (first.generatedKey !== null) {
    // Shown once, on the terminal only: the key is stored hashed and cannot be shown again.
    process.stdout.write(
      `\nSlipway's first start made an organization, a workspace and this admin API key:\n\n    ${first.generatedKey}\n\nKeep it now; it will not be shown again. Use it as the X-Api-Key header.\n\n`,
    );
  }
  const changes = await openChangeFeed(database.url, logger);
  const router = createAppRouter({ appsDomain: config.appsDomain, logger, drainTimeoutMs: config.drainTimeoutMs, publicUrl: config.publicUrl });
  const app = await buildApp({ config, db: database.db, pool: database.pool, secretBox, logger, changes, router });
  const sweeper = startDeadlineSweeper({ db: database.db, logger, intervalMs: 30_000 });
  const retention = startRetentionSweeper({ db: database.db, dataDir: config.dataDir, policy: config, logger, intervalMs: 60 * 60_000 });
  const worker = config.roles.includes('worker')
    ? await startLocalDataPlane({
        config,
        db: database.db,
        pool: database.pool,
        databaseUrl: database.url,
        secretBox,
        changes,
        router,
        repositories: createCodehostIntegrationService({ db: database.db, secretBox, allowInsecure: config.allowInsecureCodehost, logger }).repositories,
        logger,
      })
    : null;

  let closing: Promise<void> | null = null;
  const shutdown = (signal: string) => {
    closing ??= (async () => {
      logger.info({ signal }, 'shutting down');
      try {
        await sweeper.stop();
        await retention.stop();
        // Requests first (apps keep serving them), then the apps and builds, then the feed.
        await app.close();
        await worker?.stop();
        await router.close();
        await changes.close();
      } finally {
        await database.close();
      }
      logger.info('stopped');
    })().then(
      () => process.exit(0),
      (error: unknown) => {
        logger.error({ err: error }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));

  try {
    await app.listen({ port: config.port, host: config.host });
  } catch (error) {
    logger.error({ err: error }, 'could not listen');
    await database.close();
    process.exit(1);
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`slipway: failed to start: ${error instanceof Error ? error.stack ?? error.message : String(error)}\n`);
  process.exit(1);
});
