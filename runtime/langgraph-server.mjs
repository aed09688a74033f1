// Starts LangChain's open-source LangGraph API server for a langgraph.json project (docs/langgraph.md),
// with its state in the deployment's own PostgreSQL database when it has one.
//
// The data plane copies this file into a LangGraph revision's source as .slipway/langgraph-server.mjs
// (src/dataplane/app-config-file.ts) and starts it from the source root:
//
//   node .slipway/langgraph-server.mjs js|python <path of langgraph.json>
//
// with PORT and HOST set. Plain JavaScript: it runs inside the app's sandbox, on the Node.js that runs
// the service, and imports only what the project's install put beside the config. The data plane copies
// this one file, which is why the PostgreSQL layer lives here too (below the launcher).
//
// - js with DATABASE_URL (the deployment's database) and the pinned server (1.5.x): the server of the
//   project's @langchain/langgraph-api, started through its own `startServer(options, { ops })` hook
//   with the PostgreSQL operations below, its checkpointer backed by @langchain/langgraph-checkpoint-
//   postgres's PostgresSaver and its store by that package's PostgresStore. LangChain's HTTP layer
//   (routes, validation, streaming, custom auth and http apps) serves the requests unchanged; only where
//   assistants, threads, runs, checkpoints and store items live changes. Started as the API's own
//   `dev` command starts it (its tsx, its preload hook), with this file as the entrypoint (`serve`).
// - js otherwise: the API's own entrypoint, in memory, as @langchain/langgraph-cli's `dev` starts it,
//   but without `tsx watch`: a deployed revision's files never change.
// - python: `langgraph dev --no-reload --no-browser` of the venv's langgraph-cli[inmem], in the
//   config's directory, as a user runs it (in memory).
//
// The in-memory servers snapshot to `.langgraph_api/` in the project's directory. A redeploy copies an
// older revision's directory, snapshot included: the snapshot is kept only for the revision that wrote
// it, so a restart of the same revision finds its state and a new revision starts empty, never with
// another revision's past.
import { spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { EventEmitter } from 'node:events';
import fs from 'node:fs';
import os from 'node:os';
import { createRequire } from 'node:module';
import path from 'node:path';
import { clearInterval, setInterval } from 'node:timers';
import { fileURLToPath, pathToFileURL } from 'node:url';

/** The @langchain/langgraph-api releases whose storage contract (`Ops`) the PostgreSQL layer implements. */
const POSTGRES_API_VERSIONS = /^1\.5\./;

// ---------------------------------------------------------------------------------------------------
// The launcher
// ---------------------------------------------------------------------------------------------------

function keepStateOfThisRevisionOnly(projectDir) {
  // On Slipway `.langgraph_api` is a link to the deployment's own writable directory (the source is
  // read-only): its contents are cleared, never the link.
  const stateDir = process.env.SLIPWAY_DATA_DIR
    ? path.join(process.env.SLIPWAY_DATA_DIR, 'langgraph_api')
    : path.join(projectDir, '.langgraph_api');
  const marker = path.join(stateDir, '.slipway-revision');
  const revision = process.env.SLIPWAY_REVISION_ID || '';
  let owner;
  try {
    owner = fs.readFileSync(marker, 'utf8');
  } catch {
    owner = null;
  }
  if (owner === revision) return;
  fs.mkdirSync(stateDir, { recursive: true });
  for (const name of fs.readdirSync(stateDir)) fs.rmSync(path.join(stateDir, name), { recursive: true, force: true });
  fs.writeFileSync(marker, revision);
}

/** The directory of the package `name` as `require` finds it from `fromRequire` (exports need not list package.json). */
function packageDir(fromRequire, name) {
  let dir = path.dirname(fromRequire.resolve(name));
  for (;;) {
    const manifest = path.join(dir, 'package.json');
    if (fs.existsSync(manifest) && JSON.parse(fs.readFileSync(manifest, 'utf8')).name === name) return dir;
    const parent = path.dirname(dir);
    if (parent === dir) throw new Error(`could not find the directory of ${name}`);
    dir = parent;
  }
}

/** The file URL of `subpath` of a package as `import` (not `require`) resolves it: one class per module. */
function esmEntry(fromRequire, name, subpath = '.') {
  const dir = packageDir(fromRequire, name);
  const manifest = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8'));
  let target = manifest.exports?.[subpath] ?? (subpath === '.' ? manifest.module || manifest.main : null);
  while (target && typeof target === 'object') target = target.import ?? target.default;
  if (typeof target !== 'string') throw new Error(`${name} has no ESM entry for ${subpath}`);
  return pathToFileURL(path.join(dir, target)).href;
}

function launch(mode, configArgument) {
  const sourceRoot = process.cwd();
  const configPath = path.resolve(sourceRoot, configArgument);
  const projectDir = path.dirname(configPath);
  const config = JSON.parse(fs.readFileSync(configPath, 'utf8').replace(/^\uFEFF/, ''));
  const host = process.env.HOST || '127.0.0.1';
  const port = process.env.PORT || '2024';

  function jsServer() {
    // Resolved from the project, as `npx @langchain/langgraph-cli dev` run there would find it.
    const fromProject = createRequire(path.join(projectDir, 'package.json'));
    let apiPackageJson;
    try {
      apiPackageJson = fromProject.resolve('@langchain/langgraph-api/package.json');
    } catch {
      console.error(
        `@langchain/langgraph-api is not installed for ${configArgument}: add it (or @langchain/langgraph-cli) to the project's dependencies, or let the default install command add it.`,
      );
      process.exit(1);
    }
    const apiDir = path.dirname(apiPackageJson);
    const apiVersion = JSON.parse(fs.readFileSync(apiPackageJson, 'utf8')).version;
    const fromApi = createRequire(apiPackageJson);
    // spawnServer runs `<tsx>/dist/cli.mjs`, found from tsx/esm/api, with the API's own tsx.
    const tsxCli = path.resolve(path.dirname(fromApi.resolve('tsx/esm/api')), '../../cli.mjs');
    const options = {
      port: Number.parseInt(port, 10),
      nWorkers: 10,
      host,
      graphs: config.graphs,
      auth: config.auth,
      ui: config.ui,
      ui_config: config.ui_config,
      cwd: projectDir,
      http: config.http,
    };
    let entry;
    if (process.env.DATABASE_URL && POSTGRES_API_VERSIONS.test(apiVersion) && hasPostgresPackages(fromProject)) {
      // This file again, as the server process: the state layer below. The instance id names this
      // instance in the leases of the runs it executes.
      entry = [fileURLToPath(import.meta.url), 'serve', randomUUID()];
      // The TTLs of langgraph.json, which only the PostgreSQL layer reads.
      Object.assign(options, { checkpointer: config.checkpointer, store: config.store });
    } else {
      if (process.env.DATABASE_URL)
        console.error(
          `The LangGraph state stays in memory: the PostgreSQL layer needs @langchain/langgraph-api 1.5.x (found ${apiVersion}) and @langchain/langgraph-checkpoint-postgres installed beside ${configArgument}.`,
        );
      keepStateOfThisRevisionOnly(projectDir);
      // The entrypoint reports to a `langgraph dev` parent over a pipe named by this pid; with none
      // listening it goes on without.
      entry = [path.join(apiDir, 'dist', 'cli', 'entrypoint.mjs'), String(process.pid)];
    }
    const args = [
      tsxCli,
      '--import',
      pathToFileURL(path.join(apiDir, 'dist', 'preload.mjs')).toString(),
      ...entry,
      // Last: the API's preload hook reads the options from the last argument.
      JSON.stringify(options),
    ];
    return spawn(process.execPath, args, {
      cwd: projectDir,
      stdio: 'inherit',
      env: { ...process.env, NODE_ENV: 'development', LANGGRAPH_API_URL: `http://${host}:${port}` },
    });
  }

  function pythonServer() {
    keepStateOfThisRevisionOnly(projectDir);
    const langgraph = path.join(sourceRoot, '.venv', 'bin', 'langgraph');
    const args = ['dev', '--config', configPath, '--host', host, '--port', port, '--no-reload', '--no-browser'];
    return spawn(langgraph, args, {
      cwd: projectDir,
      stdio: 'inherit',
      env: { LANGGRAPH_CLI_NO_ANALYTICS: '1', ...process.env },
    });
  }

  const child = mode === 'js' ? jsServer() : pythonServer();
  for (const signal of ['SIGTERM', 'SIGINT']) {
    // The data plane signals the whole process group; forwarding covers a signal sent to this process alone.
    process.on(signal, () => child.kill(signal));
  }
  child.on('error', (error) => {
    console.error(`Could not start the LangGraph server: ${error.message}`);
    process.exit(127);
  });
  child.on('exit', (code, signal) => {
    process.exitCode = code ?? (signal ? 128 + (signal === 'SIGTERM' ? 15 : signal === 'SIGINT' ? 2 : 9) : 1);
  });
}

function hasPostgresPackages(fromProject) {
  try {
    fromProject.resolve('@langchain/langgraph-checkpoint-postgres');
    return true;
  } catch {
    return false;
  }
}

// ---------------------------------------------------------------------------------------------------
// The server with its state in PostgreSQL (`serve` mode, inside the API's tsx)
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
// ---------------------------------------------------------------------------------------------------

const SCHEMA = 'langgraph';
/** Executions of one run before it fails; the API's worker refuses a fourth itself. */
const MAX_ATTEMPTS = 3;
/** The last row of a run's events: nothing follows it. */
const END_EVENT = '__end__';
const WAKE_CHANNEL = 'langgraph_wake';
const EVENTS_CHANNEL = 'langgraph_events';
const CANCEL_CHANNEL = 'langgraph_cancel';
/** Taken while the schema is made or changed, so instances starting together do not race. */
const SCHEMA_LOCK = 7_301_946_225;
/** How long a finished run's events are kept for late joiners. */
const EVENTS_KEPT = '1 hour';

/** Changes of the schema, in order; the position is the version (langgraph.schema_version). */
const MIGRATIONS = [
  `create table ${SCHEMA}.assistants (
     assistant_id uuid primary key,
     graph_id text not null,
     name text not null,
     description text,
     config jsonb not null default '{}',
     context jsonb,
     metadata jsonb not null default '{}',
     version integer not null,
     created_at timestamptz not null default now(),
     updated_at timestamptz not null default now())`,
  `create table ${SCHEMA}.assistant_versions (
     assistant_id uuid not null references ${SCHEMA}.assistants on delete cascade,
     version integer not null,
     graph_id text not null,
     name text not null,
     description text,
     config jsonb not null default '{}',
     context jsonb,
     metadata jsonb not null default '{}',
     created_at timestamptz not null default now(),
     primary key (assistant_id, version))`,
  `create table ${SCHEMA}.threads (
     thread_id uuid primary key,
     created_at timestamptz not null default now(),
     updated_at timestamptz not null default now(),
     metadata jsonb not null default '{}',
     config jsonb not null default '{}',
     status text not null default 'idle',
     "values" jsonb,
     interrupts jsonb)`,
  `create index threads_created_at on ${SCHEMA}.threads (created_at desc)`,
  `create table ${SCHEMA}.runs (
     run_id uuid primary key,
     thread_id uuid not null references ${SCHEMA}.threads on delete cascade,
     assistant_id uuid not null,
     created_at timestamptz not null default now(),
     updated_at timestamptz not null default now(),
     status text not null,
     metadata jsonb not null default '{}',
     kwargs jsonb not null,
     multitask_strategy text not null,
     attempt integer not null default 0,
     lease_owner text,
     lease_expires_at timestamptz,
     cancel_action text,
     failure text)`,
  `create index runs_pending on ${SCHEMA}.runs (created_at) where status = 'pending'`,
  `create index runs_running on ${SCHEMA}.runs (lease_expires_at) where status = 'running'`,
  `create index runs_thread on ${SCHEMA}.runs (thread_id, created_at)`,
  `create table ${SCHEMA}.run_events (
     seq bigserial primary key,
     run_id uuid not null,
     event text not null,
     data text not null,
     normalized boolean,
     created_at timestamptz not null default now())`,
  `create index run_events_run on ${SCHEMA}.run_events (run_id, seq)`,
  `create table ${SCHEMA}.crons (
     cron_id uuid primary key,
     assistant_id uuid not null,
     thread_id uuid references ${SCHEMA}.threads on delete cascade,
     user_id text,
     schedule text not null,
     timezone text,
     payload jsonb not null default '{}',
     metadata jsonb not null default '{}',
     enabled boolean not null default true,
     on_run_completed text,
     end_time timestamptz,
     next_run_date timestamptz,
     created_at timestamptz not null default now(),
     updated_at timestamptz not null default now())`,
  `create index crons_due on ${SCHEMA}.crons (next_run_date) where enabled`,
  // What the instances apply, for the control plane's view of the deployment's storage (the last
  // instance to start writes it: instances of one revision read the same langgraph.json).
  `create table ${SCHEMA}.settings (
     name text primary key,
     value jsonb not null,
     updated_at timestamptz not null default now())`,
];

// ---------------------------------------------------------------------------------------------------
// Cron schedules: the five fields (minute hour day-of-month month day-of-week) with `*`, lists, ranges
// and steps, in UTC or an IANA time zone. Day of month and day of week combine as cron combines them:
// either matches when both are restricted.
// ---------------------------------------------------------------------------------------------------

const CRON_FIELDS = [
  { name: 'minute', min: 0, max: 59 },
  { name: 'hour', min: 0, max: 23 },
  { name: 'day of month', min: 1, max: 31 },
  { name: 'month', min: 1, max: 12 },
  { name: 'day of week', min: 0, max: 7 },
];

/** The schedule's allowed values per field, or an Error that says what is wrong. */
function parseCron(schedule) {
  const parts = typeof schedule === 'string' ? schedule.trim().split(/\s+/) : [];
  if (parts.length !== 5)
    return new Error(`schedule must have five fields (minute hour day month weekday), got ${JSON.stringify(schedule)}`);
  const fields = [];
  for (const [index, part] of parts.entries()) {
    const { name, min, max } = CRON_FIELDS[index];
    const allowed = new Set();
    for (const item of part.split(',')) {
      const match = /^(\*|(\d+)(?:-(\d+))?)(?:\/(\d+))?$/.exec(item);
      if (!match) return new Error(`schedule: ${JSON.stringify(item)} is not a valid ${name}`);
      const from = match[1] === '*' ? min : Number(match[2]);
      const to = match[1] === '*' ? max : match[3] !== undefined ? Number(match[3]) : match[4] ? max : from;
      const step = match[4] ? Number(match[4]) : 1;
      if (from < min || to > max || from > to || step < 1)
        return new Error(`schedule: ${JSON.stringify(item)} is out of range for the ${name} (${min}-${max})`);
      for (let value = from; value <= to; value += step) allowed.add(index === 4 && value === 7 ? 0 : value);
    }
    fields.push({ allowed, any: part === '*' });
  }
  return fields;
}

/** The wall-clock fields of `date` in `timeZone` (UTC when none). */
function wallClock(date, timeZone) {
  if (!timeZone || timeZone === 'UTC')
    return {
      minute: date.getUTCMinutes(),
      hour: date.getUTCHours(),
      day: date.getUTCDate(),
      month: date.getUTCMonth() + 1,
      weekday: date.getUTCDay(),
    };
  const parts = Object.fromEntries(
    new Intl.DateTimeFormat('en-US', {
      timeZone,
      hourCycle: 'h23',
      minute: 'numeric',
      hour: 'numeric',
      day: 'numeric',
      month: 'numeric',
      weekday: 'short',
    })
      .formatToParts(date)
      .map((part) => [part.type, part.value]),
  );
  return {
    minute: Number(parts.minute),
    hour: Number(parts.hour),
    day: Number(parts.day),
    month: Number(parts.month),
    weekday: ['Sun', 'Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat'].indexOf(parts.weekday),
  };
}

/** The first minute after `after` that the schedule names, or null within the next five years. */
function nextCronTime(fields, timeZone, after) {
  const [minutes, hours, days, months, weekdays] = fields;
  let candidate = new Date(Math.floor(after.getTime() / 60_000) * 60_000 + 60_000);
  const limit = after.getTime() + 5 * 366 * 86_400_000;
  while (candidate.getTime() < limit) {
    const wall = wallClock(candidate, timeZone);
    const dayMatches =
      days.any || weekdays.any
        ? days.allowed.has(wall.day) && weekdays.allowed.has(wall.weekday)
        : days.allowed.has(wall.day) || weekdays.allowed.has(wall.weekday);
    let skip;
    if (!months.allowed.has(wall.month) || !dayMatches) skip = (24 * 60 - wall.hour * 60 - wall.minute) * 60_000;
    else if (!hours.allowed.has(wall.hour)) skip = (60 - wall.minute) * 60_000;
    else if (!minutes.allowed.has(wall.minute)) skip = 60_000;
    else return candidate;
    candidate = new Date(candidate.getTime() + skip);
  }
  return null;
}

/** A UUID v7 (time-ordered), as the in-memory server makes thread ids. */
function uuid7() {
  const bytes = randomBytes(16);
  const now = BigInt(Date.now());
  for (let i = 0; i < 6; i += 1) bytes[i] = Number((now >> BigInt(8 * (5 - i))) & 0xffn);
  bytes[6] = (bytes[6] & 0x0f) | 0x70;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  const hex = bytes.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const isFinal = (status) => status !== 'pending' && status !== 'running';

/** Custom auth filters (`{key: value}`, `{key: {$eq}}`, `{key: {$contains}}`) as SQL on a jsonb column. */
function authFilterSql(column, filters, params) {
  if (filters == null) return 'true';
  const parts = [];
  for (const [key, value] of Object.entries(filters)) {
    if (value !== null && typeof value === 'object' && '$contains' in value) {
      const wanted = Array.isArray(value.$contains) ? value.$contains : [value.$contains];
      params.push(key, JSON.stringify(wanted));
      const field = `${column} -> $${params.length - 1}`;
      parts.push(`(jsonb_typeof(${field}) = 'array' and ${field} @> $${params.length}::jsonb)`);
    } else {
      const wanted = value !== null && typeof value === 'object' && '$eq' in value ? value.$eq : value;
      params.push(key, JSON.stringify(wanted));
      parts.push(`${column} -> $${params.length - 1} = $${params.length}::jsonb`);
    }
  }
  return parts.length > 0 ? parts.join(' and ') : 'true';
}

async function serve(instanceId, optionsText) {
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
    { getGraph, getAssistantId },
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

  // --- notifications: one listening connection, shared by everything in this instance ---------------
  const bus = new EventEmitter();
  bus.setMaxListeners(0);
  let listener = null;
  let stopping = false;
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
      if (!stopping) setTimeout(() => listen().catch(() => undefined), 1_000);
    });
    await client.connect();
    await client.query(`listen ${WAKE_CHANNEL}; listen ${EVENTS_CHANNEL}; listen ${CANCEL_CHANNEL}`);
    listener = client;
    bus.emit(WAKE_CHANNEL, '');
  }
  await listen();

  // --- the operations the server's routes and queue workers call ------------------------------------
  const local = new Map(); // run id -> { controller, threadId }: runs this instance executes
  const lostThreads = new Set(); // threads whose run this instance no longer owns (lease taken over)
  const rolledBack = new Set(); // threads whose last run was rolled back: their status comes from their state
  const endings = new Map(); // thread id -> run ids whose end is announced once the thread is updated

  let wakeups = 0;
  bus.on(WAKE_CHANNEL, () => {
    wakeups += 1;
  });
  // Runs with joiners here -> { events announced so far, joiners }: a joiner reads again when the count moved.
  const watched = new Map();
  bus.on(EVENTS_CHANNEL, (runId) => {
    const watch = watched.get(runId);
    if (watch) watch.events += 1;
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

  const assistantOf = (row) => ({
    assistant_id: row.assistant_id,
    graph_id: row.graph_id,
    name: row.name ?? row.graph_id,
    description: row.description ?? null,
    config: row.config ?? {},
    context: row.context ?? {},
    metadata: row.metadata ?? {},
    version: row.version,
    created_at: row.created_at,
    updated_at: row.updated_at,
  });
  const threadOf = (row) => ({
    thread_id: row.thread_id,
    created_at: row.created_at,
    updated_at: row.updated_at,
    metadata: row.metadata ?? {},
    config: row.config ?? {},
    status: row.status,
    values: row.values ?? undefined,
    interrupts: row.interrupts ?? undefined,
  });
  const runOf = (row) => ({
    run_id: row.run_id,
    thread_id: row.thread_id,
    assistant_id: row.assistant_id,
    created_at: row.created_at,
    updated_at: row.updated_at,
    status: row.status,
    metadata: row.metadata ?? {},
    kwargs: row.kwargs ?? {},
    multitask_strategy: row.multitask_strategy,
  });
  const notFound = (message) => new HTTPException(404, { message });

  const assistants = {
    async *search(query, auth) {
      const [filters] = await handleAuthEvent(auth, 'assistants:search', {
        graph_id: query.graph_id,
        metadata: query.metadata,
        limit: query.limit,
        offset: query.offset,
      });
      const params = [];
      const where = [authFilterSql('metadata', filters, params)];
      if (query.graph_id != null) where.push(`graph_id = $${params.push(query.graph_id)}`);
      if (query.name != null) where.push(`strpos(lower(name), lower($${params.push(query.name)})) > 0`);
      if (query.metadata != null) where.push(`metadata @> $${params.push(JSON.stringify(query.metadata))}::jsonb`);
      const sortBy = ['assistant_id', 'created_at', 'updated_at', 'name', 'graph_id'].includes(query.sort_by)
        ? query.sort_by
        : 'created_at';
      const order = query.sort_order === 'asc' ? 'asc' : 'desc';
      const { rows } = await pool.query(
        `select *, count(*) over () as total from ${SCHEMA}.assistants where ${where.join(' and ')}
         order by ${sortBy} ${order}, assistant_id limit $${params.push(query.limit)} offset $${params.push(query.offset)}`,
        params,
      );
      for (const row of rows) yield { assistant: assistantOf(row), total: Number(row.total) };
    },
    async get(assistantId, auth) {
      const [filters] = await handleAuthEvent(auth, 'assistants:read', { assistant_id: assistantId });
      const { rows } = await pool.query(`select * from ${SCHEMA}.assistants where assistant_id = $1`, [assistantId]);
      if (!rows[0] || !isAuthMatching(rows[0].metadata, filters)) throw notFound('Assistant not found');
      return assistantOf(rows[0]);
    },
    async put(assistantId, values, auth) {
      const [filters, mutable] = await handleAuthEvent(auth, 'assistants:create', {
        assistant_id: assistantId,
        config: values.config,
        context: values.context,
        graph_id: values.graph_id,
        metadata: values.metadata,
        if_exists: values.if_exists,
        name: values.name,
        description: values.description,
      });
      return transaction(async (client) => {
        const name = values.name || values.graph_id;
        const inserted = await client.query(
          `insert into ${SCHEMA}.assistants (assistant_id, graph_id, name, description, config, context, metadata, version)
           values ($1, $2, $3, $4, $5, $6, $7, 1) on conflict (assistant_id) do nothing returning *`,
          [
            assistantId,
            values.graph_id,
            name,
            values.description ?? null,
            json(values.config ?? {}),
            json(values.context ?? {}),
            json(mutable.metadata ?? {}),
          ],
        );
        if (inserted.rows[0]) {
          const row = inserted.rows[0];
          await client.query(
            `insert into ${SCHEMA}.assistant_versions (assistant_id, version, graph_id, name, description, config, context, metadata, created_at)
             values ($1, 1, $2, $3, $4, $5, $6, $7, $8)`,
            [
              assistantId,
              row.graph_id,
              row.name,
              row.description,
              json(row.config),
              json(row.context),
              json(row.metadata),
              row.created_at,
            ],
          );
          return assistantOf(row);
        }
        const { rows } = await client.query(`select * from ${SCHEMA}.assistants where assistant_id = $1`, [
          assistantId,
        ]);
        if (!isAuthMatching(rows[0]?.metadata, filters) || values.if_exists === 'raise')
          throw new HTTPException(409, { message: 'Assistant already exists' });
        return assistantOf(rows[0]);
      });
    },
    async patch(assistantId, values, auth) {
      const [filters, mutable] = await handleAuthEvent(auth, 'assistants:update', {
        assistant_id: assistantId,
        graph_id: values?.graph_id,
        config: values?.config,
        metadata: values?.metadata,
        name: values?.name,
        description: values?.description,
      });
      return transaction(async (client) => {
        const { rows } = await client.query(`select * from ${SCHEMA}.assistants where assistant_id = $1 for update`, [
          assistantId,
        ]);
        const current = rows[0];
        if (!current || !isAuthMatching(current.metadata, filters)) throw notFound('Assistant not found');
        const next = {
          graph_id: values?.graph_id ?? current.graph_id,
          config: values?.config ?? current.config,
          context: values?.context ?? current.context,
          name: values?.name ?? current.name,
          description: values?.description ?? current.description,
          metadata: mutable.metadata != null ? { ...current.metadata, ...mutable.metadata } : current.metadata,
        };
        const version = await client.query(
          `select coalesce(max(version), 0) + 1 as version from ${SCHEMA}.assistant_versions where assistant_id = $1`,
          [assistantId],
        );
        const params = [
          assistantId,
          next.graph_id,
          next.name,
          next.description,
          json(next.config),
          json(next.context),
          json(next.metadata),
          version.rows[0].version,
        ];
        await client.query(
          `insert into ${SCHEMA}.assistant_versions (assistant_id, graph_id, name, description, config, context, metadata, version)
           values ($1, $2, $3, $4, $5, $6, $7, $8)`,
          params,
        );
        const updated = await client.query(
          `update ${SCHEMA}.assistants set graph_id = $2, name = $3, description = $4, config = $5, context = $6,
             metadata = $7, version = $8, updated_at = now() where assistant_id = $1 returning *`,
          params,
        );
        return assistantOf(updated.rows[0]);
      });
    },
    async delete(assistantId, deleteThreads, auth) {
      const [filters] = await handleAuthEvent(auth, 'assistants:delete', { assistant_id: assistantId });
      return transaction(async (client) => {
        const { rows } = await client.query(`select * from ${SCHEMA}.assistants where assistant_id = $1 for update`, [
          assistantId,
        ]);
        if (!rows[0] || !isAuthMatching(rows[0].metadata, filters)) throw notFound('Assistant not found');
        await client.query(`delete from ${SCHEMA}.runs where assistant_id = $1`, [assistantId]);
        if (deleteThreads === true)
          await client.query(`delete from ${SCHEMA}.threads where metadata ->> 'assistant_id' = $1`, [assistantId]);
        await client.query(`delete from ${SCHEMA}.assistants where assistant_id = $1`, [assistantId]);
        return [assistantId];
      });
    },
    async setLatest(assistantId, version, auth) {
      const [filters] = await handleAuthEvent(auth, 'assistants:update', { assistant_id: assistantId, version });
      return transaction(async (client) => {
        const { rows } = await client.query(`select * from ${SCHEMA}.assistants where assistant_id = $1 for update`, [
          assistantId,
        ]);
        if (!rows[0] || !isAuthMatching(rows[0].metadata, filters)) throw notFound('Assistant not found');
        const updated = await client.query(
          `update ${SCHEMA}.assistants a set config = v.config, metadata = v.metadata, version = v.version,
             name = v.name, updated_at = now()
           from ${SCHEMA}.assistant_versions v
           where a.assistant_id = $1 and v.assistant_id = $1 and v.version = $2 returning a.*`,
          [assistantId, version],
        );
        if (!updated.rows[0]) throw notFound('Assistant version not found');
        return assistantOf(updated.rows[0]);
      });
    },
    async getVersions(assistantId, query, auth) {
      const [filters] = await handleAuthEvent(auth, 'assistants:read', { assistant_id: assistantId });
      const params = [assistantId];
      const where = ['assistant_id = $1', authFilterSql('metadata', filters, params)];
      if (query.metadata != null) where.push(`metadata @> $${params.push(JSON.stringify(query.metadata))}::jsonb`);
      const { rows } = await pool.query(
        `select * from ${SCHEMA}.assistant_versions where ${where.join(' and ')} order by version desc
         limit $${params.push(query.limit)} offset $${params.push(query.offset)}`,
        params,
      );
      return rows.map((row) => {
        const { updated_at: _ignored, ...version } = assistantOf(row);
        return version;
      });
    },
    async count(query, auth) {
      const [filters] = await handleAuthEvent(auth, 'assistants:search', {
        graph_id: query.graph_id,
        metadata: query.metadata,
        limit: 0,
        offset: 0,
      });
      const params = [];
      const where = [authFilterSql('metadata', filters, params)];
      if (query.graph_id != null) where.push(`graph_id = $${params.push(query.graph_id)}`);
      if (query.name != null) where.push(`strpos(lower(name), lower($${params.push(query.name)})) > 0`);
      if (query.metadata != null) where.push(`metadata @> $${params.push(JSON.stringify(query.metadata))}::jsonb`);
      const { rows } = await pool.query(
        `select count(*) from ${SCHEMA}.assistants where ${where.join(' and ')}`,
        params,
      );
      return Number(rows[0].count);
    },
  };

  /** WHERE of a thread search or count, as the in-memory server filters (a thread without values passes a values filter). */
  function threadWhere(query, filters, params) {
    const where = [authFilterSql('metadata', filters, params)];
    if (query.ids?.length > 0) where.push(`thread_id = any($${params.push(query.ids)}::uuid[])`);
    if (query.metadata != null) where.push(`metadata @> $${params.push(JSON.stringify(query.metadata))}::jsonb`);
    if (query.values != null)
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
         order by ${sortBy} ${order}, thread_id ${order} limit $${params.push(query.limit)} offset $${params.push(query.offset)}`,
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

  // --- run events --------------------------------------------------------------------------------
  async function appendEvent(runId, event, dataText, normalized = null) {
    await pool.query(
      `with appended as (insert into ${SCHEMA}.run_events (run_id, event, data, normalized) values ($1, $2, $3, $4) returning 1)
       select pg_notify('${EVENTS_CHANNEL}', $1::text) from appended`,
      [runId, event, dataText, normalized],
    );
    // Joiners here hear it at once; those of other instances through the NOTIFY.
    bus.emit(EVENTS_CHANNEL, runId);
  }

  const runs = {
    async *next() {
      if (stopping) {
        await sleep(1_000);
        return;
      }
      let claimed;
      try {
        const seen = wakeups;
        claimed = await claimRun();
        if (!claimed && seen === wakeups) {
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
      const assistantRow = (
        await pool.query(`select * from ${SCHEMA}.assistants where assistant_id = $1`, [assistantId])
      ).rows[0];
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
          `insert into ${SCHEMA}.runs (run_id, thread_id, assistant_id, metadata, status, kwargs, multitask_strategy, created_at)
           values ($1, $2, $3, $4, $5, $6, $7, now() + make_interval(secs => $8)) returning *`,
          [
            runId,
            threadId,
            assistantId,
            json(mergedMetadata),
            status,
            json(runKwargs),
            multitaskStrategy,
            afterSeconds,
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
      const params = [threadId];
      const where = ['r.thread_id = $1', authFilterSql('t.metadata', filters, params)];
      if (query?.status != null) where.push(`r.status = $${params.push(query.status)}`);
      if (query?.metadata != null) where.push(`r.metadata @> $${params.push(JSON.stringify(query.metadata))}::jsonb`);
      const { rows } = await pool.query(
        `select r.* from ${SCHEMA}.runs r join ${SCHEMA}.threads t using (thread_id) where ${where.join(' and ')}
         order by r.created_at desc limit $${params.push(query?.limit ?? 10)} offset $${params.push(query?.offset ?? 0)}`,
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
        // From the start, or after the event a resuming client names (Last-Event-ID).
        let after = Number.parseInt(lastEventId ?? '0', 10);
        if (!Number.isSafeInteger(after) || after < 0) after = 0;
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
              yield {
                id: String(row.seq),
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
            // Ended without an end marker (its instance announced nothing): drain what is left, then stop.
            if (isFinal(run.status)) {
              const rest = await pool.query(
                `select seq, event, data, normalized from ${SCHEMA}.run_events where run_id = $1 and seq > $2 and event <> $3 order by seq`,
                [runId, after, END_EVENT],
              );
              for (const row of rest.rows) yield { id: String(row.seq), event: row.event, data: JSON.parse(row.data) };
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

  /** Claims the oldest runnable pending run (none of its thread's runs running), with a lease. */
  async function claimRun() {
    // A stopping instance takes nothing more: what it gives back must not come back to it.
    if (stopping) return null;
    return transaction(async (client) => {
      const candidate = await client.query(
        `select r.run_id, r.thread_id from ${SCHEMA}.runs r join ${SCHEMA}.threads t on t.thread_id = r.thread_id
         where r.status = 'pending' and r.created_at <= now()
           and not exists (select 1 from ${SCHEMA}.runs x where x.thread_id = r.thread_id and x.status = 'running')
         order by r.created_at limit 1 for update of t, r skip locked`,
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
    const { rows } = await pool.query(
      `delete from ${SCHEMA}.threads t where t.updated_at < now() - $1::float8 * interval '1 minute'
         and not exists (select 1 from ${SCHEMA}.runs r where r.thread_id = t.thread_id and r.status in ('pending', 'running'))
       returning thread_id`,
      [threadTtl.minutes],
    );
    for (const { thread_id: threadId } of rows) await saver.deleteThread(threadId);
    if (rows.length > 0) logger.info('Threads past their TTL deleted', { count: rows.length });
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
    const assistantId = typeof body.assistant_id === 'string' ? getAssistantId(body.assistant_id) : null;
    if (!assistantId || !/^[0-9a-f-]{36}$/i.test(assistantId)) throw invalid('assistant_id is required');
    const [filters, mutable] = await handleAuthEvent(auth, 'crons:create', {
      thread_id: threadId,
      assistant_id: assistantId,
      schedule: body.schedule,
      metadata: body.metadata ?? {},
    });
    const next = checkSchedule(body.schedule, body.timezone);
    const assistantRow = (await pool.query(`select 1 from ${SCHEMA}.assistants where assistant_id = $1`, [assistantId]))
      .rows[0];
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
         enabled, on_run_completed, end_time, next_run_date)
       values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) returning *`,
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
    if (query.assistant_id != null)
      where.push(`assistant_id = $${params.push(getAssistantId(query.assistant_id))}::uuid`);
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

  const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
  async function jsonBody(c) {
    try {
      return await c.req.json();
    } catch {
      throw invalid('the body must be JSON');
    }
  }
  function uuidParam(c, name) {
    const value = c.req.param(name);
    if (!UUID.test(value)) throw invalid(`${name} must be a UUID`);
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
        `select * from ${SCHEMA}.crons where enabled and next_run_date <= now() order by next_run_date
         limit 20 for update skip locked`,
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
      if (!stopping) fireDueCrons().catch((error) => logger.warn('Could not fire crons', { error: error.message }));
    },
    5_000 + Math.random() * 1_000,
  );

  const ops = {
    assistants,
    threads,
    runs,
    async truncate() {
      // `POST /internal/truncate` is open to whoever reaches the app's URL: it never wipes a deployment.
      logger.warn('Refused to truncate the LangGraph state: it lives in the deployment database');
    },
  };

  // The cron routes come in as the server's custom `http` app (mounted before its own routes, after
  // custom auth), from a module written for this instance: the user's own app, if any, is mounted in it.
  const serverOptions = options.http?.disable_runs ? options : { ...options, http: await cronHttpApp() };
  const { host, cleanup } = await startServer(serverOptions, { ops });
  logger.info(`Server running at ${host}, state in PostgreSQL (instance ${instanceId})`);

  let shuttingDown = false;
  async function shutdown() {
    if (shuttingDown) return;
    shuttingDown = true;
    stopping = true;
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
    clearInterval(leaseTimer);
    clearInterval(cronTimer);
    if (threadTimer) clearInterval(threadTimer);
    await cleanup().catch(() => undefined);
    await listener?.end().catch(() => undefined);
    await postgresStore.stop?.().catch(() => undefined);
    await pool.end().catch(() => undefined);
    process.exit(0);
  }
  for (const signal of ['SIGTERM', 'SIGINT']) process.on(signal, () => void shutdown());

  /** The `http` option that mounts the cron routes (and the project's own `http.app` after them). */
  async function cronHttpApp() {
    globalThis[Symbol.for('slipway.langgraph.cronRoutes')] = registerCronRoutes;
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

  /** Deletes the checkpoints (and their pending writes) one run wrote to a thread. */
  async function deleteRunCheckpoints(client, threadId, runId) {
    await client.query(
      `with gone as (
         delete from ${SCHEMA}.checkpoints where thread_id = $1 and metadata ->> 'run_id' = $2
         returning checkpoint_ns, checkpoint_id)
       delete from ${SCHEMA}.checkpoint_writes w using gone
       where w.thread_id = $1 and w.checkpoint_ns = gone.checkpoint_ns and w.checkpoint_id = gone.checkpoint_id`,
      [threadId, runId],
    );
  }

  /** Copies a thread's checkpoints, blobs and writes to another thread id (threads.copy). */
  async function copyCheckpoints(client, from, to) {
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
  function installCheckpointer(target, postgresSaver, connections) {
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
}

/**
 * A TTL of langgraph.json (`{"strategy": "delete", "default_ttl": minutes, "sweep_interval_minutes":
 * minutes}`, as LangChain's servers read it), or null when none or unusable (said in the log).
 */
function ttlOf(ttl, name, logger) {
  if (ttl == null) return null;
  const minutes = Number(ttl.default_ttl);
  const sweepMinutes = ttl.sweep_interval_minutes == null ? 60 : Number(ttl.sweep_interval_minutes);
  if ((ttl.strategy ?? 'delete') !== 'delete' || !(minutes > 0) || !(sweepMinutes > 0)) {
    logger.warn(`${name} ignored: it needs strategy "delete", a positive default_ttl and sweep_interval_minutes`, {
      ttl,
    });
    return null;
  }
  return { minutes, sweepMinutes };
}

/** Writes the TTLs this instance applies (null: none, or ignored), as langgraph.json names them. */
async function recordTtls(pool, threadTtl, storeTtl, refreshOnRead) {
  const ttl = {
    checkpointer: threadTtl
      ? { strategy: 'delete', default_ttl: threadTtl.minutes, sweep_interval_minutes: threadTtl.sweepMinutes }
      : null,
    store: storeTtl
      ? {
          default_ttl: storeTtl.minutes,
          refresh_on_read: refreshOnRead !== false,
          sweep_interval_minutes: storeTtl.sweepMinutes,
        }
      : null,
  };
  await pool.query(
    `insert into ${SCHEMA}.settings (name, value) values ('ttl', $1)
     on conflict (name) do update set value = excluded.value, updated_at = now()`,
    [JSON.stringify(ttl)],
  );
}

/** The store the server's routes and graphs share, kept in PostgreSQL by PostgresStore. */
function installStore(target, postgresStore) {
  Object.assign(target, {
    initialize: async () => ({ flush: async () => undefined }),
    clear: async () => undefined,
    batch: (operations) => postgresStore.batch(operations),
    get: (...args) => postgresStore.get(...args),
    search: (...args) => postgresStore.search(...args),
    put: (...args) => postgresStore.put(...args),
    delete: (...args) => postgresStore.delete(...args),
    listNamespaces: (...args) => postgresStore.listNamespaces(...args),
    toJSON: () => '[PostgresStore]',
  });
}

/** Makes or updates the schema: ours, the checkpointer's and the store's, one instance at a time. */
async function migrate(pool, saver, postgresStore) {
  const client = await pool.connect();
  try {
    await client.query('select pg_advisory_lock($1)', [SCHEMA_LOCK]);
    await client.query(`create schema if not exists ${SCHEMA}`);
    await client.query(`create table if not exists ${SCHEMA}.schema_version (version integer not null)`);
    const { rows } = await client.query(`select max(version) as version from ${SCHEMA}.schema_version`);
    const done = rows[0]?.version ?? 0;
    for (let version = done + 1; version <= MIGRATIONS.length; version += 1) {
      await client.query('begin');
      await client.query(MIGRATIONS[version - 1]);
      await client.query(`insert into ${SCHEMA}.schema_version (version) values ($1)`, [version]);
      await client.query('commit');
    }
    await saver.setup();
    await postgresStore.setup();
  } finally {
    await client.query('select pg_advisory_unlock($1)', [SCHEMA_LOCK]).catch(() => undefined);
    client.release();
  }
}

// ---------------------------------------------------------------------------------------------------

const [mode, ...rest] = process.argv.slice(2);
if (mode === 'serve') {
  const [instanceId, optionsText] = rest;
  try {
    await serve(instanceId, optionsText);
  } catch (error) {
    // A graph that fails to load, a database out of reach: the process ends, as the in-memory server
    // does, so the supervisor and the health check see it at once (the pool and timers would keep it).
    console.error(error);
    process.exit(1);
  }
} else if ((mode === 'js' || mode === 'python') && rest[0]) {
  launch(mode, rest[0]);
} else {
  console.error('usage: node langgraph-server.mjs js|python <path of langgraph.json>');
  process.exit(2);
}
