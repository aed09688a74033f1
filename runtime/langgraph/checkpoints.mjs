// The server's checkpointer and store, made to keep everything in PostgreSQL through LangChain's
// PostgresSaver and PostgresStore (@langchain/langgraph-checkpoint-postgres), with the extras the server
// calls on them.
import { sqlCount, storable } from './records.mjs';
import { SCHEMA } from './schema.mjs';

/** Deletes the checkpoints (and their pending writes) one run wrote to a thread. */
export async function deleteRunCheckpoints(client, threadId, runId) {
  await client.query(
    `with gone as (
       delete from ${SCHEMA}.checkpoints where thread_id = $1 and metadata ->> 'run_id' = $2
       returning checkpoint_ns, checkpoint_id)
     delete from ${SCHEMA}.checkpoint_writes w using gone
     where w.thread_id = $1 and w.checkpoint_ns = gone.checkpoint_ns and w.checkpoint_id = gone.checkpoint_id`,
    [threadId, runId],
  );
}

/**
 * Deletes whole threads' checkpoints, blobs and pending writes, as PostgresSaver's deleteThread does, in
 * the caller's transaction (a TTL sweep deletes the threads in the same one).
 */
export async function deleteThreadsCheckpoints(client, threadIds) {
  for (const table of ['checkpoint_blobs', 'checkpoints', 'checkpoint_writes'])
    await client.query(`delete from ${SCHEMA}.${table} where thread_id = any($1::text[])`, [threadIds]);
}

/** Copies a thread's checkpoints, blobs and writes to another thread id (threads.copy). */
export async function copyCheckpoints(client, from, to) {
  await client.query(
    `insert into ${SCHEMA}.checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata)
     select $2, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, replace(metadata::text, $1, $2)::jsonb
     from ${SCHEMA}.checkpoints where thread_id = $1`,
    [from, to],
  );
  await client.query(
    `insert into ${SCHEMA}.checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob)
     select $2, checkpoint_ns, channel, version, type, blob from ${SCHEMA}.checkpoint_blobs where thread_id = $1`,
    [from, to],
  );
  await client.query(
    `insert into ${SCHEMA}.checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, blob)
     select $2, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, blob from ${SCHEMA}.checkpoint_writes where thread_id = $1`,
    [from, to],
  );
}

/**
 * The server's checkpointer (an in-memory saver its routes and graphs share) made to keep everything
 * in PostgreSQL through PostgresSaver, with the extras the server calls: delete a thread's or one
 * run's checkpoints, copy a thread's.
 */
export function installCheckpointer(target, postgresSaver, connections) {
  const EXCLUDED_KEYS = ['checkpoint_ns', 'checkpoint_id', 'run_id', 'thread_id'];
  Object.assign(target, {
    initialize: async () => ({ flush: async () => undefined }),
    clear: () => undefined,
    getTuple: (config) => postgresSaver.getTuple(config),
    list: (config, listOptions) => postgresSaver.list(config, listOptions),
    putWrites: (config, writes, taskId) => postgresSaver.putWrites(config, writes, taskId),
    deleteThread: (threadId) => postgresSaver.deleteThread(threadId),
    put(config, checkpoint, metadata, newVersions) {
      // As the in-memory saver does: the run's configurable (less internals) and metadata are part of
      // every checkpoint's metadata, and the run id marks what a rollback deletes.
      const configurable = config.configurable ?? {};
      const fromConfig = Object.fromEntries(
        Object.entries(configurable).filter(([key]) => !key.startsWith('__') && !EXCLUDED_KEYS.includes(key)),
      );
      const runId = configurable.run_id;
      return postgresSaver.put(
        config,
        checkpoint,
        { ...fromConfig, ...config.metadata, ...metadata, ...(runId && !metadata?.run_id ? { run_id: runId } : {}) },
        newVersions,
      );
    },
    async delete(threadId, runId) {
      if (runId == null) return postgresSaver.deleteThread(threadId);
      await deleteRunCheckpoints(connections, threadId, runId);
    },
    copy: (from, to) => copyCheckpoints(connections, from, to),
    toJSON: () => '[PostgresSaver]',
  });
}

/**
 * The store the server's routes and graphs share, kept in PostgreSQL by PostgresStore. A search or
 * listing a client sends malformed answers what the in-memory store answers (docs/langgraph.md,
 * "Malformed ids and filters"): a namespace or filter holding a NUL finds nothing, a negative or
 * fractional limit or offset is made a whole number of at least 0, rather than a 500 from PostgreSQL.
 */
export function installStore(target, postgresStore) {
  const paging = (options) => ({
    ...options,
    ...(options?.limit !== undefined ? { limit: sqlCount(options.limit, 10) } : {}),
    ...(options?.offset !== undefined ? { offset: sqlCount(options.offset, 0) } : {}),
  });
  Object.assign(target, {
    initialize: async () => ({ flush: async () => undefined }),
    clear: async () => undefined,
    batch: (operations) => postgresStore.batch(operations),
    get: (namespace, key) => (storable([namespace, key]) ? postgresStore.get(namespace, key) : null),
    async search(namespacePrefix, options) {
      if (!storable([namespacePrefix, options?.filter, options?.query])) return [];
      return postgresStore.search(namespacePrefix, paging(options));
    },
    put: (...args) => postgresStore.put(...args),
    delete: (...args) => postgresStore.delete(...args),
    async listNamespaces(options) {
      if (!storable([options?.prefix, options?.suffix])) return [];
      return postgresStore.listNamespaces(paging(options));
    },
    toJSON: () => '[PostgresStore]',
  });
}
