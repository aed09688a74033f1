/**
 * Which host uid each deployment's processes run as when the service is root (migration 019,
 * src/dataplane/app-uids.ts): the lowest free one of the operator's range, kept while the deployment
 * exists (its row goes with the deployment's).
 */
import { sql } from 'kysely';
import { APP_UID_LOCK } from '../db/advisory-locks.ts';
import type { Db } from './schema.ts';

/** Every uid of the range is held by a deployment. */
export class AppUidsExhaustedError extends Error {
  constructor(range: { first: number; count: number }) {
    super(
      `every host uid of SLIPWAY_APP_UIDS (${range.first}-${range.first + range.count - 1}) belongs to a deployment: widen the range`,
    );
  }
}

/**
 * The deployment's uid, given now if it has none. Uids are given one at a time under a transaction
 * advisory lock, so many deployments starting at once (or on several replicas) each get the lowest free
 * one in turn; a first try that raced on the same free uid and retried lost again and again when dozens
 * started together.
 */
export async function claimAppUid(
  db: Db,
  deploymentId: string,
  range: { first: number; count: number },
): Promise<number> {
  const last = range.first + range.count - 1;
  const heldBy = (q: Db) =>
    q.selectFrom('app_uids').select('uid').where('deployment_id', '=', deploymentId).executeTakeFirst();
  // The usual case, a deployment that has its uid, takes no lock.
  const held = await heldBy(db);
  if (held) return held.uid;
  const give = async (tx: Db): Promise<number> => {
    await sql`select pg_advisory_xact_lock(${APP_UID_LOCK})`.execute(tx);
    const heldNow = await heldBy(tx);
    if (heldNow) return heldNow.uid;
    const given = await sql<{ uid: number }>`
      insert into app_uids (deployment_id, uid)
      select ${deploymentId}, candidate
        from generate_series(${range.first}::integer, ${last}::integer) candidate
       where not exists (select 1 from app_uids where uid = candidate)
       order by candidate
       limit 1
      returning uid`.execute(tx);
    if (!given.rows[0]) throw new AppUidsExhaustedError(range);
    return given.rows[0].uid;
  };
  // The lock is held to the end of the caller's transaction, or of one of its own.
  return db.isTransaction ? give(db) : db.transaction().execute(give);
}
