// A2A tasks in the deployment's database (langgraph.a2a_tasks): the A2A SDK's TaskStore, so that
// tasks/get and tasks/cancel work through any instance. A task's `contextId` is its LangGraph thread:
// a caller sees a task only while the LangGraph API shows it that thread (the project's custom `auth`
// decides), and a task cancelled through an instance that is not executing it stops its run all the same.
import { createHash } from 'node:crypto';
import { SCHEMA } from './schema.mjs';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** The namespace of the thread ids made from contextIds that are not UUIDs (a UUID v5 of this one). */
const CONTEXT_NAMESPACE = '6f1c2a52-6b0e-4c35-9d3f-8a4c1e7b2d90';

/** The LangGraph thread of an A2A contextId: the id itself when it is a UUID, else a UUID v5 of it. */
export function threadOf(contextId) {
  if (UUID.test(contextId)) return contextId.toLowerCase();
  const hash = createHash('sha1')
    .update(Buffer.from(CONTEXT_NAMESPACE.replaceAll('-', ''), 'hex'))
    .update(contextId, 'utf8')
    .digest();
  hash[6] = (hash[6] & 0x0f) | 0x50;
  hash[8] = (hash[8] & 0x3f) | 0x80;
  const hex = hash.subarray(0, 16).toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

export const API_STATE_KEY = 'slipway.langgraph.api';
const SEEN_STATE_KEY = 'slipway.langgraph.seenContexts';
const CANCELED = 5;
const TERMINAL = new Set([3, 4, 5, 7]);

/** The TaskStore; `apiOf(context)` is the LangGraph API as the caller of the current request. */
export function createTaskStore({ pool, Task, logger }) {
  const apiOf = (context) => context?.state?.get(API_STATE_KEY);

  /** Whether the caller sees the task's thread (asked once per request and thread). */
  async function visible(contextId, context) {
    const api = apiOf(context);
    if (!api) return false;
    let seen = context.state.get(SEEN_STATE_KEY);
    if (!seen) context.state.set(SEEN_STATE_KEY, (seen = new Set()));
    if (seen.has(contextId)) return true;
    try {
      await api.json('GET', `/threads/${threadOf(contextId)}`);
      seen.add(contextId);
      return true;
    } catch {
      return false;
    }
  }

  return {
    async save(task, context) {
      const body = Task.toJSON(task);
      const { rows } = await pool.query(
        `insert into ${SCHEMA}.a2a_tasks as t (task_id, context_id, body) values ($1, $2, $3)
         on conflict (task_id) do update set body = excluded.body, updated_at = now()
         returning (select body from ${SCHEMA}.a2a_tasks where task_id = $1) as before`,
        [task.id, task.contextId, body],
      );
      const before = rows[0]?.before ? Task.fromJSON(rows[0].before).status?.state : undefined;
      if (task.status?.state === CANCELED && !TERMINAL.has(before)) {
        // Cancelled here while another instance (or none any more) executes it: its run stops too.
        await apiOf(context)
          ?.cancelRuns(threadOf(task.contextId))
          .catch((error) => logger.warn('Could not stop a cancelled task', { task: task.id, error: error.message }));
      }
    },
    async load(taskId, context) {
      const { rows } = await pool.query(`select body from ${SCHEMA}.a2a_tasks where task_id = $1`, [
        String(taskId).slice(0, 200),
      ]);
      if (rows.length === 0) return undefined;
      const task = Task.fromJSON(rows[0].body);
      return (await visible(task.contextId, context)) ? task : undefined;
    },
    async list(params, context) {
      const pageSize = Math.min(100, Math.max(1, Number(params?.pageSize) || 50));
      const { rows } = await pool.query(
        `select body from ${SCHEMA}.a2a_tasks where ($1::text is null or context_id = $1)
         order by created_at desc limit $2`,
        [params?.contextId || null, pageSize * 4],
      );
      const tasks = [];
      for (const row of rows) {
        const task = Task.fromJSON(row.body);
        if (tasks.length < pageSize && (await visible(task.contextId, context))) tasks.push(task);
      }
      return { tasks, nextPageToken: '', pageSize, totalSize: tasks.length };
    },
  };
}
