/**
 * `slipway backup <file>`: one archive (src/ops/backup-archive.ts) of everything a restore needs but
 * the encryption key: the service's tables read in one snapshot, the files of the data directory the
 * service still reads, the apps' databases, and the key's check value. Nothing is changed; the service
 * may keep running.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { ConfigError } from '../config.ts';
import { openSecretBox } from '../crypto/key-check.ts';
import { keyIdOf, type EncryptionKeys } from '../crypto/secret-box.ts';
import { appliedMigrations } from '../db/migrate.ts';
import { dumpAppDatabase, findPgTools, serverMajor, type PgTools } from './app-database-dump.ts';
import {
  BackupError,
  FILE_PATH,
  FORMAT,
  FORMAT_VERSION,
  entryName,
  sha256Of,
  writeArchive,
  type Manifest,
  type ManifestEntry,
} from './backup-archive.ts';
import type { OperatorDatabase } from './operator-database.ts';
import { dumpTable, serviceTables } from './table-data.ts';

export interface BackupOptions {
  database: OperatorDatabase;
  keys: EncryptionKeys;
  /** The data directory whose files are carried (uploads kept there by earlier versions). */
  dataDir: string;
  output: string;
  slipwayVersion: string;
  /** Writes the archive without the apps' databases when no pg_dump fits the server (they are listed as not included). */
  withoutAppData: boolean;
  /** Progress lines. */
  say: (line: string) => void;
  /** Ctrl-C: stops between tables and files; nothing is left behind (the archive is written last). */
  signal?: AbortSignal;
  /**
   * How long pg_dump may wait for a lock an app holds on its own tables; then that app's database is
   * left out of the backup (listed as not included, with a warning). Default DEFAULT_LOCK_WAIT_SECONDS.
   */
  lockWaitSeconds?: number;
}

/** Longer than an app's migration holds its locks; short enough that a stuck backup is told, not left. */
export const DEFAULT_LOCK_WAIT_SECONDS = 300;

/**
 * pg_dump's complaint when --lock-wait-timeout passed: it bounds its LOCK TABLE statements with
 * statement_timeout (lock_timeout in some versions), and sets no other timeout of its own.
 */
const LOCK_NOT_AVAILABLE = /could not obtain lock|canceling statement due to (lock|statement) timeout/i;

export interface BackupResult {
  manifest: Manifest;
  bytes: number;
}

/** The files under uploads/ of the data directory (regular files only; links are never followed). */
async function dataDirFiles(dataDir: string): Promise<string[]> {
  const root = path.join(dataDir, 'uploads');
  const entries = await fs.readdir(root, { withFileTypes: true, recursive: true }).catch(() => []);
  return entries
    .filter((e) => e.isFile())
    .map((e) => path.relative(dataDir, path.join(e.parentPath, e.name)).split(path.sep).join('/'))
    .sort();
}

/** The key the database's values are sealed with, among the process's (checked by openSecretBox first). */
function sealingKey(keys: EncryptionKeys, keyId: string): Buffer {
  const key = [keys.current, ...keys.previous].find((k) => keyIdOf(k) === keyId);
  if (!key)
    throw new ConfigError('SLIPWAY_ENCRYPTION_KEY', `the key with id ${keyId} is not among this process's keys`);
  return key;
}

