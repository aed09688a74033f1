/**
 * Retention: what the service keeps does not grow without bound. In the background, in batches:
 * - events older than `eventRetentionDays` are deleted (0 keeps them forever);
 * - uploads that no revision uses are deleted once older than `uploadRetentionHours`: an upload nobody
 *   deployed, or whose last revision went with its deployment. Its row goes, and its chunks with it (on
 *   delete cascade); an upload made before uploads were stored in the database also has a file in the
 *   data directory of the replica that received it, removed when that is this replica;
 * - upload bodies spooled in the data directory (`tmp/upload-*`, src/service/uploads.ts) that have not
 *   been written to for SPOOL_STALE_MS: left by a replica that stopped while one arrived;
 * - idempotency keys older than 24 hours (IDEMPOTENCY_KEY_TTL_HOURS) are deleted: they are ignored by
 *   then anyway (src/store/idempotency-keys.ts), this only keeps the table small.
 * Revision logs are capped per revision (src/dataplane/log-writer.ts) and go with their revision.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { sql, type Kysely } from 'kysely';
import type { Logger } from 'pino';
import type { Clock } from '../clock.ts';
import { pruneIdempotencyKeys } from '../store/idempotency-keys.ts';
import type { Database } from '../store/schema.ts';
import { sqlNow } from '../store/sql-now.ts';
import { startPeriodic, type Periodic } from './periodic.ts';

export interface RetentionPolicy {
  eventRetentionDays: number;
  uploadRetentionHours: number;
}

const BATCH = 1_000;

/**
 * Deletes up to one batch of events past retention; how many went. Ages here go by the database's `now()`,
 * or by `clock` when given (src/store/sql-now.ts).
 */
export async function pruneEvents(db: Kysely<Database>, days: number, clock?: Clock): Promise<number> {
  if (days <= 0) return 0;
  const result = await sql`
    delete from events where id in (
      select id from events where created_at < ${sqlNow(clock)} - make_interval(days => ${days}) order by id limit ${BATCH})`.execute(
    db,
  );
  return Number(result.numAffectedRows ?? 0n);
}

/** Deletes up to one batch of unused uploads past retention (rows, chunks, then legacy files); how many went. */
export async function pruneUploads(
  db: Kysely<Database>,
  dataDir: string,
  hours: number,
  logger: Pick<Logger, 'warn'>,
  clock?: Clock,
): Promise<number> {
  const gone = await sql<{ path: string }>`
    delete from source_uploads u where u.id in (
      select id from source_uploads s
      where s.created_at < ${sqlNow(clock)} - make_interval(hours => ${hours})
        and not exists (select 1 from revisions r where r.source_revision_config->>'source_tarball_path' = s.path)
      order by s.created_at limit ${BATCH}
      for update skip locked)
    returning u.path`.execute(db);
  for (const upload of gone.rows) {
    // Only uploads made before uploads were stored in the database have a file (none is found for the
    // others). Paths are made by the upload route (uploads/<uuid>.tar.gz); anything else is not ours.
    if (!/^uploads\/[0-9a-f-]{36}\.tar\.gz$/.test(upload.path)) continue;
    await fs
      .rm(path.join(dataDir, upload.path), { force: true })
      .catch((error: unknown) => logger.warn({ err: error, path: upload.path }, 'could not remove an upload file'));
  }
  return gone.rows.length;
}

/** A spooled body untouched this long belongs to no upload in progress (a body arrives steadily or times out). */
export const SPOOL_STALE_MS = 60 * 60 * 1000;

/** Removes spooled upload bodies of this data directory that nobody writes any more; how many went. */
export async function pruneSpooledUploads(dataDir: string, now = Date.now()): Promise<number> {
  const dir = path.join(dataDir, 'tmp');
  const names = await fs.readdir(dir).catch(() => [] as string[]);
  let removed = 0;
  for (const name of names.filter((n) => n.startsWith('upload-'))) {
    const file = path.join(dir, name);
    const stat = await fs.stat(file).catch(() => null);
    if (stat === null || now - stat.mtimeMs < SPOOL_STALE_MS) continue;
    await fs.rm(file, { force: true });
    removed += 1;
  }
  return removed;
}

export function startRetentionSweeper(options: {
  db: Kysely<Database>;
  dataDir: string;
  policy: RetentionPolicy;
  logger: Logger;
  intervalMs: number;
  /** What ages are judged by; the database's `now()` (and this process's time for spooled files) when absent. */
  now?: Clock;
}): Periodic {
  const { db, dataDir, policy, logger, intervalMs, now } = options;
  return startPeriodic({
    name: 'retention sweep',
    intervalMs,
    logger,
    runAtStart: true,
    async run() {
      // Each batch is its own statement, so a failure leaves nothing half done.
      let events = 0;
      let uploads = 0;
      let idempotencyKeys = 0;
      for (let moved = -1; moved !== 0;) events += moved = await pruneEvents(db, policy.eventRetentionDays, now);
      for (let moved = -1; moved !== 0;)
        uploads += moved = await pruneUploads(db, dataDir, policy.uploadRetentionHours, logger, now);
      for (let moved = -1; moved !== 0;) idempotencyKeys += moved = await pruneIdempotencyKeys(db, BATCH, now);
      const spooled = await pruneSpooledUploads(dataDir, now?.().getTime());
      if (events > 0 || uploads > 0 || idempotencyKeys > 0 || spooled > 0)
        logger.info({ events, uploads, idempotency_keys: idempotencyKeys, spooled }, 'retention: pruned');
    },
  });
}
