/**
 * `slipway backup <file>`, `slipway restore <file>` and `slipway remove-data`: operator commands run where the service runs,
 * configured as the service is (DATABASE_URL, SLIPWAY_DATA_DIR, SLIPWAY_ENCRYPTION_KEY; see README,
 * "Configuration"), like `npm run rotate-key`. They talk to the database, not to the API: no login is
 * needed, and the encryption key is what proves the right to read the backup. docs/operations.md, "Back
 * up and restore", has the steps.
 */
import { Command } from 'commander';
import pino from 'pino';
import { CliError, EXIT, withExample, type CliRuntime } from '@slipway/cli';

/**
 * Runs the work with Ctrl-C turned into an abort it checks between steps (so that it cleans up after
 * itself) instead of the CLI's exit at once; refusals of the configuration or the archive become exit
 * code 2 with the message alone, an interruption 130.
 */
async function asCliErrors<T>(runtime: CliRuntime, work: (signal: AbortSignal) => Promise<T>): Promise<T> {
  const [{ ConfigError }, { BackupError }] = await Promise.all([
    import('../config.ts'),
    import('../ops/backup-archive.ts'),
  ]);
  const aborter = new AbortController();
  runtime.handOverSignals();
  const onInterrupt = () => {
    runtime.streams.stderr.write('interrupt: stopping after the step in progress, and cleaning up\n');
    aborter.abort(new CliError('interrupted; nothing was kept', EXIT.interrupted));
  };
  process.on('SIGINT', onInterrupt);
  process.on('SIGTERM', onInterrupt);
  try {
    return await work(aborter.signal);
  } catch (error) {
    if (aborter.signal.aborted) throw aborter.signal.reason;
    if (error instanceof ConfigError || error instanceof BackupError) throw new CliError(error.message, EXIT.usage);
    throw error;
  } finally {
    process.off('SIGINT', onInterrupt);
    process.off('SIGTERM', onInterrupt);
  }
}

/** The service's configuration and keys, and a logger on stderr (stdout is for the progress lines). */
async function setUp(mayCreateKey: false) {
  const [{ loadConfig }, { createLogger }, { loadEncryptionKeys }] = await Promise.all([
    import('../config.ts'),
    import('../logger.ts'),
    import('../crypto/secret-box.ts'),
  ]);
  const config = loadConfig();
  const logger = createLogger(config.logLevel === 'info' ? 'warn' : config.logLevel, pino.destination(2));
  const keys = () =>
    loadEncryptionKeys({
      configured: config.encryptionKey,
      previous: config.previousEncryptionKey,
      dataDir: config.dataDir,
      mayCreate: mayCreateKey,
    });
  return { config, logger, keys };
}

export function backupCommand(runtime: CliRuntime): Command {
  const say = (line: string) => runtime.streams.stdout.write(`${line}\n`);
  return withExample(
    new Command('backup')
      .description(
        "Write one archive of the service's database, its files and its apps' databases (not the encryption key: keep that apart); the service may keep running",
      )
      .argument('<file>', 'the archive to write (a new file, e.g. slipway-2026-11-28.tar.gz)')
      .option(
        '--without-app-data',
        "leave out the apps' own databases when no pg_dump fits the server (a restore makes them empty)",
      ),
    [
      'slipway backup /backups/slipway-$(date +%F).tar.gz',
      'SLIPWAY_DATA_DIR=/var/lib/slipway slipway backup /backups/slipway-$(date +%F).tar.gz',
      'DATABASE_URL=postgres://... SLIPWAY_ENCRYPTION_KEY=... slipway backup slipway.tar.gz',
    ],
  ).action(async (file: string, options: { withoutAppData?: boolean }) => {
    await asCliErrors(runtime, async (signal) => {
      const { config, logger, keys } = await setUp(false);
      const [{ openForBackup }, { createBackup }] = await Promise.all([
        import('../ops/operator-database.ts'),
        import('../ops/backup.ts'),
      ]);
      const database = await openForBackup(config, logger);
      let result;
      try {
        result = await createBackup({
          database,
          keys: await keys(),
          dataDir: config.dataDir,
          output: file,
          slipwayVersion: runtime.version,
          withoutAppData: options.withoutAppData === true,
          say,
          signal,
        });
      } finally {
        await database.close();
      }
      // Written, but not whole: a job that runs backups must notice (--without-app-data asked for it).
      const left = result.manifest.appDatabases.filter((app) => !app.included);
      if (options.withoutAppData !== true && left.length > 0)
        throw new CliError(
          `${file} is written, but without the data of ${left.length} app database(s): ${left.map((app) => `${app.name} (deployment ${app.deploymentId})`).join(', ')}; see the warnings above`,
          EXIT.failed,
        );
    });
  });
}

