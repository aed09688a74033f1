// The server with its state in PostgreSQL (`serve` mode of runtime/langgraph-server.mjs, run inside the
// API's tsx): LangChain's own server (`startServer(options, { ops })` of @langchain/langgraph-api 1.5.x)
// with the operations of this directory behind it, its checkpointer and store on PostgresSaver and
// PostgresStore (docs/langgraph.md, "State in the deployment's database").
//
// Glossary. A *run* is a row of langgraph.runs: `pending` (queued, maybe for later: created_at is when
// it may start), `running` (claimed by one instance, which holds a *lease* on it until
// lease_expires_at and extends it while it executes), then `success`, `error`, `interrupted` or
// `timeout`. Every run, waited, streamed or in the background, is executed by one of the server's
// queue workers on whichever instance claims it first (`FOR UPDATE SKIP LOCKED`; at most one running
// run per thread). What it streams is appended to langgraph.run_events and announced with NOTIFY, so a
// client joins it through any instance. A run whose lease ends (its instance died) is given back to the
// queue, its partial checkpoints rolled back, up to MAX_ATTEMPTS executions; after that it fails with
// a reason. Cancellation is a column plus a NOTIFY that the executing instance acts on.
//
// The parts: instance.mjs (notifications, helpers), assistants.mjs, threads.mjs, runs.mjs (the
// operations the server's routes and queue workers call), run-queue.mjs (claims, leases, sweeps),
// crons.mjs (routes and scheduler), checkpoints.mjs, schema.mjs; MCP and A2A on top of the API:
// protocols.mjs, protocol-auth.mjs (who may call them), mcp.mjs, a2a.mjs, a2a-tasks.mjs.
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { createA2a } from './a2a.mjs';
import { createAssistants } from './assistants.mjs';
import { deleteRunCheckpoints, installCheckpointer, installStore } from './checkpoints.mjs';
import { createCrons } from './crons.mjs';
import { SCHEMAS_FILE, builtGraphSchemas } from './graph-schemas.mjs';
import { createInstance } from './instance.mjs';
import { createMcp } from './mcp.mjs';
import { esmEntry, packageDir } from './packages.mjs';
import { sleep } from './records.mjs';
import { createSchemas, loadProtocolPackages } from './protocols.mjs';
import { createProtocolAuth } from './protocol-auth.mjs';
import { createRunQueue } from './run-queue.mjs';
import { createRuns } from './runs.mjs';
import { SCHEMA, WAKE_CHANNEL, migrate, recordTtls, ttlOf } from './schema.mjs';
import { createThreads } from './threads.mjs';

