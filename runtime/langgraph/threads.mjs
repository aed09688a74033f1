// Threads in langgraph.threads, their state and history through the checkpointer: the `threads`
// operations of LangChain's server, and the thread lookups runs.mjs and crons.mjs use.
import { copyCheckpoints } from './checkpoints.mjs';
import { authFilterSql, sqlCount, storable, threadOf, uuid7 } from './records.mjs';
import { END_EVENT, SCHEMA, WAKE_CHANNEL } from './schema.mjs';

export function createThreads(ctx) {
  const {
    HTTPException,
    appendEvent,
    checkpointer,
    endings,
    getGraph,
    handleAuthEvent,
    internal,
    isAuthMatching,
    json,
    lostThreads,
    notFound,
    notify,
    pool,
    rolledBack,
    store,
    transaction,
  } = ctx;
  /** WHERE of a thread search or count, as the in-memory server filters (a thread without values passes a values filter). */
  function threadWhere(query, filters, params) {
    const where = [authFilterSql('metadata', filters, params)];
    if (!storable(query.metadata) || !storable(query.status)) return 'false';
    if (query.ids?.length > 0) where.push(`thread_id = any($${params.push(query.ids)}::uuid[])`);
    if (query.metadata != null) where.push(`metadata @> $${params.push(JSON.stringify(query.metadata))}::jsonb`);
    // A thread without values passes; no stored values hold what PostgreSQL cannot store.
    if (query.values != null && !storable(query.values)) where.push('"values" is null');
    else if (query.values != null)
      where.push(`("values" is null or "values" @> $${params.push(JSON.stringify(query.values))}::jsonb)`);
    if (query.status != null) where.push(`status = $${params.push(query.status)}`);
    return where.join(' and ');
  }

  async function threadRow(client, threadId, lock = false) {
    const { rows } = await client.query(
      `select * from ${SCHEMA}.threads where thread_id = $1${lock ? ' for update' : ''}`,
      [threadId],
    );
    return rows[0] ?? null;
  }

  async function readableThread(threadId, auth, event = 'threads:read') {
    const [filters] = await handleAuthEvent(auth, event, { thread_id: threadId });
    const row = await threadRow(pool, threadId);
    if (!row || !isAuthMatching(row.metadata, filters)) throw notFound(`Thread with ID ${threadId} not found`);
    return threadOf(row);
  }

  /** The thread's status and values after its run, from its latest checkpoint (used after a rollback). */
  async function stateOfThread(threadId) {
    const row = await threadRow(pool, threadId);
    const graphId = row?.metadata?.graph_id;
    if (!row || graphId == null) return null;
    const graph = await getGraph(graphId, row.config, { checkpointer, store, accessContext: 'threads.read' });
    return graph.getState({ configurable: { thread_id: threadId } });
  }

  /** Tells joiners of the thread's finished runs that nothing more comes. */
  async function announceEnds(threadId) {
    const runIds = endings.get(threadId) ?? [];
    endings.delete(threadId);
    for (const runId of runIds) await appendEvent(runId, END_EVENT, 'null');
    if (runIds.length > 0) await notify(WAKE_CHANNEL, '');
  }

  const threads = {
    async *search(query, auth) {
      const [filters] = await handleAuthEvent(auth, 'threads:search', {
        metadata: query.metadata,
        ids: query.ids,
        status: query.status,
        values: query.values,
        limit: query.limit,
        offset: query.offset,
      });
      const params = [];
      const where = threadWhere(query, filters, params);
      const sortBy = ['thread_id', 'status', 'created_at', 'updated_at'].includes(query.sort_by)
        ? query.sort_by
        : 'created_at';
      const order = query.sort_order === 'asc' ? 'asc' : 'desc';
      const { rows } = await pool.query(
        `select *, count(*) over () as total from ${SCHEMA}.threads where ${where}
         order by ${sortBy} ${order}, thread_id ${order} limit $${params.push(sqlCount(query.limit, 10))} offset $${params.push(sqlCount(query.offset, 0))}`,
        params,
      );
      for (const row of rows) yield { thread: threadOf(row), total: Number(row.total) };
    },
    async count(query, auth) {
      const [filters] = await handleAuthEvent(auth, 'threads:search', {
        metadata: query.metadata,
        values: query.values,
        status: query.status,
        limit: 0,
        offset: 0,
      });
      const params = [];
      const { rows } = await pool.query(
        `select count(*) from ${SCHEMA}.threads where ${threadWhere(query, filters, params)}`,
        params,
      );
      return Number(rows[0].count);
    },
    get: (threadId, auth) => readableThread(threadId, auth),
    async put(threadId, values, auth) {
      const [filters, mutable] = await handleAuthEvent(auth, 'threads:create', {
        thread_id: threadId,
        metadata: values.metadata,
        if_exists: values.if_exists,
      });
      const inserted = await pool.query(
        `insert into ${SCHEMA}.threads (thread_id, metadata) values ($1, $2)
         on conflict (thread_id) do nothing returning *`,
        [threadId, json(mutable?.metadata ?? {})],
      );
      if (inserted.rows[0]) return threadOf(inserted.rows[0]);
      const existing = await threadRow(pool, threadId);
      if (!existing || !isAuthMatching(existing.metadata, filters) || values?.if_exists === 'raise')
        throw new HTTPException(409, { message: 'Thread already exists' });
      return threadOf(existing);
    },
    async patch(threadId, values, auth) {
      const [filters, mutable] = await handleAuthEvent(auth, 'threads:update', {
        thread_id: threadId,
        metadata: values.metadata,
      });
      return transaction(async (client) => {
        const row = await threadRow(client, threadId, true);
        if (!row || !isAuthMatching(row.metadata, filters)) throw notFound('Thread not found');
        const metadata = mutable.metadata != null ? { ...row.metadata, ...mutable.metadata } : row.metadata;
        const updated = await client.query(
          `update ${SCHEMA}.threads set metadata = $2, updated_at = now() where thread_id = $1 returning *`,
          [threadId, json(metadata)],
        );
        return threadOf(updated.rows[0]);
      });
    },
    async setStatus(threadId, { checkpoint, exception }) {
      if (lostThreads.delete(threadId)) return; // another instance took the run over and owns the thread's state
      let values = checkpoint != null ? checkpoint.values : undefined;
      let hasNext = checkpoint != null && checkpoint.next.length > 0;
      let interrupts =
        checkpoint != null
          ? Object.fromEntries(
              checkpoint.tasks.filter((task) => task.interrupts).map((task) => [task.id, task.interrupts]),
            )
          : undefined;
      if (rolledBack.delete(threadId)) {
        // The run and its checkpoints are gone: the thread is what its latest remaining checkpoint says.
        const state = await stateOfThread(threadId).catch(() => null);
        exception = undefined;
        values = state?.values;
        hasNext = (state?.next?.length ?? 0) > 0;
        interrupts = undefined;
      }
      await pool.query(
        `update ${SCHEMA}.threads t set updated_at = now(), "values" = $2, interrupts = $3,
           status = case when $4 then 'error' when $5 then 'interrupted'
             when exists (select 1 from ${SCHEMA}.runs r where r.thread_id = t.thread_id and r.status in ('pending', 'running'))
               then 'busy'
             else 'idle' end
         where thread_id = $1`,
        [threadId, json(values), json(interrupts), exception != null, hasNext],
      );
      await announceEnds(threadId);
    },
    async delete(threadId, auth) {
      const [filters] = await handleAuthEvent(auth, 'threads:delete', { thread_id: threadId });
      const row = await threadRow(pool, threadId);
      if (!row || !isAuthMatching(row.metadata, filters)) throw notFound(`Thread with ID ${threadId} not found`);
      await pool.query(`delete from ${SCHEMA}.threads where thread_id = $1`, [threadId]);
      await checkpointer.delete(threadId, null);
      lostThreads.delete(threadId);
      rolledBack.delete(threadId);
      await announceEnds(threadId);
      return [threadId];
    },
    async copy(threadId, auth) {
      const [filters] = await handleAuthEvent(auth, 'threads:read', { thread_id: threadId });
      const from = await threadRow(pool, threadId);
      if (!from || !isAuthMatching(from.metadata, filters))
        throw new HTTPException(409, { message: 'Thread not found' });
      const newThreadId = uuid7();
      const metadata = { ...from.metadata, thread_id: newThreadId };
      await handleAuthEvent(auth, 'threads:create', { thread_id: newThreadId, metadata });
      return transaction(async (client) => {
        const { rows } = await client.query(
          `insert into ${SCHEMA}.threads (thread_id, metadata) values ($1, $2) returning *`,
          [newThreadId, json(metadata)],
        );
        await copyCheckpoints(client, threadId, newThreadId);
        return threadOf(rows[0]);
      });
    },
    state: {
      async get(config, { subgraphs = false }, auth) {
        const threadId = config.configurable?.thread_id;
        const thread = threadId ? await readableThread(threadId, auth) : undefined;
        const graphId = thread?.metadata?.graph_id;
        if (!thread || graphId == null)
          return {
            values: {},
            next: [],
            config: {},
            metadata: undefined,
            createdAt: undefined,
            parentConfig: undefined,
            tasks: [],
          };
        const graph = await getGraph(graphId, thread.config, { checkpointer, store, accessContext: 'threads.read' });
        const result = await graph.getState(config, { subgraphs });
        if (result.metadata != null && result.metadata.checkpoint_ns === '') delete result.metadata.checkpoint_ns;
        return result;
      },
      post: (config, values, asNode, auth) =>
        updateThreadState(config, auth, (graph, updateConfig) => graph.updateState(updateConfig, values, asNode)),
      async bulk(config, supersteps, auth) {
        if (!config.configurable?.thread_id) return [];
        const { getLangGraphCommand } = await internal('command.mjs');
        return updateThreadState(config, auth, (graph, updateConfig) =>
          graph.bulkUpdateState(
            updateConfig,
            supersteps.map((step) => ({
              updates: step.updates.map((update) => ({
                values: update.command != null ? getLangGraphCommand(update.command) : update.values,
                asNode: update.as_node,
              })),
            })),
          ),
        );
      },
      async list(config, query, auth) {
        const threadId = config.configurable?.thread_id;
        if (!threadId) return [];
        const [filters] = await handleAuthEvent(auth, 'threads:read', { thread_id: threadId });
        const thread = await readableThread(threadId, auth);
        if (!isAuthMatching(thread.metadata, filters)) return [];
        const graphId = thread.metadata?.graph_id;
        if (graphId == null) return [];
        const graph = await getGraph(graphId, thread.config, { checkpointer, store, accessContext: 'threads.read' });
        const before =
          typeof query?.before === 'string' ? { configurable: { checkpoint_id: query.before } } : query?.before;
        const states = [];
        for await (const state of graph.getStateHistory(config, {
          limit: query?.limit ?? 10,
          before,
          filter: query?.metadata,
        }))
          states.push(state);
        return states;
      },
    },
  };

  async function updateThreadState(config, auth, update) {
    const threadId = config.configurable?.thread_id;
    const [filters] = await handleAuthEvent(auth, 'threads:update', { thread_id: threadId });
    const row = threadId ? await threadRow(pool, threadId) : null;
    if (!row) throw notFound(`Thread ${threadId} not found`);
    if (!isAuthMatching(row.metadata, filters)) throw new HTTPException(403);
    const busy = await pool.query(
      `select 1 from ${SCHEMA}.runs where thread_id = $1 and status in ('pending', 'running') limit 1`,
      [threadId],
    );
    if (busy.rows.length > 0) throw new HTTPException(409, { message: 'Thread is busy' });
    const graphId = row.metadata?.graph_id;
    if (graphId == null) throw new HTTPException(400, { message: `Thread ${threadId} has no graph ID` });
    config.configurable ??= {};
    config.configurable.graph_id ??= graphId;
    const graph = await getGraph(graphId, row.config, { checkpointer, store, accessContext: 'threads.update' });
    const updateConfig = globalThis.structuredClone(config);
    updateConfig.configurable.checkpoint_ns ??= '';
    const nextConfig = await update(graph, updateConfig);
    const state = await graph.getState({ configurable: { thread_id: threadId } });
    await pool.query(`update ${SCHEMA}.threads set "values" = $2, updated_at = now() where thread_id = $1`, [
      threadId,
      json(state.values),
    ]);
    return { checkpoint: nextConfig.configurable };
  }

  return { threads, threadRow, readableThread, announceEnds };
}
