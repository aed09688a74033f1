// Runs in langgraph.runs: the `runs` operations of LangChain's server (create with double-texting,
// wait, join, cancel, search) and the streams of their events (langgraph.run_events), from any instance.
import { deleteRunCheckpoints } from './checkpoints.mjs';
import { assistantOf, authFilterSql, isFinal, isUuid, runOf, sleep, sqlCount, storable, uuid7 } from './records.mjs';
import { CANCEL_CHANNEL, END_EVENT, EVENTS_CHANNEL, SCHEMA, WAKE_CHANNEL } from './schema.mjs';

/**
 * How long a joiner waits for a final run's end to be announced before it takes the run's instance as
 * dead and stops by itself: the announcement follows the thread's update, which can take seconds.
 */
const END_GRACE_MS = 10_000;

export function createRuns(ctx) {
  const {
    HTTPException,
    announceEnds,
    appendEvent,
    checkpointer,
    claimRun,
    endings,
    handleAuthEvent,
    instanceId,
    isAuthMatching,
    json,
    lane,
    live,
    local,
    logger,
    notFound,
    notify,
    pool,
    readableThread,
    rolledBack,
    serialiseAsDict,
    serializeError,
    takesRuns,
    threadRow,
    transaction,
    waitFor,
    watched,
  } = ctx;
  /** Whether the run became final more than END_GRACE_MS ago, by the database's clock. */
  async function finalLongAgo(runId) {
    const { rows } = await pool.query(
      `select updated_at < now() - make_interval(secs => $2) as long_ago from ${SCHEMA}.runs where run_id = $1`,
      [runId, END_GRACE_MS / 1000],
    );
    return rows[0]?.long_ago !== false;
  }

  const runs = {
    async *next() {
      // Stopping, or replaced: nothing to claim, and the server's queue loop calls again at once.
      if (!takesRuns()) {
        await sleep(1_000);
        return;
      }
      let claimed;
      try {
        const seen = live.wakeups;
        claimed = await claimRun();
        if (!claimed && seen === live.wakeups) {
          // Woken by a new or finished run; the poll is the safety net for a missed notification and
          // for runs scheduled later (after_seconds).
          await waitFor(WAKE_CHANNEL, () => true, 2_000 + Math.random() * 1_000);
          claimed = await claimRun();
        }
      } catch (error) {
        // The server's queue loop has no handler: an error here would end the process.
        logger.warn('Could not claim a run', { error: error.message });
        await sleep(1_000);
        return;
      }
      if (!claimed) return;
      const controller = new globalThis.AbortController();
      local.set(claimed.run_id, { controller, threadId: claimed.thread_id });
      if (claimed.cancel_action) controller.abort(claimed.cancel_action);
      try {
        yield { run: runOf(claimed), attempt: claimed.attempt, signal: controller.signal };
      } finally {
        local.delete(claimed.run_id);
      }
    },
    async put(runId, assistantId, kwargs, opts, auth) {
      // A graph name is made an assistant id before this (getAssistantId); a typo of one is not a UUID.
      const assistantRow = isUuid(assistantId)
        ? (await pool.query(`select * from ${SCHEMA}.assistants where assistant_id = $1`, [assistantId])).rows[0]
        : undefined;
      if (!assistantRow)
        throw notFound(
          `No assistant found for "${assistantId}". Make sure the assistant ID is for a valid assistant or a valid graph ID.`,
        );
      const assistant = assistantOf(assistantRow);
      const ifNotExists = opts?.ifNotExists ?? 'reject';
      const multitaskStrategy = opts?.multitaskStrategy ?? 'reject';
      const afterSeconds = opts?.afterSeconds ?? 0;
      const status = opts?.status ?? 'pending';
      let threadId = opts?.threadId;
      const [filters, mutable] = await handleAuthEvent(auth, 'threads:create_run', {
        thread_id: threadId,
        assistant_id: assistantId,
        run_id: runId,
        status,
        metadata: opts?.metadata ?? {},
        prevent_insert_if_inflight: opts?.preventInsertInInflight,
        multitask_strategy: multitaskStrategy,
        if_not_exists: ifNotExists,
        after_seconds: afterSeconds,
        kwargs,
      });
      const metadata = mutable.metadata ?? {};
      const config = kwargs.config ?? {};
      const result = await transaction(async (client) => {
        const existing = threadId ? await threadRow(client, threadId, true) : null;
        if (existing && !isAuthMatching(existing.metadata, filters)) throw new HTTPException(404);
        if (!existing && (threadId == null || ifNotExists === 'create')) {
          threadId ??= uuid7();
          await client.query(
            `insert into ${SCHEMA}.threads (thread_id, status, metadata, config) values ($1, 'busy', $2, $3)`,
            [
              threadId,
              json({ graph_id: assistant.graph_id, assistant_id: assistantId, ...metadata }),
              json({
                ...assistant.config,
                ...config,
                configurable: { ...assistant.config?.configurable, ...config?.configurable },
              }),
            ],
          );
        } else if (existing) {
          if (existing.status !== 'busy') {
            await client.query(
              `update ${SCHEMA}.threads set status = 'busy', metadata = $2, config = $3, updated_at = now() where thread_id = $1`,
              [
                threadId,
                json({ ...existing.metadata, graph_id: assistant.graph_id, assistant_id: assistantId }),
                json({
                  ...assistant.config,
                  ...existing.config,
                  ...config,
                  configurable: {
                    ...assistant.config?.configurable,
                    ...existing.config?.configurable,
                    ...config?.configurable,
                  },
                }),
              ],
            );
          }
        } else {
          return [];
        }
        const inflight = (
          await client.query(
            `select * from ${SCHEMA}.runs where thread_id = $1 and status in ('pending', 'running') order by created_at`,
            [threadId],
          )
        ).rows.map(runOf);
        if (opts?.preventInsertInInflight && inflight.length > 0) return inflight;
        const configurable = {
          ...assistant.config?.configurable,
          ...existing?.config?.configurable,
          ...config?.configurable,
          run_id: runId,
          thread_id: threadId,
          graph_id: assistant.graph_id,
          assistant_id: assistantId,
          user_id:
            config.configurable?.user_id ??
            existing?.config?.configurable?.user_id ??
            assistant.config?.configurable?.user_id ??
            opts?.userId,
        };
        const mergedMetadata = { ...assistant.metadata, ...existing?.metadata, ...metadata };
        const runKwargs = {
          ...kwargs,
          config: { ...assistant.config, ...config, configurable, metadata: mergedMetadata },
          context:
            typeof assistant.context !== 'object' && assistant.context != null
              ? (assistant.context ?? kwargs.context)
              : { ...assistant.context, ...kwargs.context },
        };
        const { rows } = await client.query(
          `insert into ${SCHEMA}.runs (run_id, thread_id, assistant_id, metadata, status, kwargs, multitask_strategy, created_at, lane)
           values ($1, $2, $3, $4, $5, $6, $7, now() + make_interval(secs => $8), $9) returning *`,
          [
            runId,
            threadId,
            assistantId,
            json(mergedMetadata),
            status,
            json(runKwargs),
            multitaskStrategy,
            afterSeconds,
            lane,
          ],
        );
        await client.query('select pg_notify($1, $2)', [WAKE_CHANNEL, runId]);
        return [runOf(rows[0]), ...inflight];
      });
      return result;
    },
    async get(runId, threadId, auth) {
      const [filters] = await handleAuthEvent(auth, 'threads:read', { thread_id: threadId });
      const { rows } = await pool.query(
        `select r.*, t.metadata as thread_metadata from ${SCHEMA}.runs r join ${SCHEMA}.threads t using (thread_id) where r.run_id = $1`,
        [runId],
      );
      const row = rows[0];
      if (!row || (threadId != null && row.thread_id !== threadId)) return null;
      if (filters != null && !isAuthMatching(row.thread_metadata, filters)) return null;
      return runOf(row);
    },
    async delete(runId, threadId, auth) {
      const [filters] = await handleAuthEvent(auth, 'threads:delete', { run_id: runId, thread_id: threadId });
      const run = await runs.get(runId, threadId, undefined);
      if (!run) throw notFound('Run not found');
      if (filters != null) {
        const row = await threadRow(pool, run.thread_id);
        if (!isAuthMatching(row?.metadata, filters)) throw notFound('Run not found');
      }
      if (threadId != null) await checkpointer.delete(threadId, runId);
      await pool.query(`delete from ${SCHEMA}.runs where run_id = $1`, [runId]);
      return run.run_id;
    },
    async wait(runId, threadId, auth) {
      let lastChunk = null;
      for await (const { event, data } of runs.stream.join(
        runId,
        threadId,
        { ignore404: threadId == null, lastEventId: undefined },
        auth,
      )) {
        if (event === 'values') lastChunk = data;
        else if (event === 'error') lastChunk = { __error__: serializeError(data) };
      }
      return lastChunk;
    },
    async join(runId, threadId, auth) {
      await readableThread(threadId, auth);
      const lastChunk = await runs.wait(runId, threadId, auth);
      if (lastChunk != null) return lastChunk;
      const thread = await readableThread(threadId, auth);
      return thread.values ?? null;
    },
    async cancel(threadId, runIds, { action = 'interrupt' }, auth) {
      const [filters] = await handleAuthEvent(auth, 'threads:update', {
        thread_id: threadId,
        action,
        metadata: { run_ids: runIds, status: 'pending' },
      });
      let found = 0;
      for (const runId of runIds) {
        const { rows } = await pool.query(
          `select r.*, t.metadata as thread_metadata from ${SCHEMA}.runs r join ${SCHEMA}.threads t using (thread_id) where r.run_id = $1`,
          [runId],
        );
        const run = rows[0];
        if (!run || (threadId != null && run.thread_id !== threadId)) continue;
        if (filters != null && !isAuthMatching(run.thread_metadata, filters)) continue;
        found += 1;
        if (run.status === 'pending') {
          if (action === 'rollback') {
            logger.info('Eagerly deleting unscheduled run with rollback action', {
              run_id: runId,
              thread_id: threadId,
            });
            await pool.query(`delete from ${SCHEMA}.runs where run_id = $1 and status = 'pending'`, [runId]);
          } else {
            await pool.query(
              `update ${SCHEMA}.runs set status = 'interrupted', updated_at = now() where run_id = $1 and status = 'pending'`,
              [runId],
            );
            await pool.query(`update ${SCHEMA}.threads set status = 'idle', updated_at = now() where thread_id = $1`, [
              run.thread_id,
            ]);
          }
          await appendEvent(runId, END_EVENT, 'null');
        } else if (run.status === 'running') {
          // The instance executing it hears the NOTIFY (or finds the column at its next lease renewal).
          await pool.query(`update ${SCHEMA}.runs set cancel_action = $2 where run_id = $1`, [runId, action]);
          await notify(CANCEL_CHANNEL, `${runId}:${action}`);
        } else {
          logger.warn('Attempted to cancel non-pending run.', { run_id: runId, status: run.status });
        }
      }
      if (found !== runIds.length) throw notFound('Run not found');
      logger.info('Cancelled runs', { run_ids: runIds, thread_id: threadId, action });
    },
    async search(threadId, query, auth) {
      const [filters] = await handleAuthEvent(auth, 'threads:search', {
        thread_id: threadId,
        metadata: query.metadata,
        status: query.status,
      });
      if (!storable(query?.status) || !storable(query?.metadata)) return [];
      const params = [threadId];
      const where = ['r.thread_id = $1', authFilterSql('t.metadata', filters, params)];
      if (query?.status != null) where.push(`r.status = $${params.push(query.status)}`);
      if (query?.metadata != null) where.push(`r.metadata @> $${params.push(JSON.stringify(query.metadata))}::jsonb`);
      const { rows } = await pool.query(
        `select r.* from ${SCHEMA}.runs r join ${SCHEMA}.threads t using (thread_id) where ${where.join(' and ')}
         order by r.created_at desc limit $${params.push(sqlCount(query?.limit, 10))} offset $${params.push(sqlCount(query?.offset, 0))}`,
        params,
      );
      return rows.map(runOf);
    },
    async setStatus(runId, status) {
      // The worker executing a run here may set its status only while this instance holds its lease.
      const mine = local.get(runId);
      if (mine?.released) return; // given back to the queue at shutdown: another instance runs it again
      const owner = mine ? instanceId : null;
      if (!isFinal(status)) {
        await pool.query(
          `update ${SCHEMA}.runs set status = $2, updated_at = now() where run_id = $1 and ($3::text is null or lease_owner = $3)`,
          [runId, status, owner],
        );
        return;
      }
      const row = await transaction(async (client) => {
        const { rows } = await client.query(
          `select thread_id, cancel_action from ${SCHEMA}.runs
           where run_id = $1 and ($2::text is null or lease_owner = $2) for update`,
          [runId, owner],
        );
        const found = rows[0];
        if (!found) return null; // taken over by another instance, or deleted
        if (found.cancel_action === 'rollback') {
          // Rolled back: what it wrote goes before the run frees its thread for the next one, then the run.
          await deleteRunCheckpoints(client, found.thread_id, runId);
          await client.query(`delete from ${SCHEMA}.runs where run_id = $1`, [runId]);
          rolledBack.add(found.thread_id);
        } else {
          await client.query(
            `update ${SCHEMA}.runs set status = $2, updated_at = now(), lease_owner = null, lease_expires_at = null
             where run_id = $1`,
            [runId, status],
          );
        }
        return found;
      });
      if (!row) return;
      // Announced once the thread is updated (threads.setStatus or delete follow at once), so a client
      // that reads the thread after its run ends finds it updated.
      endings.set(row.thread_id, [...(endings.get(row.thread_id) ?? []), runId]);
      if (!mine) await announceEnds(row.thread_id);
    },
    stream: {
      async *join(runId, threadId, { ignore404, signal, cancelOnDisconnect, lastEventId }, auth) {
        const [filters] = await handleAuthEvent(auth, 'threads:read', { thread_id: threadId });
        if (filters != null && threadId != null) {
          const row = await threadRow(pool, threadId);
          if (!isAuthMatching(row?.metadata, filters)) {
            yield { event: 'error', data: { error: 'Error', message: '404: Thread not found' } };
            return;
          }
        }
        // Each run's events are numbered from 0, as LangChain's server numbers them (the SSE id): `seq`,
        // one sequence across all runs, orders them and `index` names them. A resuming client's
        // Last-Event-ID N continues after the run's N-th event (after all of them when there are fewer).
        let after = 0;
        let index = -1;
        const resumeAfter = Number.parseInt(lastEventId ?? '', 10);
        if (Number.isSafeInteger(resumeAfter) && resumeAfter >= 0) {
          const { rows: sent } = await pool.query(
            `select seq from ${SCHEMA}.run_events where run_id = $1 and event <> $3 order by seq limit $2`,
            [runId, Math.min(resumeAfter, 10_000_000) + 1, END_EVENT],
          );
          if (sent.length > 0) {
            after = Number(sent.at(-1).seq);
            index = sent.length - 1;
          }
        }
        const watch = watched.get(runId) ?? { events: 0, joiners: 0 };
        watch.joiners += 1;
        watched.set(runId, watch);
        try {
          let finished = false;
          while (!signal?.aborted && !finished) {
            const seen = watch.events;
            const { rows } = await pool.query(
              `select seq, event, data, normalized from ${SCHEMA}.run_events where run_id = $1 and seq > $2 order by seq limit 200`,
              [runId, after],
            );
            for (const row of rows) {
              after = Number(row.seq);
              if (row.event === END_EVENT) {
                finished = true;
                break;
              }
              index += 1;
              yield {
                id: String(index),
                event: row.event,
                data: JSON.parse(row.data),
                ...(row.normalized != null ? { normalized: row.normalized } : {}),
              };
            }
            if (finished || rows.length > 0) continue;
            if (watch.events !== seen) continue;
            const woke = await waitFor(EVENTS_CHANNEL, (id) => id === runId, 1_000, signal);
            if (woke || signal?.aborted) continue;
            const run = await runs.get(runId, threadId, auth);
            if (run == null) {
              if (!ignore404) yield { event: 'error', data: 'Run not found' };
              break;
            }
            // Ended without an end marker: its instance announces the end once the run's thread is
            // updated, which may take a while (a slow instance, a lock). Only a run final for longer
            // than END_GRACE_MS is taken as one whose instance died before announcing it: drain what is
            // left, then stop. (With a 1 s fallback a join ended before its thread was idle.)
            if (isFinal(run.status) && (await finalLongAgo(runId))) {
              const rest = await pool.query(
                `select seq, event, data, normalized from ${SCHEMA}.run_events where run_id = $1 and seq > $2 and event <> $3 order by seq`,
                [runId, after, END_EVENT],
              );
              for (const row of rest.rows) {
                index += 1;
                yield { id: String(index), event: row.event, data: JSON.parse(row.data) };
              }
              break;
            }
          }
        } finally {
          watch.joiners -= 1;
          if (watch.joiners === 0) watched.delete(runId);
        }
        if (signal?.aborted && cancelOnDisconnect && threadId != null)
          await runs.cancel(threadId, [runId], { action: 'interrupt' }, auth);
      },
      async publish({ runId, event, data, normalized }) {
        const text = data instanceof Error ? JSON.stringify(serializeError(data)) : (serialiseAsDict(data) ?? 'null');
        await appendEvent(runId, event, text, normalized ?? null);
      },
    },
  };

  return runs;
}