export function restoreCommand(runtime: CliRuntime): Command {
  const say = (line: string) => runtime.streams.stdout.write(`${line}\n`);
  return withExample(
    new Command('restore')
      .description(
        'Bring a backup into a new data directory (SLIPWAY_DATA_DIR, holding at most encryption.key) or an empty DATABASE_URL database; needs the encryption key of the backup',
      )
      .argument('<file>', 'the archive slipway backup wrote'),
    [
      'slipway restore slipway.tar.gz',
      'mkdir -m 700 /var/lib/slipway-new && cp encryption.key /var/lib/slipway-new/ && SLIPWAY_DATA_DIR=/var/lib/slipway-new slipway restore slipway.tar.gz',
      'DATABASE_URL=postgres://.../slipway_new SLIPWAY_ENCRYPTION_KEY=... slipway restore slipway.tar.gz',
    ],
  ).action(async (file: string) => {
    await asCliErrors(runtime, async (signal) => {
      const { config, logger, keys } = await setUp(false);
      const { restoreBackup } = await import('../ops/restore.ts');
      const { ConfigError } = await import('../config.ts');
      let loaded;
      try {
        loaded = await keys();
      } catch (error) {
        if (!(error instanceof ConfigError)) throw error;
        throw new ConfigError(
          'SLIPWAY_ENCRYPTION_KEY',
          `a restore needs the encryption key of the backup: set SLIPWAY_ENCRYPTION_KEY, or put the encryption.key file into ${config.dataDir} first; nothing was changed`,
        );
      }
      const { appDataNotRestored } = await restoreBackup({ archive: file, config, keys: loaded, logger, say, signal });
      if (appDataNotRestored.length > 0)
        throw new CliError(
          `restored, but ${appDataNotRestored.length} app database(s) are empty because their data did not load: ${appDataNotRestored.map((app) => `${app.name} (deployment ${app.deploymentId})`).join(', ')}; see the warnings above`,
          EXIT.failed,
        );
    });
  });
}

export function removeDataCommand(runtime: CliRuntime): Command {
  const say = (line: string) => runtime.streams.stdout.write(`${line}\n`);
  return withExample(
    new Command('remove-data')
      .description(
        "Remove the service's data directory (its embedded database, encryption key, builds and apps' files) for good, to start again from nothing; the service must be stopped",
      )
      .option('--yes', 'remove it: without this nothing is removed'),
    ['slipway remove-data --yes', 'SLIPWAY_DATA_DIR=/var/lib/slipway slipway remove-data --yes'],
  ).action(async (options: { yes?: boolean }) => {
    await asCliErrors(runtime, async () => {
      const { config, logger } = await setUp(false);
      const { dataDirectories, removeData } = await import('../ops/remove-data.ts');
      if (options.yes !== true)
        throw new CliError(
          `This removes ${dataDirectories(config).join(' and ')} for good (the encryption key too: a backup cannot be restored without it); run it again with --yes. Nothing was removed.`,
          EXIT.usage,
        );
      await removeData({ config, logger, say });
    });
  });
}
