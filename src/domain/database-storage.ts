/**
 * The rule that keeps an app's own PostgreSQL database within its storage limit on the own data plane
 * (issue 33; docs/operations.md, "Limits and quotas"). Pure: src/dataplane/app-database-storage.ts
 * measures each database and applies the state this returns.
 *
 * - writable: the app reads and writes.
 * - read_only: its size went over its limit. New transactions are read-only by default; reads go on,
 *   and the app may lift read-only for a transaction of its own to make room (TRUNCATE, DROP, DELETE
 *   then VACUUM FULL).
 * - cut_off: while read_only it grew by the margin beyond its size when it was made read-only (it lifted
 *   read-only and kept writing). Its role may not log in: no reads, no writes, until its size is within
 *   its limit again, which only a raised limit can bring about.
 *
 * Back within its limit (room made, the limit raised), it is writable again. The margin is a tenth of
 * the limit, at least 16 MiB: what an honest app may still add once read-only (a vacuum's maps, a
 * transaction that lifted read-only to clean up) and what a measure may see move.
 */
/** What the data plane did about a database's size (stored in deployment_runtimes.database_storage_state). */
export type DatabaseStorageState = 'writable' | 'read_only' | 'cut_off';

const MIB = 1024 * 1024;
const GIB = 1024 * MIB;

/** A database's limit in bytes, from its storage in GiB (src/domain/resource-maxima.ts, databaseStorageOf). */
export const limitBytesOf = (gi: number): number => Math.floor(gi * GIB);

/** How far a read-only database may grow beyond its size when it was made read-only before it is cut off. */
export const cutOffMarginBytes = (limitBytes: number): number => Math.max(16 * MIB, Math.floor(limitBytes / 10));

export interface MeasuredDatabase {
  state: DatabaseStorageState;
  /** Its size when its state last changed (null: never changed). */
  stateSizeBytes: number | null;
  sizeBytes: number;
  limitBytes: number;
}

/** The state a database measured at `sizeBytes` is to be in. */
export function nextStorageState(db: MeasuredDatabase): DatabaseStorageState {
  if (db.sizeBytes <= db.limitBytes) return 'writable';
  if (db.state === 'writable') return 'read_only';
  if (db.state === 'cut_off') return 'cut_off';
  const base = Math.max(db.limitBytes, db.stateSizeBytes ?? db.limitBytes);
  return db.sizeBytes > base + cutOffMarginBytes(db.limitBytes) ? 'cut_off' : 'read_only';
}
