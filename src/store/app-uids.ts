/**
 * Which host uid each deployment's processes run as when the service is root (migration 019,
 * src/dataplane/app-uids.ts): the lowest free one of the operator's range, kept while the deployment
 * exists (its row goes with the deployment's).
 */
import { sql } from 'kysely';
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
 * The deployment's uid, given now if it has none. Two replicas giving uids at once may pick the same
 * free one: the unique index refuses the second, which tries the next.
 */
export async function claimAppUid(
  db: Db,
  deploymentId: string,
  range: { first: number; count: number },
): Promise<number> {
  const last = range.first + range.count - 1;
  for (let attempt = 0; ; attempt += 1) {
    const held = await db
      .selectFrom('app_uids')
      .select('uid')
      .where('deployment_id', '=', deploymentId)
      .executeTakeFirst();
    if (held) return held.uid;
    try {
      const given = await sql<{ uid: number }>`
        insert into app_uids (deployment_id, uid)
        select ${deploymentId}, candidate
          from generate_series(${range.first}::integer, ${last}::integer) candidate
         where not exists (select 1 from app_uids where uid = candidate)
         order by candidate
         limit 1
        on conflict (deployment_id) do nothing
        returning uid`.execute(db);
      if (given.rows[0]) return given.rows[0].uid;
      const taken = await db
        .selectFrom('app_uids')
        .select((eb) => eb.fn.countAll<string>().as('n'))
        .where('uid', '>=', range.first)
        .where('uid', '<=', last)
        .executeTakeFirstOrThrow();
      if (Number(taken.n) >= range.count) throw new AppUidsExhaustedError(range);
      // Otherwise another replica gave this deployment its uid meanwhile: read above.
    } catch (error) {
      if ((error as { code?: string }).code !== '23505' || attempt >= 10) throw error;
      // Another deployment took that uid at the same moment: the next free one.
    }
  }
}
