/**
 * An example agent application for Slipway: plain `node:http`, no dependencies.
 *
 * It uses everything the platform gives a running app (docs/app-config.md, "The environment of a
 * running app"): where to listen (PORT, HOST), its own database (DATABASE_URL), which revision and
 * deployment it is and where its traces go (SLIPWAY_*), and how to reach Slipway for OAuth tokens
 * (SLIPWAY_API_URL, SLIPWAY_AGENT_CREDENTIAL). GREETING is a secret a user set on the deployment;
 * STREAM_TOKENS, STREAM_INTERVAL_MS and NOTES_LIMIT come from slipway.json's `env`.
 *
 *   GET  /healthz   200 once the database is ready (what slipway.json's health_check_path points at)
 *   GET  /          who am I: greeting, revision, deployment, tracing project
 *   POST /notes     {"text": "..."} stored in the app's database
 *   GET  /notes     the stored notes, newest first
 *   GET  /stream    Server-Sent Events: a few `token` events, then `done`, like a streaming LLM answer
 *   GET  /token?agent_id=..&connection_id=..   fetch an OAuth access token of a connection from Slipway
 */
import http from 'node:http';
import { connect } from './pg-lite.js';

const env = process.env;
const PORT = Number(env.PORT ?? 3000);
const HOST = env.HOST ?? '127.0.0.1';
const DATABASE_URL = env.DATABASE_URL ?? '';
const GREETING = env.GREETING || 'Hello from a Slipway agent';
const STREAM_TOKENS = positive(env.STREAM_TOKENS, 5);
const STREAM_INTERVAL_MS = positive(env.STREAM_INTERVAL_MS, 50);
const NOTES_LIMIT = positive(env.NOTES_LIMIT, 100);
const MAX_BODY_BYTES = 64 * 1024;
// Below Slipway's default drain time (10 s), so the app, not the platform, decides how it ends.
const SHUTDOWN_GRACE_MS = 8_000;

function positive(value, fallback) {
  const n = Number(value);
  return Number.isInteger(n) && n > 0 ? n : fallback;
}

function log(line) {
  process.stdout.write(`${new Date().toISOString()} ${line}\n`);
}

// ---------------------------------------------------------------------------------------------------
// The database: connect (and reconnect) in the background; /healthz says whether it is ready.

let db = null;
let shuttingDown = false;

async function openDatabase() {
  for (let attempt = 1; !shuttingDown; attempt++) {
    try {
      const client = await connect(DATABASE_URL);
      await client.query(`create table if not exists notes (
        id bigserial primary key,
        text text not null,
        created_at timestamptz not null default now()
      )`);
      client.on('close', (error) => {
        db = null;
        if (!shuttingDown) {
          log(`database connection lost (${error?.message ?? 'closed'}); reconnecting`);
          openDatabase();
        }
      });
      db = client;
      log(`database ready (auth: ${client.authMethod})`);
      return;
    } catch (error) {
      // The database may start after us, or a password may be rotating: keep trying, a bit slower each time.
      log(`database not ready (attempt ${attempt}): ${error.message}`);
      await new Promise((resolve) => setTimeout(resolve, Math.min(5_000, 250 * attempt)));
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// Small HTTP helpers.

function sendJson(res, status, body) {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(text),
  });
  res.end(text);
}

class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function readJson(req) {
  const chunks = [];
  let size = 0;
  for await (const chunk of req) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) throw new HttpError(413, `body larger than ${MAX_BODY_BYTES} bytes`);
    chunks.push(chunk);
  }
  try {
    return JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch {
    throw new HttpError(400, 'body is not valid JSON');
  }
}

function database() {
  if (!DATABASE_URL) throw new HttpError(503, 'this deployment has no database (database: false in slipway.json)');
  if (!db) throw new HttpError(503, 'the database is not ready yet');
  return db;
}

// ---------------------------------------------------------------------------------------------------
// Handlers.

function healthz(req, res) {
  const ready = !DATABASE_URL || db !== null;
  sendJson(res, ready ? 200 : 503, { status: ready ? 'ok' : 'starting' });
}

function whoami(req, res) {
  sendJson(res, 200, {
    greeting: GREETING,
    revision_id: env.SLIPWAY_REVISION_ID ?? null,
    deployment_id: env.SLIPWAY_DEPLOYMENT_ID ?? null,
    tracing_project_id: env.SLIPWAY_TRACING_PROJECT_ID ?? null,
    tracing_project_name: env.SLIPWAY_TRACING_PROJECT_NAME ?? null,
  });
}

// to_json(...) #>> '{}' renders the timestamp as ISO 8601, whatever the server's DateStyle.
const NOTE_COLUMNS = `id, text, to_json(created_at) #>> '{}' as created_at`;
const note = (row) => ({ id: Number(row.id), text: row.text, created_at: row.created_at });

async function createNote(req, res) {
  const body = await readJson(req);
  const text = typeof body?.text === 'string' ? body.text.trim() : '';
  if (text === '' || text.length > 10_000) throw new HttpError(400, 'send {"text": "..."} with 1 to 10000 characters');
  const { rows } = await database().query(`insert into notes (text) values ($1) returning ${NOTE_COLUMNS}`, [text]);
  sendJson(res, 201, note(rows[0]));
}

async function listNotes(req, res) {
  const { rows } = await database().query(`select ${NOTE_COLUMNS} from notes order by id desc limit $1`, [NOTES_LIMIT]);
  sendJson(res, 200, { notes: rows.map(note) });
}

const WORDS = ['Agents', 'ship', 'like', 'services', 'on', 'Slipway', 'with', 'secrets', 'and', 'rollbacks.'];

