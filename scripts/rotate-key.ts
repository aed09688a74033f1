/**
 * `npm run rotate-key` (`node --import tsx scripts/rotate-key.ts [--batch-size N]`): re-encrypts every
 * sealed value (deployment and revision secrets, OAuth client secrets, tokens and verifiers, code-host
 * credentials, app database passwords and agent credentials) with a new encryption key, in batches.
 * Interrupted (Ctrl-C, a crash), it is run again and continues; docs/operations.md ('Encryption key')
 * has the steps.
 *
 * The keys come from the configuration the service runs with: SLIPWAY_ENCRYPTION_KEY is the new key and
 * SLIPWAY_PREVIOUS_ENCRYPTION_KEY the one being replaced. With the key file of the embedded setup and
 * neither variable set, it makes the new key itself: the file holds the new key and then the previous
 * one while the rotation runs, and the new key alone once it is done.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import pino from 'pino';
import { ConfigError, loadConfig } from '../src/config.ts';
import { openSecretBox } from '../src/crypto/key-check.ts';
import { rotateKey } from '../src/crypto/key-rotation.ts';
import {
  KEY_FILE,
  keyIdOf,
  loadEncryptionKeys,
  readKeyFile,
  writeKeyFile,
  type EncryptionKeys,
} from '../src/crypto/secret-box.ts';
import { lockDataDir } from '../src/db/data-dir-lock.ts';
import { openDatabase } from '../src/db/database.ts';
import { createLogger } from '../src/logger.ts';

const USAGE = `Usage: npm run rotate-key [-- --batch-size N]

Re-encrypts every stored secret with a new encryption key (docs/operations.md, 'Encryption key').
  embedded database, key file:  stop the service, then run it; it makes the new key itself
  SLIPWAY_ENCRYPTION_KEY:       set SLIPWAY_ENCRYPTION_KEY to the new key and
                                SLIPWAY_PREVIOUS_ENCRYPTION_KEY to the current one
`;

class UsageError extends Error {}

function batchSizeOf(args: string[]): number {
  let size = 200;
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    if (arg === '--help' || arg === '-h') throw new UsageError('');
    const value =
      arg === '--batch-size'
        ? args[++i]
        : arg.startsWith('--batch-size=')
          ? arg.slice('--batch-size='.length)
          : undefined;
    if (value === undefined) throw new UsageError(`unknown argument '${arg}'`);
    size = Number(value);
    if (!Number.isInteger(size) || size < 1 || size > 10_000)
      throw new UsageError('--batch-size must be an integer from 1 to 10000');
  }
  return size;
}

/** Terminal output of a command: progress lines, not logs. */
const say = (line: string) => process.stdout.write(`${line}\n`);

async function main(): Promise<number> {
  const batchSize = batchSizeOf(process.argv.slice(2));
  const config = loadConfig();
  // Logs (the embedded server starting and stopping) to stderr; stdout is for the progress lines.
  const logger = createLogger(config.logLevel, pino.destination(2));
  const embedded = config.databaseUrl === null;
  if (
    embedded &&
    !(await fs.stat(path.join(config.dataDir, 'postgres', 'PG_VERSION')).then(
      () => true,
      () => false,
    ))
  ) {
    throw new ConfigError(
      'SLIPWAY_DATA_DIR',
      `${config.dataDir} holds no Slipway database: run this where the service runs, with its SLIPWAY_DATA_DIR`,
    );
  }
  // The embedded database belongs to one process at a time: the service must be stopped.
  const lock = embedded ? await lockDataDir(config.dataDir, { logger, command: 'rotate-key' }) : null;
  const database = await openDatabase(config, logger);
  const aborter = new AbortController();
  process.on('SIGINT', () => {
    say('interrupt: stopping after the batch in progress');
    aborter.abort();
  });
  try {
    let keys: EncryptionKeys = await loadEncryptionKeys({
      configured: config.encryptionKey,
      previous: config.previousEncryptionKey,
      dataDir: config.dataDir,
      mayCreate: false,
    });
    if (keys.previous.length === 0) {
      if (keys.file === null) {
        throw new ConfigError(
          'SLIPWAY_PREVIOUS_ENCRYPTION_KEY',
          'is not set: set it to the key in use now, and SLIPWAY_ENCRYPTION_KEY to the new key (openssl rand -hex 32)',
        );
      }
      // The key in use must be the database's before the file is touched.
      await openSecretBox(database.db, keys);
      // The new key is on disk, beside the old one, before anything is sealed with it.
      const fresh = randomBytes(32);
      await writeKeyFile(keys.file, [fresh, keys.current]);
      say(
        `made a new key (id ${keyIdOf(fresh)}); ${keys.file} holds it, then the previous key, until the rotation completes`,
      );
      keys = { ...keys, current: fresh, previous: [keys.current] };
    }
    const box = await openSecretBox(database.db, keys);
    say(
      `re-encrypting with the key with id ${box.keyId} (accepted: ${box.keyIds.join(', ')}), ${batchSize} rows per batch`,
    );
    const result = await rotateKey(database.db, box, {
      batchSize,
      signal: aborter.signal,
      onBatch: ({ columns, rows, total }) => say(`  ${columns}: ${rows} rows re-encrypted (${total} so far)`),
    });
    if (result.status === 'interrupted') {
      say(
        `interrupted after ${result.resealed} rows: run the same command again to continue (both keys stay needed until it completes)`,
      );
      return 130;
    }
    if (result.status === 'incomplete') {
      for (const { columns, rows } of result.remaining) say(`  ${columns}: ${rows} rows still sealed with another key`);
      say(
        'values sealed with the previous key keep appearing: a process still seals with it. Start every replica with SLIPWAY_ENCRYPTION_KEY set to the new key and SLIPWAY_PREVIOUS_ENCRYPTION_KEY to the previous one, then run this again.',
      );
      return 1;
    }
    say(`done: ${result.resealed} rows re-encrypted; every sealed value is sealed with the key with id ${box.keyId}`);
    // A key file naming the old key (first, or only) would make the next start without the variables
    // refuse: it gets the new key alone.
    const file = keys.file ?? path.join(config.dataDir, KEY_FILE);
    const onDisk = await readKeyFile(file).catch(() => null);
    const outdated =
      onDisk !== null &&
      (keys.file !== null
        ? onDisk.length > 1 || !onDisk[0]!.equals(keys.current)
        : keys.previous.some((k) => onDisk[0]!.equals(k)));
    if (outdated) {
      await writeKeyFile(file, [keys.current]);
      say(`${file} now holds the new key alone: back it up with the database`);
    }
    if (keys.file === null)
      say(
        'next: remove SLIPWAY_PREVIOUS_ENCRYPTION_KEY from the configuration of every replica and restart them; keep SLIPWAY_ENCRYPTION_KEY (the new key) with your backups',
      );
    return 0;
  } finally {
    await database.close();
    await lock?.release();
  }
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    if (error instanceof UsageError) {
      process.stderr.write(error.message === '' ? USAGE : `rotate-key: ${error.message}\n\n${USAGE}`);
      process.exit(error.message === '' ? 0 : 2);
    }
    if (error instanceof ConfigError) {
      process.stderr.write(`rotate-key: ${error.message}\n`);
      process.exit(2);
    }
    process.stderr.write(`rotate-key: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exit(1);
  },
);
