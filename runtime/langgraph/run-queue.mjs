// The queue of runs: claiming the next runnable run with a lease, renewing this instance's leases and
// taking over runs whose lease ended (or failing them after MAX_ATTEMPTS), and the sweeps of old run
// events and of threads past langgraph.json's checkpointer TTL.
import { clearInterval, setInterval } from 'node:timers';
import { deleteRunCheckpoints, deleteThreadsCheckpoints } from './checkpoints.mjs';
import { END_EVENT, EVENTS_KEPT, MAX_ATTEMPTS, SCHEMA, WAKE_CHANNEL } from './schema.mjs';

export function createRunQueue(ctx) {
  const {
    appendEvent,
    instanceId,
    lane,
    leaseSeconds,
    local,
    logger,
    lostThreads,
    notify,
    pool,
    takesRuns,
    threadTtl,
    transaction,
  } = ctx;
  /** Claims the oldest runnable pending run of its lane (none of its thread's runs running), with a lease. */
  async function claimRun() {
    // A stopping instance takes nothing more (what it gives back must not come back to it), nor does
    // one whose revision was replaced.
    if (!takesRuns()) return null;
    return transaction(async (client) => {
      const candidate = await client.query(
        `select r.run_id, r.thread_id from ${SCHEMA}.runs r join ${SCHEMA}.threads t on t.thread_id = r.thread_id
         where r.status = 'pending' and r.created_at <= now() and r.lane = $1
           and not exists (select 1 from ${SCHEMA}.runs x where x.thread_id = r.thread_id and x.status = 'running')
         order by r.created_at limit 1 for update of t, r skip locked`,
        [lane],
      );
      const row = candidate.rows[0];
      if (!row) return null;
      // With the thread locked, a fresh look: another instance may have just started one of its runs.
      const running = await client.query(
        `select 1 from ${SCHEMA}.runs where thread_id = $1 and status = 'running' limit 1`,
        [row.thread_id],
      );
      if (running.rows.length > 0) return null;
      const { rows } = await client.query(
        `update ${SCHEMA}.runs set status = 'running', attempt = attempt + 1, lease_owner = $2,
           lease_expires_at = now() + make_interval(secs => $3), updated_at = now()
         where run_id = $1 returning *`,
        [row.run_id, instanceId, leaseSeconds],
      );
      return rows[0];
    });
  }

  /**
   * Every third of a lease: renews this instance's leases (aborting a run whose lease was lost or that
   * was cancelled meanwhile), and gives back the runs of instances whose leases ended.
   */
  async function keepLeases() {
    const mine = [...local.keys()];
    if (mine.length > 0) {
      const { rows } = await pool.query(
        `update ${SCHEMA}.runs set lease_expires_at = now() + make_interval(secs => $3)
         where run_id = any($1::uuid[]) and lease_owner = $2 and status = 'running' returning run_id, cancel_action`,
        [mine, instanceId, leaseSeconds],
      );
      const kept = new Map(rows.map((row) => [row.run_id, row.cancel_action]));
      for (const runId of mine) {
        const entry = local.get(runId);
        if (!entry) continue;
        if (!kept.has(runId)) {
          lostThreads.add(entry.threadId);
          entry.controller.abort('lease_lost');
        } else if (kept.get(runId)) entry.controller.abort(kept.get(runId));
      }
    }
    const expired = await transaction(async (client) => {
      const { rows } = await client.query(
        `select run_id, thread_id from ${SCHEMA}.runs where status = 'running' and lease_expires_at < now()
         for update skip locked`,
      );
      // What the lost execution wrote is rolled back before the run is queued again: a retry starts
      // from the state before the run, and nothing is applied twice.
      for (const run of rows) await deleteRunCheckpoints(client, run.thread_id, run.run_id);
      return client.query(
        `update ${SCHEMA}.runs r set
           status = case when r.cancel_action is not null then 'interrupted' when r.attempt >= $2 then 'error' else 'pending' end,
           failure = case when r.cancel_action is null and r.attempt >= $2
             then 'The instance executing this run stopped ' || r.attempt || ' times before it finished' end,
           lease_owner = null, lease_expires_at = null, updated_at = now()
         where r.run_id = any($1::uuid[])
         returning r.run_id, r.thread_id, r.status, r.failure, r.attempt`,
        [rows.map((run) => run.run_id), MAX_ATTEMPTS],
      );
    });
    for (const run of expired.rows) {
      if (run.status === 'pending') {
        logger.warn('Run taken over: the instance executing it stopped', { run_id: run.run_id, attempt: run.attempt });
        continue;
      }
      if (run.status === 'error') {
        logger.error('Run failed: the instance executing it stopped', { run_id: run.run_id, reason: run.failure });
        await appendEvent(run.run_id, 'error', JSON.stringify({ error: 'InstanceLost', message: run.failure }));
      }
      await pool.query(
        `update ${SCHEMA}.threads t set updated_at = now(),
           status = case when exists (select 1 from ${SCHEMA}.runs r where r.thread_id = t.thread_id and r.status in ('pending', 'running'))
             then 'busy' when $2 then 'error' else 'idle' end
         where thread_id = $1`,
        [run.thread_id, run.status === 'error'],
      );
      await appendEvent(run.run_id, END_EVENT, 'null');
    }
    if (expired.rows.length > 0) await notify(WAKE_CHANNEL, '');
  }

  async function sweepEvents() {
    await pool.query(
      `delete from ${SCHEMA}.run_events e where e.created_at < now() - interval '${EVENTS_KEPT}'
         and not exists (select 1 from ${SCHEMA}.runs r where r.run_id = e.run_id and r.status in ('pending', 'running'))`,
    );
  }

  /**
   * langgraph.json's `checkpointer.ttl` (strategy "delete"): threads not updated for `default_ttl`
   * minutes, with no run pending or running, are deleted with their runs, crons and checkpoints.
   */
  async function sweepThreads() {
    // One transaction: a thread is never gone with its checkpoints left (nothing would sweep them later).
    const count = await transaction(async (client) => {
      const { rows } = await client.query(
        `delete from ${SCHEMA}.threads t where t.updated_at < now() - $1::float8 * interval '1 minute'
           and not exists (select 1 from ${SCHEMA}.runs r where r.thread_id = t.thread_id and r.status in ('pending', 'running'))
         returning thread_id`,
        [threadTtl.minutes],
      );
      if (rows.length > 0)
        await deleteThreadsCheckpoints(
          client,
          rows.map((row) => String(row.thread_id)),
        );
      return rows.length;
    });
    if (count > 0) logger.info('Threads past their TTL deleted', { count });
  }
  const threadTimer = threadTtl
    ? setInterval(
        () => void sweepThreads().catch((error) => logger.warn('Could not sweep threads', { error: error.message })),
        threadTtl.sweepMinutes * 60_000,
      )
    : null;

  let sweeps = 0;
  const leaseTimer = setInterval(
    () => {
      keepLeases()
        .then(() => (sweeps++ % 100 === 0 ? sweepEvents() : undefined))
        .catch((error) => logger.warn('Could not renew run leases', { error: error.message }));
    },
    (leaseSeconds * 1000) / 3,
  );

  return {
    claimRun,
    stop() {
      clearInterval(leaseTimer);
      if (threadTimer) clearInterval(threadTimer);
    },
  };
}