export async function createBackup(options: BackupOptions): Promise<BackupResult> {
  const { database, keys, say } = options;
  const output = path.resolve(options.output);
  if (
    await fs.stat(output).then(
      () => true,
      () => false,
    )
  )
    throw new BackupError(`${output} exists: name a new file (a backup never overwrites one)`);
  const readKeyCheck = await database.db.selectFrom('key_check').select('key_id').executeTakeFirst();
  if (!readKeyCheck)
    throw new BackupError('the database has no key check yet: start the service once on it, then back up');
  // The keys must fit the database before anything is read: refused with the message a start gets.
  await openSecretBox(database.db, keys);
  const staging = await fs.mkdtemp(path.join(path.dirname(output), '.slipway-backup-'));
  try {
    await fs.mkdir(path.join(staging, 'database'));
    const entries: ManifestEntry[] = [];
    const client = await database.pool.connect();
    let schema: Manifest['schema'];
    let keyCheck: Manifest['keyCheck'];
    let appDatabases: Manifest['appDatabases'];
    let tools: PgTools | null = null;
    try {
      // One snapshot for every table: a write committed meanwhile is in all of them or in none.
      await client.query('begin isolation level repeatable read read only');
      const migrations = await appliedMigrations(client);
      if (migrations.length === 0)
        throw new BackupError("the database holds no Slipway schema: is it the service's database?");
      schema = { version: migrations.at(-1)!.id, migrations };
      const check = await client.query<{ key_id: string; check_value: string; rotating_to: string | null }>(
        'select key_id, check_value, rotating_to from key_check',
      );
      const row = check.rows[0];
      if (!row) throw new BackupError('the database has no key check: start the service once on it, then back up');
      keyCheck = { keyId: row.key_id, checkValue: row.check_value, rotatingTo: row.rotating_to };
      const apps = await client.query<{ deployment_id: string; database_name: string }>(
        'select deployment_id, database_name from deployment_runtimes where database_name is not null order by database_name',
      );
      if (apps.rows.length > 0) {
        const major = await serverMajor(client);
        const found = await findPgTools();
        tools = found && found.major >= major ? found : null;
        if (!tools && !options.withoutAppData) {
          throw new BackupError(
            `${apps.rows.length} app database(s) need pg_dump ${major} or newer, and ${found ? `the newest here is ${found.major} (${found.dump})` : 'none is installed'}: install it (postgresql-client-${major}, from apt.postgresql.org where the system's is older; the embedded PostgreSQL ships none), or run again with --without-app-data to leave the apps' data out`,
          );
        }
      }
      appDatabases = apps.rows.map((r) => ({
        name: r.database_name,
        deploymentId: r.deployment_id,
        included: tools !== null,
      }));
      for (const table of await serviceTables(client)) {
        options.signal?.throwIfAborted();
        const name = entryName('table', table);
        const rows = await dumpTable(client, table, path.join(staging, name));
        entries.push({ name, kind: 'table', subject: table, rows, ...(await sha256Of(path.join(staging, name))) });
      }
      await client.query('commit');
    } catch (error) {
      await client.query('rollback').catch(() => undefined);
      throw error;
    } finally {
      client.release();
    }
    say(
      `database: ${entries.length} tables, ${entries.reduce((n, e) => n + (e.rows ?? 0), 0)} rows (schema version ${schema.version})`,
    );
    const key = sealingKey(keys, keyCheck.keyId);

    const files = await dataDirFiles(options.dataDir);
    for (const file of files) {
      options.signal?.throwIfAborted();
      if (!FILE_PATH.test(file))
        throw new BackupError(`${path.join(options.dataDir, file)}: a file name a backup cannot carry`);
      const name = entryName('file', file);
      await fs.mkdir(path.dirname(path.join(staging, name)), { recursive: true });
      await fs.copyFile(path.join(options.dataDir, file), path.join(staging, name));
      entries.push({ name, kind: 'file', subject: file, ...(await sha256Of(path.join(staging, name))) });
    }
    if (files.length > 0) say(`data directory: ${files.length} file(s) under uploads/`);

    if (tools) {
      await fs.mkdir(path.join(staging, 'app-databases'));
      const lockWait = options.lockWaitSeconds ?? DEFAULT_LOCK_WAIT_SECONDS;
      let left = 0;
      for (const app of appDatabases) {
        options.signal?.throwIfAborted();
        const name = entryName('app-database', app.name);
        const file = path.join(staging, name);
        try {
          await dumpAppDatabase(tools, database.url, app.name, file, lockWait);
        } catch (error) {
          const detail = (error as { stderr?: unknown }).stderr;
          const said = typeof detail === 'string' && detail.trim() !== '' ? detail.trim() : String(error);
          // Anything else (no server, a broken pg_dump) is not one app's doing: the backup fails.
          if (!LOCK_NOT_AVAILABLE.test(said))
            throw new BackupError(
              `the app database ${app.name} (deployment ${app.deploymentId}) could not be dumped: ${said}; nothing was written`,
            );
          // An app that keeps a lock on its own tables must not cost every other app its backup: it is
          // left out, listed as such in the manifest (a restore makes it empty), and told.
          const why = `a session of the app held a lock on its tables for more than ${lockWait} s (${said})`;
          app.included = false;
          left += 1;
          await fs.rm(file, { force: true });
          say(
            `WARNING: the app database ${app.name} (deployment ${app.deploymentId}) is NOT in this backup: it could not be dumped: ${why}`,
          );
          continue;
        }
        entries.push({ name, kind: 'app-database', subject: app.name, ...(await sha256Of(file)) });
      }
      say(
        `app databases: ${appDatabases.length - left} of ${appDatabases.length} (pg_dump ${tools.major})${left > 0 ? `; ${left} NOT included (see the warnings above)` : ''}`,
      );
    } else if (appDatabases.length > 0) {
      say(`app databases: ${appDatabases.length} NOT included (--without-app-data): a restore makes them empty`);
    }

    const manifest: Manifest = {
      format: FORMAT,
      formatVersion: FORMAT_VERSION,
      slipwayVersion: options.slipwayVersion,
      createdAt: new Date().toISOString(),
      schema,
      keyCheck,
      appDatabases,
      entries,
    };
    options.signal?.throwIfAborted();
    await writeArchive(staging, manifest, key, output);
    const { size } = await fs.stat(output);
    say(
      `wrote ${output} (${size} bytes); keep the encryption key (id ${keyCheck.keyId}) apart from it: the archive does not hold it`,
    );
    return { manifest, bytes: size };
  } finally {
    await fs.rm(staging, { recursive: true, force: true });
  }
}
