// What one instance's parts share: its one listening connection and the notifications it hears (new
// runs, run events, cancellations, its revision replaced), the runs it executes, whether it still takes
// runs, and the helpers for notifying and for transactions on its pool.
import { EventEmitter } from 'node:events';
import { CANCEL_CHANNEL, EVENTS_CHANNEL, REPLACED_CHANNEL, SCHEMA, WAKE_CHANNEL } from './schema.mjs';

export async function createInstance({ pg, pool, logger }) {
  const bus = new EventEmitter();
  bus.setMaxListeners(0);
  // `stopping`: a SIGTERM came (serve.mjs); `replaced`: the data plane said another revision serves in
  // this one's place; `wakeups`: WAKE notifications heard, so a queue worker knows whether one came while
  // it looked.
  const live = { stopping: false, replaced: false, wakeups: 0 };
  // The revision this instance runs (the data plane's environment); none outside Slipway's data plane.
  const revision = process.env.SLIPWAY_REVISION_ID ?? '';
  // Its lane: the endpoint it serves (SLIPWAY_ENDPOINT), '' for the deployment's own URL. The instances of
  // a deployment's endpoints share its database, and so its queue, with those of its own URL: each takes
  // only the runs, and fires only the crons, made through its own lane, so a pull request's preview never
  // runs the deployment's work with its code, nor the deployment a preview's.
  const lane = process.env.SLIPWAY_ENDPOINT ?? '';
  let listener = null;
  async function listen() {
    const client = new pg.Client({ connectionString: process.env.DATABASE_URL });
    client.on('notification', (message) => bus.emit(message.channel, message.payload ?? ''));
    client.on('error', (error) => {
      logger.warn('PostgreSQL notifications lost; reconnecting', { error: error.message });
      client.end().catch(() => undefined);
    });
    client.on('end', () => {
      listener = null;
      // Polling covers what is missed meanwhile.
      if (!live.stopping) setTimeout(() => listen().catch(() => undefined), 1_000);
    });
    await client.connect();
    await client.query(
      `listen ${WAKE_CHANNEL}; listen ${EVENTS_CHANNEL}; listen ${CANCEL_CHANNEL}; listen ${REPLACED_CHANNEL}`,
    );
    listener = client;
    bus.emit(WAKE_CHANNEL, '');
  }
  await listen();

  const local = new Map(); // run id -> { controller, threadId }: runs this instance executes
  const lostThreads = new Set(); // threads whose run this instance no longer owns (lease taken over)
  const rolledBack = new Set(); // threads whose last run was rolled back: their status comes from their state
  const endings = new Map(); // thread id -> run ids whose end is announced once the thread is updated

  bus.on(WAKE_CHANNEL, () => {
    live.wakeups += 1;
  });
  // Runs with joiners here -> { events announced so far, joiners }: a joiner reads again when the count moved.
  const watched = new Map();
  bus.on(EVENTS_CHANNEL, (runId) => {
    const watch = watched.get(runId);
    if (watch) watch.events += 1;
  });
  // A replaced revision's runs under way finish here; new ones wait for the revision that serves. Told
  // once: the instance is stopped (SIGTERM) when its requests have drained. A notification missed while
  // the listening connection was down leaves it taking runs until then, as before.
  bus.on(REPLACED_CHANNEL, (payload) => {
    if (revision === '' || payload !== revision || live.replaced) return;
    live.replaced = true;
    logger.info('Revision replaced: this instance takes no more runs', { revision });
  });
  bus.on(CANCEL_CHANNEL, (payload) => {
    const [runId, action] = payload.split(':');
    local.get(runId)?.controller.abort(action || 'interrupt');
  });

  function waitFor(channel, accept, ms, signal) {
    return new Promise((resolve) => {
      const done = (value) => {
        clearTimeout(timer);
        bus.off(channel, onMessage);
        signal?.removeEventListener('abort', onAbort);
        resolve(value);
      };
      const onMessage = (payload) => accept(payload) && done(true);
      const onAbort = () => done(false);
      const timer = setTimeout(() => done(false), ms);
      bus.on(channel, onMessage);
      signal?.addEventListener('abort', onAbort);
    });
  }

  async function notify(channel, payload) {
    await pool.query('select pg_notify($1, $2)', [channel, payload]);
  }

  /** Appends to a run's events (for joiners on any instance, and Last-Event-ID) and announces it. */
  async function appendEvent(runId, event, dataText, normalized = null) {
    await pool.query(
      `with appended as (insert into ${SCHEMA}.run_events (run_id, event, data, normalized) values ($1, $2, $3, $4) returning 1)
       select pg_notify('${EVENTS_CHANNEL}', $1::text) from appended`,
      [runId, event, dataText, normalized],
    );
    // Joiners here hear it at once; those of other instances through the NOTIFY.
    bus.emit(EVENTS_CHANNEL, runId);
  }

  async function transaction(fn) {
    const client = await pool.connect();
    try {
      await client.query('begin');
      const result = await fn(client);
      await client.query('commit');
      return result;
    } catch (error) {
      await client.query('rollback').catch(() => undefined);
      throw error;
    } finally {
      client.release();
    }
  }

  return {
    bus,
    lane,
    live,
    /** Whether this instance takes new runs: not once it is stopping, or its revision was replaced. */
    takesRuns: () => !live.stopping && !live.replaced,
    local,
    lostThreads,
    rolledBack,
    endings,
    watched,
    waitFor,
    notify,
    appendEvent,
    transaction,
    /** Ends the listening connection (at shutdown, once `live.stopping` keeps it from coming back). */
    closeListener: () => listener?.end().catch(() => undefined),
  };
}
