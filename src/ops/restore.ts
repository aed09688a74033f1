/**
 * `slipway restore <file>`: brings a backup (src/ops/backup-archive.ts) into a fresh data directory or
 * an empty DATABASE_URL database. Everything that can refuse is checked before anything is changed:
 * the target is empty, the archive is whole and unchanged (every entry's SHA-256, the manifest's
 * signature), the process has the key its secrets are sealed with, and this version knows its schema.
 *
 * Then, in one transaction, the schema is made as the backup's version had it and the rows loaded; the
 * migrations of this version follow (a restore of an older backup is an upgrade), then the data
 * directory's files and the apps' databases (their roles with the passwords the service keeps for them).
 *
 * An app's data is the app's: its own code runs while it loads (its CHECK constraints), and can refuse to
 * load on purpose. Each app's database is restored on its own, in one transaction: one that fails is
 * left empty and named in the output and the result, and the rest of the service comes back all the same.
 */
import { constants } from 'node:fs';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { Logger } from 'pino';
import { ConfigError, type Config } from '../config.ts';
import { KEY_CHECK_TEXT } from '../crypto/key-check.ts';
import { createSecretBox, keyIdOf, type EncryptionKeys } from '../crypto/secret-box.ts';
import { createAppDatabase } from '../dataplane/app-database.ts';
import { migrate, migrateWithin, readMigrations } from '../db/migrate.ts';
import { withClient } from '../db/admin-client.ts';
import { findPgTools, restoreAppDatabase, type PgTools } from './app-database-dump.ts';
import { BackupError, manifestSignedBy, readArchive, type Manifest } from './backup-archive.ts';
import { checkRestoreTarget, openRestoreTarget } from './operator-database.ts';
import { loadTables, serviceTables } from './table-data.ts';

export interface RestoreOptions {
  archive: string;
  config: Config;
  keys: EncryptionKeys;
  logger: Logger;
  say: (line: string) => void;
  /**
   * Ctrl-C: stops at the next step (the load transaction in progress finishes or rolls back first); a
   * data directory target is emptied again, so the restore can be run again.
   */
  signal?: AbortSignal;
}

function describeKeys(keys: EncryptionKeys): string {
  const ids = [keys.current, ...keys.previous].map(keyIdOf);
  return `the key from ${keys.source} (id ${ids.join(', ')})`;
}

/** The manifest's claims this process must accept: its schema, its key. Throws to refuse. */
async function acceptManifest(
  manifest: Manifest,
  manifestBytes: Buffer,
  signature: string,
  keys: EncryptionKeys,
): Promise<void> {
  // The key first: with another key nothing else of the archive can be trusted or used.
  const key = [keys.current, ...keys.previous].find((k) => keyIdOf(k) === manifest.keyCheck.keyId);
  if (!key)
    throw new ConfigError(
      'SLIPWAY_ENCRYPTION_KEY',
      `${describeKeys(keys)} is not the key this backup's secrets are sealed with (id ${manifest.keyCheck.keyId}). ` +
        `Restore with that key (SLIPWAY_ENCRYPTION_KEY, or its encryption.key file in the new SLIPWAY_DATA_DIR); nothing was changed.`,
    );
  if (!manifestSignedBy(manifestBytes, signature, key))
    throw new BackupError(
      "the archive's manifest was changed after the backup was written (its signature does not match): refusing it; nothing was changed",
    );
  let opens: boolean;
  try {
    opens = createSecretBox(key).open(manifest.keyCheck.checkValue) === KEY_CHECK_TEXT;
  } catch {
    opens = false;
  }
  if (!opens) throw new BackupError("the backup's key check value does not open with its key: the archive is damaged");
  if (manifest.keyCheck.rotatingTo !== null && manifest.keyCheck.rotatingTo !== keyIdOf(keys.current))
    throw new ConfigError(
      'SLIPWAY_ENCRYPTION_KEY',
      `the backup was made during a key rotation to the key with id ${manifest.keyCheck.rotatingTo}: set SLIPWAY_ENCRYPTION_KEY to that key and SLIPWAY_PREVIOUS_ENCRYPTION_KEY to the key with id ${manifest.keyCheck.keyId}`,
    );

  const ours = await readMigrations();
  const latest = ours.at(-1)?.id ?? 0;
  if (manifest.schema.version > latest)
    throw new BackupError(
      `the backup was made by a newer Slipway (${manifest.slipwayVersion}, schema version ${manifest.schema.version}; this one knows up to ${latest}): restore it with that version or a later one`,
    );
  for (const migration of manifest.schema.migrations) {
    const mine = ours.find((m) => m.id === migration.id);
    if (!mine || mine.name !== migration.name)
      throw new BackupError(
        `the backup's schema has migration ${migration.id}_${migration.name}, which this version does not have: restore it with the version that made it (${manifest.slipwayVersion})`,
      );
  }
  if (manifest.schema.migrations.at(-1)?.id !== manifest.schema.version)
    throw new BackupError(
      "the backup's schema version is not its last migration: the archive is not one Slipway wrote",
    );
  for (const app of manifest.appDatabases) {
    const inArchive = manifest.entries.some((e) => e.kind === 'app-database' && e.subject === app.name);
    if (inArchive !== app.included) throw new BackupError(`the manifest contradicts itself about ${app.name}`);
  }
}