export async function serve(instanceId, optionsText) {
  const options = JSON.parse(optionsText);
  const projectDir = options.cwd;
  const fromProject = createRequire(path.join(projectDir, 'package.json'));
  const apiPackageJson = fromProject.resolve('@langchain/langgraph-api/package.json');
  const apiDist = path.join(path.dirname(apiPackageJson), 'dist');
  // The server's own modules, by file: the same instances its routes use.
  const internal = (file) => import(pathToFileURL(path.join(apiDist, file)).href);
  const fromApi = createRequire(apiPackageJson);
  const fromCheckpointPostgres = createRequire(
    path.join(packageDir(fromProject, '@langchain/langgraph-checkpoint-postgres'), 'package.json'),
  );
  const [
    { startServer },
    { checkpointer },
    { store },
    { getGraph, getAssistantId, GRAPH_SCHEMA },
    { handleAuthEvent, isAuthMatching },
    { serialiseAsDict, serializeError },
    { logger },
    { HTTPException },
    { PostgresSaver },
    { PostgresStore },
    pgModule,
  ] = await Promise.all([
    internal('server.mjs'),
    internal('storage/checkpoint.mjs'),
    internal('storage/store.mjs'),
    internal('graph/load.mjs'),
    internal('auth/index.mjs'),
    internal('utils/serde.mjs'),
    internal('logging.mjs'),
    import(esmEntry(fromApi, 'hono', './http-exception')),
    import(esmEntry(fromProject, '@langchain/langgraph-checkpoint-postgres')),
    import(esmEntry(fromProject, '@langchain/langgraph-checkpoint-postgres', './store')),
    import(pathToFileURL(fromCheckpointPostgres.resolve('pg')).href),
  ]);
  const pg = pgModule.default ?? pgModule;

  const leaseSeconds = Math.max(2, Number.parseInt(process.env.LANGGRAPH_RUN_LEASE_SECONDS || '30', 10) || 30);
  // The deployment's role may hold 20 connections, shared by its instances and, during a redeploy, the
  // old ones still draining: 4 per instance (this pool, the store's, the notifications' listener), so two
  // instances of each of two revisions fit (six each made a redeploy of two instances fail with 53300).
  const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 2, idleTimeoutMillis: 5_000 });
  pool.on('error', (error) => logger.warn('PostgreSQL connection lost', { error: error.message }));
  const json = (value) => (value === undefined ? null : (serialiseAsDict(value) ?? null));

  const saver = new PostgresSaver(pool, undefined, { schema: SCHEMA });
  const threadTtl = ttlOf(options.checkpointer?.ttl, 'checkpointer.ttl', logger);
  const storeTtl = ttlOf(options.store?.ttl, 'store.ttl', logger);
  const postgresStore = new PostgresStore({
    connectionOptions: { connectionString: process.env.DATABASE_URL, max: 1, idleTimeoutMillis: 5_000 },
    schema: SCHEMA,
    ensureTables: false,
    // PostgresStore sweeps expired items itself once set up.
    ...(storeTtl
      ? {
          ttl: {
            defaultTtl: storeTtl.minutes,
            refreshOnRead: options.store.ttl.refresh_on_read ?? true,
            sweepIntervalMinutes: storeTtl.sweepMinutes,
          },
        }
      : {}),
  });
  await migrate(pool, saver, postgresStore);
  await recordTtls(pool, threadTtl, storeTtl, options.store?.ttl?.refresh_on_read ?? true);
  installCheckpointer(checkpointer, saver, pool);
  installStore(store, postgresStore);

  const instance = await createInstance({ pg, pool, logger });
  const { live, local, lostThreads, notify, transaction } = instance;
  const notFound = (message) => new HTTPException(404, { message });
  // What the parts below share; each adds what the next ones use.
  const ctx = {
    ...instance,
    options,
    projectDir,
    instanceId,
    internal,
    fromApi,
    pool,
    json,
    logger,
    saver,
    checkpointer,
    store,
    leaseSeconds,
    threadTtl,
    HTTPException,
    notFound,
    handleAuthEvent,
    isAuthMatching,
    getGraph,
    getAssistantId,
    serialiseAsDict,
    serializeError,
  };
  const assistants = createAssistants(ctx);
  const threadParts = createThreads(ctx);
  const queue = createRunQueue(ctx);
  const runs = createRuns({ ...ctx, ...threadParts, claimRun: queue.claimRun });
  const crons = createCrons({ ...ctx, threadRow: threadParts.threadRow, runs });

  const ops = {
    assistants,
    threads: threadParts.threads,
    runs,
    async truncate() {
      // `POST /internal/truncate` is open to whoever reaches the app's URL: it never wipes a deployment.
      logger.warn('Refused to truncate the LangGraph state: it lives in the deployment database');
    },
  };

  // The cron routes come in as the server's custom `http` app (mounted before its own routes, after
  // custom auth), from a module written for this instance: the user's own app, if any, is mounted in it.
  // MCP and A2A (protocols.mjs) call the server's own API in process, through its loopback fetch.
  const protocolPackages = await loadProtocolPackages(projectDir, logger);
  const { getLoopbackFetch } = await internal('loopback.mjs');
  const protocolCtx = { ...ctx, loopbackFetch: (url, init) => getLoopbackFetch()(url, init) };
  // Graph schemas are compiled in a worker that LangChain's server gives 30 s, too little on a busy machine.
  process.env.LANGGRAPH_SCHEMA_RESOLVE_TIMEOUT_MS ||= '180000';
  // The schemas the build read (graph-schemas.mjs) go into the server's own cache: its routes and MCP and
  // A2A find them there; only a graph the build could not read is read here.
  const apiVersion = JSON.parse(fs.readFileSync(apiPackageJson, 'utf8')).version;
  const launcherDir = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
  const built = builtGraphSchemas(path.join(launcherDir, SCHEMAS_FILE), options.graphs, projectDir, apiVersion);
  for (const [graphId, schema] of built.schemas) GRAPH_SCHEMA[graphId] = schema;
  const schemas = createSchemas(ctx);
  const protocols = protocolPackages
    ? [
        // First: it guards the routes of the two after it (SLIPWAY_PROTOCOLS_AUTH).
        createProtocolAuth({ options, logger }),
        createMcp(protocolCtx, protocolPackages, schemas.inputSchema),
        createA2a(protocolCtx, protocolPackages, schemas.inputSchema),
      ]
    : [];
  const serverOptions = options.http?.disable_runs
    ? options
    : { ...options, http: await crons.cronHttpApp(protocols.map((part) => part.register)) };
  const { host, cleanup } = await startServer(serverOptions, { ops });
  logger.info(`Server running at ${host}, state in PostgreSQL (instance ${instanceId})`);
  // Warmed here: only what the build did not read, and not what its reader failed on (it would again).
  const unread = Object.keys(options.graphs ?? {}).filter(
    (graphId) => !built.schemas.has(graphId) && !built.unreadable.has(graphId),
  );
  if (protocols.length > 0 && unread.length > 0) void schemas.warm(unread);

  let shuttingDown = false;
  async function shutdown() {
    if (shuttingDown) return;
    shuttingDown = true;
    live.stopping = true;
    // Runs under way get a moment to finish; those that do not are given back to the queue at once
    // (their partial checkpoints rolled back), so another instance takes them over without waiting for
    // the lease to end.
    const until = Date.now() + 2_000;
    while (local.size > 0 && Date.now() < until) await sleep(100);
    const left = [...local.entries()];
    if (left.length > 0) {
      for (const [, entry] of left) {
        entry.released = true;
        lostThreads.add(entry.threadId);
        entry.controller.abort('shutdown');
      }
      const stopped = Date.now() + 1_000;
      while (local.size > 0 && Date.now() < stopped) await sleep(50);
      await transaction(async (client) => {
        for (const [runId, entry] of left) await deleteRunCheckpoints(client, entry.threadId, runId);
        await client.query(
          `update ${SCHEMA}.runs set status = 'pending', lease_owner = null, lease_expires_at = null, updated_at = now()
           where run_id = any($1::uuid[]) and lease_owner = $2 and status = 'running'`,
          [left.map(([runId]) => runId), instanceId],
        );
      }).catch((error) => logger.warn('Could not give runs back to the queue', { error: error.message }));
      await notify(WAKE_CHANNEL, '').catch(() => undefined);
    }
    queue.stop();
    crons.stop();
    for (const part of protocols) part.stop?.();
    await cleanup().catch(() => undefined);
    await instance.closeListener();
    await postgresStore.stop?.().catch(() => undefined);
    await pool.end().catch(() => undefined);
    process.exit(0);
  }
  for (const signal of ['SIGTERM', 'SIGINT']) process.on(signal, () => void shutdown());
}