/** Server-Sent Events: each event is written (and so sent) the moment it is ready, as an LLM stream would be. */
function stream(req, res) {
  res.writeHead(200, {
    'content-type': 'text/event-stream; charset=utf-8',
    'cache-control': 'no-cache',
    // Tells buffering proxies (nginx and the like) to pass each event on at once.
    'x-accel-buffering': 'no',
  });
  res.flushHeaders();
  let sent = 0;
  const timer = setInterval(() => {
    if (sent < STREAM_TOKENS) {
      res.write(`event: token\ndata: ${JSON.stringify({ index: sent, text: WORDS[sent % WORDS.length] })}\n\n`);
      sent += 1;
      return;
    }
    clearInterval(timer);
    res.end(`event: done\ndata: ${JSON.stringify({ tokens: sent })}\n\n`);
  }, STREAM_INTERVAL_MS);
  // The client went away: stop producing.
  res.on('close', () => clearInterval(timer));
}

/**
 * Asks Slipway for a fresh access token of one of the agent's connections (docs/oauth.md, "How a
 * deployed agent gets a token"), and answers whether it got one. The token itself stays here: only a
 * few characters are shown, enough to tell two tokens apart.
 */
async function token(req, res, url) {
  const agentId = url.searchParams.get('agent_id');
  const connectionId = url.searchParams.get('connection_id');
  if (!agentId || !connectionId) throw new HttpError(400, 'give agent_id and connection_id in the query');
  const credential = env.SLIPWAY_AGENT_CREDENTIAL;
  const api = env.SLIPWAY_API_URL;
  if (!credential || !api) {
    return sendJson(res, 503, { got_token: false, error: 'SLIPWAY_AGENT_CREDENTIAL or SLIPWAY_API_URL is not set' });
  }
  const endpoint = `${api.replace(/\/+$/, '')}/v2/auth/agents/${encodeURIComponent(agentId)}/connections/${encodeURIComponent(connectionId)}/token`;
  let answer;
  try {
    answer = await fetch(endpoint, {
      method: 'POST',
      headers: { authorization: `Bearer ${credential}` },
      signal: AbortSignal.timeout(10_000),
    });
  } catch (error) {
    return sendJson(res, 502, { got_token: false, error: `Slipway could not be reached: ${error.message}` });
  }
  const body = await answer.json().catch(() => ({}));
  if (!answer.ok || typeof body.access_token !== 'string') {
    // 401: bad credential, 403: not for this agent, 404: no such connection, 409: a person must authorize again.
    return sendJson(res, 502, { got_token: false, slipway_status: answer.status, detail: body.detail ?? null });
  }
  sendJson(res, 200, {
    got_token: true,
    token_preview: `${body.access_token.slice(0, 4)}…`,
    token_type: body.token_type ?? null,
    expires_at: body.expires_at ?? null,
    provider_id: body.provider_id ?? null,
    provider_account_label: body.provider_account_label ?? null,
  });
}

const ROUTES = {
  'GET /healthz': healthz,
  'GET /': whoami,
  'POST /notes': createNote,
  'GET /notes': listNotes,
  'GET /stream': stream,
  'GET /token': token,
};

// ---------------------------------------------------------------------------------------------------
// The server.

const server = http.createServer(async (req, res) => {
  const started = performance.now();
  const url = new URL(req.url ?? '/', 'http://app');
  // One line per request; the path only, as query strings may carry things that do not belong in logs.
  res.on('close', () => {
    log(`${req.method} ${url.pathname} ${res.statusCode} ${Math.round(performance.now() - started)}ms`);
    // During shutdown, a connection whose last response just ended must not linger as keep-alive.
    if (shuttingDown) setImmediate(() => server.closeIdleConnections());
  });
  // A request on a kept-alive connection during shutdown is served, but the connection ends after it.
  if (shuttingDown) res.setHeader('connection', 'close');
  const handler = ROUTES[`${req.method} ${url.pathname}`];
  try {
    if (handler) await handler(req, res, url);
    else if (Object.keys(ROUTES).some((route) => route.endsWith(` ${url.pathname}`)))
      throw new HttpError(405, `${req.method} is not allowed on ${url.pathname}`);
    else throw new HttpError(404, `no route ${url.pathname}`);
  } catch (error) {
    if (res.headersSent) return res.destroy();
    if (error instanceof HttpError) return sendJson(res, error.status, { error: error.message });
    log(`error in ${req.method} ${url.pathname}: ${error.stack ?? error}`);
    sendJson(res, 500, { error: 'internal error' });
  }
});

/**
 * SIGTERM (what Slipway sends when a revision is replaced or stopped): stop accepting connections, let
 * the requests in flight finish (a stream included), close the database, exit 0. A request that does
 * not finish within the grace time is cut, and the exit code says so.
 */
async function shutdown(signal) {
  if (shuttingDown) return;
  shuttingDown = true;
  log(`${signal}: finishing requests in flight`);
  setTimeout(() => {
    log('requests still running after the grace time; exiting anyway');
    process.exit(1);
  }, SHUTDOWN_GRACE_MS).unref();
  const closed = new Promise((resolve) => server.close(resolve));
  // Idle kept-alive connections would hold close() open; busy ones end after their response.
  server.closeIdleConnections();
  await closed;
  await db?.end().catch(() => undefined);
  log('stopped');
  process.exit(0);
}

process.on('SIGTERM', () => shutdown('SIGTERM'));
process.on('SIGINT', () => shutdown('SIGINT'));

server.listen(PORT, HOST, () => {
  log(
    `listening on http://${HOST.includes(':') ? `[${HOST}]` : HOST}:${PORT} (revision ${env.SLIPWAY_REVISION_ID ?? 'unknown'})`,
  );
  if (DATABASE_URL) openDatabase();
  else log('no DATABASE_URL: running without a database');
});