/** App databases of the backup that exist on the target server already: restoring would take them over. */
async function takenAppNames(url: string, names: string[]): Promise<string[]> {
  if (names.length === 0) return [];
  return withClient(url, async (client) => {
    const result = await client.query<{ name: string }>(
      `select datname as name from pg_database where datname = any($1)
       union select rolname from pg_roles where rolname = any($1) order by 1`,
      [names],
    );
    return result.rows.map((r) => r.name);
  });
}

export interface RestoreResult {
  manifest: Manifest;
  rows: number;
  /** App databases whose data could not be loaded (left empty), with why. */
  appDataNotRestored: { name: string; deploymentId: string; reason: string }[];
}

export async function restoreBackup(options: RestoreOptions): Promise<RestoreResult> {
  const { config, keys, say } = options;
  await checkRestoreTarget(config);
  const staging = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-restore-'));
  try {
    const { manifest, staged } = await readArchive(path.resolve(options.archive), {
      staging,
      accept: (m, bytes, signature) => acceptManifest(m, bytes, signature, keys),
    });
    say(
      `archive checked: Slipway ${manifest.slipwayVersion}, schema version ${manifest.schema.version}, made ${manifest.createdAt}`,
    );
    const included = manifest.appDatabases.filter((a) => a.included);
    let tools: PgTools | null = null;
    if (included.length > 0) {
      tools = await findPgTools();
      if (!tools)
        throw new BackupError(
          `the backup holds ${included.length} app database(s) and this machine has no pg_restore: install postgresql-client; nothing was changed`,
        );
    }
    if (config.databaseUrl !== null) {
      const taken = await takenAppNames(
        config.databaseUrl,
        manifest.appDatabases.map((a) => a.name),
      );
      if (taken.length > 0)
        throw new ConfigError(
          'DATABASE_URL',
          `the server already has app databases or roles of this backup (${taken.slice(0, 3).join(', ')}): another Slipway uses them; restore to another server; nothing was changed`,
        );
    }

    options.signal?.throwIfAborted();
    const target = await openRestoreTarget(config, options.logger);
    let rows = 0;
    const notRestored: RestoreResult['appDataNotRestored'] = [];
    try {
      options.signal?.throwIfAborted();
      const client = await target.pool.connect();
      try {
        await client.query('begin');
        await migrateWithin(client, { upTo: manifest.schema.version });
        const tables = await serviceTables(client);
        const files = new Map<string, string>();
        for (const entry of manifest.entries)
          if (entry.kind === 'table') files.set(entry.subject, staged.get(entry.name)!);
        const expected = [...files.keys()].sort();
        if (expected.join(',') !== tables.join(','))
          throw new BackupError(
            `the backup's tables are not those of schema version ${manifest.schema.version} (${expected.length} in the archive, ${tables.length} in the schema)`,
          );
        options.signal?.throwIfAborted();
        const counts = await loadTables(client, files);
        for (const entry of manifest.entries) {
          if (entry.kind !== 'table') continue;
          if (entry.rows !== undefined && counts.get(entry.subject) !== entry.rows)
            throw new BackupError(
              `${entry.name}: ${counts.get(entry.subject)} rows read, the manifest says ${entry.rows}`,
            );
          rows += counts.get(entry.subject) ?? 0;
        }
        options.signal?.throwIfAborted();
        await client.query('commit');
      } catch (error) {
        await client.query('rollback').catch(() => undefined);
        throw error;
      } finally {
        client.release();
      }
      say(`database: ${rows} rows in ${manifest.entries.filter((e) => e.kind === 'table').length} tables`);
      const applied = await migrate(target.pool);
      if (applied.length > 0) say(`migrated from schema version ${manifest.schema.version} to ${applied.at(-1)}`);

      for (const entry of manifest.entries) {
        if (entry.kind !== 'file') continue;
        const destination = path.join(config.dataDir, entry.subject);
        await fs.mkdir(path.dirname(destination), { recursive: true, mode: 0o700 });
        // COPYFILE_EXCL: never over an existing file (or through a link someone put there).
        await fs.copyFile(staged.get(entry.name)!, destination, constants.COPYFILE_EXCL);
      }

      const box = createSecretBox(keys.current, keys.previous);
      const runtimes = await target.db
        .selectFrom('deployment_runtimes')
        .select(['deployment_id', 'database_name', 'role_name', 'database_password_sealed'])
        .where('database_name', 'is not', null)
        .execute();
      for (const runtime of runtimes) {
        options.signal?.throwIfAborted();
        if (!runtime.database_name || !runtime.role_name || !runtime.database_password_sealed) continue;
        const made = await createAppDatabase(
          target.pool,
          runtime.database_name,
          box.open(runtime.database_password_sealed),
        );
        const entry = manifest.entries.find((e) => e.kind === 'app-database' && e.subject === runtime.database_name);
        if (entry && tools) {
          try {
            await restoreAppDatabase(
              tools,
              target.url,
              runtime.database_name,
              { role: made.role, password: made.password },
              staged.get(entry.name)!,
            );
          } catch (error) {
            // pg_restore ran in one transaction: the database is as made, empty.
            const stderr = (error as { stderr?: unknown }).stderr;
            const reason = typeof stderr === 'string' && stderr.trim() !== '' ? stderr.trim() : String(error);
            notRestored.push({ name: runtime.database_name, deploymentId: runtime.deployment_id, reason });
            say(
              `WARNING: the data of app database ${runtime.database_name} (deployment ${runtime.deployment_id}) could not be loaded; it is empty: ${reason}`,
            );
          }
        }
      }
      if (runtimes.length > 0)
        say(
          `app databases: ${runtimes.length} made${included.length > 0 ? `, ${included.length - notRestored.length} with their data` : ' empty (the backup did not include their data)'}${notRestored.length > 0 ? `; ${notRestored.length} EMPTY because their data did not load (see the warnings above)` : ''}`,
        );
    } catch (error) {
      await target
        .discard()
        .catch((cleanup: unknown) =>
          options.logger.error({ err: cleanup }, 'could not remove what the failed restore made'),
        );
      throw error;
    }
    await target.close();
    say('restored: start the service on it with the same encryption key');
    return { manifest, rows, appDataNotRestored: notRestored };
  } finally {
    await fs.rm(staging, { recursive: true, force: true });
  }
}
