// Crons (`/runs/crons`), which LangChain's open-source server leaves unimplemented: their routes,
// mounted as the server's custom `http` app, and the scheduler that fires each tick once across instances.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { clearInterval, setInterval } from 'node:timers';
import { pathToFileURL } from 'node:url';
import { nextCronTime, parseCron } from './cron-schedule.mjs';
import { esmEntry } from './packages.mjs';
import { authFilterSql, isUuid, storable, uuid7 } from './records.mjs';
import { SCHEMA } from './schema.mjs';

export function createCrons(ctx) {
  const {
    HTTPException,
    fromApi,
    getAssistantId,
    handleAuthEvent,
    instanceId,
    isAuthMatching,
    json,
    lane,
    live,
    logger,
    notFound,
    options,
    pool,
    projectDir,
    runs,
    threadRow,
    transaction,
  } = ctx;
  // --- crons: routes the open-source server leaves unimplemented, and their scheduler ------------------
  const cronOf = (row) => ({
    cron_id: row.cron_id,
    assistant_id: row.assistant_id,
    thread_id: row.thread_id ?? undefined,
    user_id: row.user_id ?? undefined,
    schedule: row.schedule,
    timezone: row.timezone ?? undefined,
    payload: row.payload ?? {},
    metadata: row.metadata ?? {},
    enabled: row.enabled,
    on_run_completed: row.on_run_completed ?? undefined,
    end_time: row.end_time ?? undefined,
    next_run_date: row.next_run_date ?? undefined,
    created_at: row.created_at,
    updated_at: row.updated_at,
  });
  const PAYLOAD_FIELDS = [
    'input',
    'config',
    'context',
    'interrupt_before',
    'interrupt_after',
    'webhook',
    'multitask_strategy',
    'stream_mode',
    'stream_subgraphs',
    'stream_resumable',
    'checkpoint_during',
    'durability',
    'command',
  ];
  const invalid = (message) => new HTTPException(422, { message });

  function checkSchedule(schedule, timeZone, from = new Date()) {
    const fields = parseCron(schedule);
    if (fields instanceof Error) throw invalid(fields.message);
    if (timeZone != null) {
      try {
        new Intl.DateTimeFormat('en-US', { timeZone });
      } catch {
        throw invalid(`timezone ${JSON.stringify(timeZone)} is not an IANA time zone`);
      }
    }
    const next = nextCronTime(fields, timeZone, from);
    if (next === null) throw invalid(`schedule ${JSON.stringify(schedule)} names no time in the next five years`);
    return next;
  }

  async function createCron(threadId, body, auth) {
    if (body === null || typeof body !== 'object') throw invalid('the body must be a JSON object');
    if (typeof body.assistant_id !== 'string' || body.assistant_id === '') throw invalid('assistant_id is required');
    const assistantId = getAssistantId(body.assistant_id);
    const [filters, mutable] = await handleAuthEvent(auth, 'crons:create', {
      thread_id: threadId,
      assistant_id: assistantId,
      schedule: body.schedule,
      metadata: body.metadata ?? {},
    });
    const next = checkSchedule(body.schedule, body.timezone);
    // Neither a graph name nor a UUID (a typo of a graph name): no such assistant.
    const assistantRow = isUuid(assistantId)
      ? (await pool.query(`select 1 from ${SCHEMA}.assistants where assistant_id = $1`, [assistantId])).rows[0]
      : undefined;
    if (!assistantRow) throw notFound(`Assistant ${body.assistant_id} not found`);
    if (threadId != null) {
      const thread = await threadRow(pool, threadId);
      if (!thread || !isAuthMatching(thread.metadata, filters)) throw notFound(`Thread with ID ${threadId} not found`);
    }
    const payload = Object.fromEntries(
      PAYLOAD_FIELDS.filter((key) => body[key] !== undefined).map((key) => [key, body[key]]),
    );
    const { rows } = await pool.query(
      `insert into ${SCHEMA}.crons (cron_id, assistant_id, thread_id, user_id, schedule, timezone, payload, metadata,
         enabled, on_run_completed, end_time, next_run_date, lane)
       values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) returning *`,
      [
        uuid7(),
        assistantId,
        threadId ?? null,
        auth?.user?.identity ?? null,
        body.schedule.trim(),
        body.timezone ?? null,
        json(payload),
        json(mutable?.metadata ?? body.metadata ?? {}),
        body.enabled !== false,
        threadId == null ? (body.on_run_completed ?? 'delete') : null,
        body.end_time ?? null,
        next,
        lane,
      ],
    );
    return cronOf(rows[0]);
  }

  async function cronWhere(query, auth, event) {
    const [filters] = await handleAuthEvent(auth, event, {
      assistant_id: query.assistant_id,
      thread_id: query.thread_id,
      metadata: query.metadata,
    });
    const params = [];
    const where = [authFilterSql('metadata', filters, params)];
    // As LangChain's schema of a cron search says (CronSearch): the ids are UUIDs, a graph name standing for its assistant.
    const assistantId = query.assistant_id != null ? getAssistantId(String(query.assistant_id)) : null;
    if (assistantId != null && !isUuid(assistantId))
      throw invalid('assistant_id must be a UUID or the name of a graph of this deployment');
    if (query.thread_id != null && !isUuid(query.thread_id)) throw invalid('thread_id must be a UUID');
    if (!storable(query.metadata)) return { where: 'false', params: [] };
    if (assistantId != null) where.push(`assistant_id = $${params.push(assistantId)}::uuid`);
    if (query.thread_id != null) where.push(`thread_id = $${params.push(query.thread_id)}::uuid`);
    if (query.enabled != null) where.push(`enabled = $${params.push(query.enabled === true)}`);
    if (query.metadata != null) where.push(`metadata @> $${params.push(JSON.stringify(query.metadata))}::jsonb`);
    return { where: where.join(' and '), params };
  }

  async function findCron(cronId, auth, event) {
    const { where, params } = await cronWhere({}, auth, event);
    const { rows } = await pool.query(
      `select * from ${SCHEMA}.crons where ${where} and cron_id = $${params.push(cronId)}::uuid`,
      params,
    );
    if (!rows[0]) throw notFound(`Cron with ID ${cronId} not found`);
    return rows[0];
  }

  async function jsonBody(c) {
    try {
      return await c.req.json();
    } catch {
      throw invalid('the body must be JSON');
    }
  }
  function uuidParam(c, name) {
    const value = c.req.param(name);
    if (!isUuid(value)) throw invalid(`${name} must be a UUID`);
    return value;
  }

  /** The cron routes, registered before LangChain's (which answer 500 "Not implemented"). */
  function registerCronRoutes(app) {
    app.post('/runs/crons', async (c) => c.json(await createCron(null, await jsonBody(c), c.var.auth)));
    app.post('/threads/:thread_id/runs/crons', async (c) =>
      c.json(await createCron(uuidParam(c, 'thread_id'), await jsonBody(c), c.var.auth)),
    );
    app.post('/runs/crons/search', async (c) => {
      const body = await jsonBody(c);
      const { where, params } = await cronWhere(body ?? {}, c.var.auth, 'crons:search');
      const sortBy = ['cron_id', 'assistant_id', 'thread_id', 'created_at', 'updated_at', 'next_run_date'].includes(
        body?.sort_by,
      )
        ? body.sort_by
        : 'created_at';
      const order = body?.sort_order === 'asc' ? 'asc' : 'desc';
      const limit = Math.min(Math.max(Number.parseInt(body?.limit ?? 10, 10) || 10, 1), 1000);
      const offset = Math.max(Number.parseInt(body?.offset ?? 0, 10) || 0, 0);
      const { rows } = await pool.query(
        `select * from ${SCHEMA}.crons where ${where} order by ${sortBy} ${order}, cron_id
         limit $${params.push(limit)} offset $${params.push(offset)}`,
        params,
      );
      return c.json(rows.map(cronOf));
    });
    app.post('/runs/crons/count', async (c) => {
      const { where, params } = await cronWhere((await jsonBody(c)) ?? {}, c.var.auth, 'crons:search');
      const { rows } = await pool.query(`select count(*) from ${SCHEMA}.crons where ${where}`, params);
      return c.json(Number(rows[0].count));
    });
    app.patch('/runs/crons/:cron_id', async (c) => {
      const cronId = uuidParam(c, 'cron_id');
      const body = (await jsonBody(c)) ?? {};
      const current = await findCron(cronId, c.var.auth, 'crons:update');
      const schedule = body.schedule ?? current.schedule;
      const timeZone = body.timezone !== undefined ? body.timezone : current.timezone;
      const next = checkSchedule(schedule, timeZone);
      const payload = { ...current.payload };
      for (const key of PAYLOAD_FIELDS) if (body[key] !== undefined) payload[key] = body[key];
      const { rows } = await pool.query(
        `update ${SCHEMA}.crons set schedule = $2, timezone = $3, payload = $4, metadata = $5, enabled = $6,
           end_time = $7, on_run_completed = $8, next_run_date = $9, updated_at = now() where cron_id = $1 returning *`,
        [
          cronId,
          schedule.trim(),
          timeZone ?? null,
          json(payload),
          json(body.metadata != null ? { ...current.metadata, ...body.metadata } : current.metadata),
          body.enabled ?? current.enabled,
          body.end_time !== undefined ? body.end_time : current.end_time,
          body.on_run_completed ?? current.on_run_completed,
          next,
        ],
      );
      return c.json(cronOf(rows[0]));
    });
    app.delete('/runs/crons/:cron_id', async (c) => {
      const cronId = uuidParam(c, 'cron_id');
      await findCron(cronId, c.var.auth, 'crons:delete');
      await pool.query(`delete from ${SCHEMA}.crons where cron_id = $1`, [cronId]);
      return c.body(null, 204);
    });
  }

  /**
   * Fires the crons that are due, each tick once whichever instances look: a tick is claimed by moving
   * the cron's next_run_date forward in the transaction that locks it (SKIP LOCKED), then its run is
   * queued. An instance that dies between the two loses that tick (at most once, never twice).
   */
  async function fireDueCrons() {
    const due = await transaction(async (client) => {
      const { rows } = await client.query(
        `select * from ${SCHEMA}.crons where enabled and next_run_date <= now() and lane = $1 order by next_run_date
         limit 20 for update skip locked`,
        [lane],
      );
      const fired = [];
      for (const row of rows) {
        const ended = row.end_time != null && row.end_time <= new Date();
        const fields = parseCron(row.schedule);
        const next = ended || fields instanceof Error ? null : nextCronTime(fields, row.timezone, new Date());
        await client.query(
          `update ${SCHEMA}.crons set next_run_date = $2, enabled = $3, updated_at = now() where cron_id = $1`,
          [row.cron_id, next, next !== null],
        );
        if (!ended) fired.push(row);
      }
      return fired;
    });
    for (const cron of due) {
      const payload = cron.payload ?? {};
      const streamMode = Array.isArray(payload.stream_mode)
        ? payload.stream_mode
        : payload.stream_mode
          ? [payload.stream_mode]
          : ['values'];
      try {
        await runs.put(
          uuid7(),
          cron.assistant_id,
          {
            input: payload.input,
            command: payload.command,
            config: payload.config ?? {},
            context: payload.context,
            stream_mode: streamMode,
            interrupt_before: payload.interrupt_before,
            interrupt_after: payload.interrupt_after,
            webhook: payload.webhook,
            temporary: cron.thread_id == null && (cron.on_run_completed ?? 'delete') === 'delete',
            subgraphs: payload.stream_subgraphs ?? false,
            resumable: payload.stream_resumable ?? false,
          },
          {
            threadId: cron.thread_id ?? undefined,
            userId: cron.user_id ?? undefined,
            metadata: { ...cron.metadata, cron_id: cron.cron_id },
            status: 'pending',
            multitaskStrategy: payload.multitask_strategy ?? 'enqueue',
            ifNotExists: 'reject',
          },
          undefined,
        );
        logger.info('Cron fired', { cron_id: cron.cron_id, thread_id: cron.thread_id });
      } catch (error) {
        logger.warn('A cron could not queue its run', { cron_id: cron.cron_id, error: error.message });
      }
    }
  }
  const cronTimer = setInterval(
    () => {
      if (!live.stopping)
        fireDueCrons().catch((error) => logger.warn('Could not fire crons', { error: error.message }));
    },
    5_000 + Math.random() * 1_000,
  );

  /** The `http` option that mounts the cron routes (and the project's own `http.app` after them). */
  /** `more`: other routes of the launcher's (MCP, A2A), registered after the crons' and before the project's app. */
  async function cronHttpApp(more = []) {
    globalThis[Symbol.for('slipway.langgraph.cronRoutes')] = (app) => {
      registerCronRoutes(app);
      for (const register of more) register(app);
    };
    const user = options.http?.app;
    const [userFile, userExport] = user ? user.split(':', 2) : [];
    const lines = [
      `import { Hono } from ${JSON.stringify(esmEntry(fromApi, 'hono'))};`,
      ...(user
        ? [`import * as user from ${JSON.stringify(pathToFileURL(path.resolve(projectDir, userFile)).href)};`]
        : []),
      'const app = new Hono();',
      "globalThis[Symbol.for('slipway.langgraph.cronRoutes')](app);",
      ...(user
        ? [
            `const userApp = user[${JSON.stringify(userExport || 'default')}];`,
            `if (!userApp) throw new Error(${JSON.stringify(`Failed to load HTTP app: ${user}`)});`,
            "app.route('/', userApp);",
          ]
        : []),
      'export default app;',
    ];
    // The sandbox's /tmp is the instance's own; the source is read-only.
    const file = path.join(os.tmpdir(), `slipway-langgraph-http-${instanceId}.mjs`);
    fs.writeFileSync(file, `${lines.join('\n')}\n`, { mode: 0o600 });
    return { ...options.http, app: file };
  }

  return {
    cronHttpApp,
    stop() {
      clearInterval(cronTimer);
    },
  };
}
