/**
 * The example agent app (examples/agent-app), run as the data plane runs it: `node server.js` in its
 * directory with the platform's environment, against its own database (a role with a password and a
 * database it owns, on the test server) and a stand-in for Slipway's token endpoint.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import fs from 'node:fs/promises';
import http from 'node:http';
import net from 'node:net';
import { after, before, describe } from 'node:test';
import { fileURLToPath } from 'node:url';
import { withClient } from '../../src/db/admin-client.ts';
import { eventually } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';

const APP_DIR = fileURLToPath(new URL('../../examples/agent-app/', import.meta.url));

function adminUrl(): string {
  const url = process.env.SLIPWAY_TEST_ADMIN_URL;
  if (!url) throw new Error('Run tests with `npm test` (it prepares the test database).');
  return url;
}

async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

interface RunningApp {
  base: string;
  child: ChildProcess;
  /** Everything the app wrote to stdout so far. */
  output(): string;
  exited: Promise<number | null>;
}

/** Starts `node server.js` with exactly `env` (and PATH), and waits until /healthz answers 200. */
async function startApp(env: Record<string, string>): Promise<RunningApp> {
  const port = await freePort();
  const child = spawn(process.execPath, ['server.js'], {
    cwd: APP_DIR,
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', PORT: String(port), HOST: '127.0.0.1', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const base = `http://127.0.0.1:${port}`;
  try {
    await eventually(
      'the app to be healthy',
      async () => ((await fetch(`${base}/healthz`)).status === 200 ? true : null),
      { retryErrors: true },
    );
  } catch (error) {
    child.kill('SIGKILL');
    throw new Error(`${(error as Error).message}\nstdout:\n${stdout}\nstderr:\n${stderr}`, { cause: error });
  }
  return { base, child, output: () => stdout, exited };
}

async function stop(app: RunningApp | undefined): Promise<void> {
  if (app && app.child.exitCode === null && app.child.signalCode === null) {
    app.child.kill('SIGKILL');
    await app.exited;
  }
}

interface SseEvent {
  event: string;
  data: string;
  /** Which chunk of the response held the event (0 for the first). */
  chunk: number;
}

/** Reads /stream as it arrives; `onEvent` sees each event the moment it is complete. */
function readStream(
  base: string,
  onEvent: (e: SseEvent) => void = () => undefined,
): Promise<{ contentType: string | undefined; events: SseEvent[]; chunks: number }> {
  return new Promise((resolve, reject) => {
    const events: SseEvent[] = [];
    http
      .get(`${base}/stream`, { agent: false }, (res) => {
        let pending = '';
        let chunks = 0;
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          const at = chunks++;
          pending += chunk;
          let end: number;
          while ((end = pending.indexOf('\n\n')) >= 0) {
            const block = pending.slice(0, end);
            pending = pending.slice(end + 2);
            const field = (name: string) =>
              block
                .split('\n')
                .find((l) => l.startsWith(`${name}: `))
                ?.slice(name.length + 2) ?? '';
            const event = { event: field('event'), data: field('data'), chunk: at };
            events.push(event);
            onEvent(event);
          }
        });
        res.on('end', () => resolve({ contentType: res.headers['content-type'], events, chunks }));
        res.on('error', reject);
      })
      .on('error', reject);
  });
}

/** A stand-in for Slipway's token endpoint (docs/oauth.md): POST .../connections/{id}/token with the agent credential. */
const CREDENTIAL = `slwa_${randomBytes(16).toString('hex')}`;
const ACCESS_TOKEN = `gho_${randomBytes(20).toString('hex')}`;
const CONNECTION_ID = randomUUID();

function fakeSlipway(): Promise<{
  url: string;
  requests: { method: string; url: string; authorization: string | undefined }[];
  close(): Promise<void>;
}> {
  const requests: { method: string; url: string; authorization: string | undefined }[] = [];
  const server = http.createServer((req, res) => {
    requests.push({ method: req.method ?? '', url: req.url ?? '', authorization: req.headers.authorization });
    const match = /^\/v2\/auth\/agents\/([^/]+)\/connections\/([^/]+)\/token$/.exec(req.url ?? '');
    const reply = (status: number, body: unknown) =>
      res
        .writeHead(status, { 'content-type': 'application/json', 'cache-control': 'no-store' })
        .end(JSON.stringify(body));
    if (req.method !== 'POST' || !match) return reply(404, { detail: 'Not Found', code: 'route_not_found' });
    if (req.headers.authorization !== `Bearer ${CREDENTIAL}`)
      return reply(401, { detail: 'Invalid agent credential.', code: 'unauthenticated' });
    if (match[2] !== CONNECTION_ID)
      return reply(404, { detail: `Agent connection ID ${match[2]} not found.`, code: 'not_found' });
    reply(200, {
      access_token: ACCESS_TOKEN,
      token_type: 'bearer',
      expires_at: new Date(Date.now() + 3600_000).toISOString(),
      scopes: ['repo'],
      oauth_token_id: randomUUID(),
      connection_id: CONNECTION_ID,
      provider_id: 'github',
      provider_account_label: 'alice@acme.example',
    });
  });
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      resolve({
        url: `http://127.0.0.1:${port}`,
        requests,
        close: () => new Promise((done) => server.close(() => done())),
      });
    }),
  );
}

async function json<T>(response: Response): Promise<T> {
  return (await response.json()) as T;
}

interface Note {
  id: number;
  text: string;
  created_at: string;
}

describe('the example agent app, with its own database', { timeout: 120_000 }, () => {
  const name = `agent_app_${randomBytes(4).toString('hex')}`;
  const password = randomBytes(12).toString('hex');
  const deploymentId = randomUUID();
  const revisionId = randomUUID();
  const tracingProjectId = randomUUID();
  let env: Record<string, string>;
  let slipway: Awaited<ReturnType<typeof fakeSlipway>>;
  let app: RunningApp | undefined;
  let restarted: RunningApp | undefined;

  before(async () => {
    // What the data plane provisions: a role with a password, owning a database of its own.
    await withClient(adminUrl(), async (c) => {
      await c.query(`create role ${name} login password '${password}'`);
      await c.query(`create database ${name} owner ${name}`);
    });
    const databaseUrl = new URL(adminUrl());
    databaseUrl.username = name;
    databaseUrl.password = password;
    databaseUrl.pathname = `/${name}`;
    slipway = await fakeSlipway();
    const appConfig = JSON.parse(await fs.readFile(new URL('slipway.json', `file://${APP_DIR}`), 'utf8')) as {
      env: Record<string, string>;
    };
    env = {
      ...appConfig.env,
      DATABASE_URL: databaseUrl.toString(),
      SLIPWAY_DEPLOYMENT_ID: deploymentId,
      SLIPWAY_REVISION_ID: revisionId,
      SLIPWAY_TRACING_PROJECT_ID: tracingProjectId,
      SLIPWAY_TRACING_PROJECT_NAME: 'support-agent',
      SLIPWAY_API_URL: slipway.url,
      SLIPWAY_AGENT_CREDENTIAL: CREDENTIAL,
      GREETING: 'Hello from the test',
    };
    app = await startApp(env);
  });

  after(async () => {
    await stop(app);
    await stop(restarted);
    await slipway?.close();
    await withClient(adminUrl(), async (c) => {
      await c.query(`drop database if exists ${name} with (force)`);
      await c.query(`drop role if exists ${name}`);
    });
  });

  test('it is healthy once its database is ready, and says which revision and deployment it is', async (t) => {
    const auth = /database ready \(auth: ([a-z0-9-]+)\)/.exec(app!.output());
    assert.ok(auth, app!.output());
    // scram-sha-256 on the embedded server (and Slipway's); a development server may trust 127.0.0.1.
    t.diagnostic(`the app logged in to its database with ${auth[1]}`);
    const health = await fetch(`${app!.base}/healthz`);
    assert.equal(health.status, 200);
    const res = await fetch(`${app!.base}/`);
    assert.equal(res.status, 200);
    assert.deepEqual(await json(res), {
      greeting: 'Hello from the test',
      revision_id: revisionId,
      deployment_id: deploymentId,
      tracing_project_id: tracingProjectId,
      tracing_project_name: 'support-agent',
    });
  });

  test('notes are stored in its database and listed newest first', async () => {
    const post = (body: string) =>
      fetch(`${app!.base}/notes`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    const first = await post(JSON.stringify({ text: 'remember the milk' }));
    assert.equal(first.status, 201);
    const created = await json<Note>(first);
    assert.equal(created.text, 'remember the milk');
    assert.ok(!Number.isNaN(Date.parse(created.created_at)), created.created_at);
    // Quotes and the like are data, never SQL.
    assert.equal((await post(JSON.stringify({ text: "it's'); drop table notes; --" }))).status, 201);

    const list = await json<{ notes: Note[] }>(await fetch(`${app!.base}/notes`));
    assert.deepEqual(
      list.notes.map((n) => n.text),
      ["it's'); drop table notes; --", 'remember the milk'],
    );
    const rows = await withClient(env.DATABASE_URL!, (c) =>
      c.query<{ text: string }>('select text from notes order by id'),
    );
    assert.deepEqual(
      rows.rows.map((r) => r.text),
      ['remember the milk', "it's'); drop table notes; --"],
    );

    assert.equal((await post('{"text": ""}')).status, 400);
    assert.equal((await post('not json')).status, 400);
  });

  test('/stream sends its token events one at a time, then done', async () => {
    const { contentType, events } = await readStream(app!.base);
    assert.match(contentType ?? '', /^text\/event-stream/);
    assert.deepEqual(
      events.map((e) => e.event),
      ['token', 'token', 'token', 'token', 'token', 'done'],
    );
    assert.deepEqual(JSON.parse(events[0]!.data), { index: 0, text: 'Agents' });
    // Sent ~50 ms apart, each in a chunk of its own: the first token arrives before the last one, not all
    // at once when the stream ends (what arrived in which order, not how long it took).
    const tokens = events.filter((e) => e.event === 'token');
    const chunks = events.map((e) => e.chunk);
    assert.ok(tokens[0]!.chunk < tokens[4]!.chunk, `the tokens came in chunks ${chunks.join(', ')}`);
  });

  test('/token gets a connection token from Slipway with the agent credential, without showing it', async () => {
    const got = await fetch(`${app!.base}/token?agent_id=support-bot&connection_id=${CONNECTION_ID}`);
    const text = await got.text();
    assert.equal(got.status, 200, text);
    const body = JSON.parse(text) as { got_token: boolean; provider_id: string };
    assert.equal(body.got_token, true);
    assert.equal(body.provider_id, 'github');
    assert.ok(!text.includes(ACCESS_TOKEN), 'the access token must not be echoed');
    assert.ok(!text.includes(CREDENTIAL), 'the credential must not be echoed');
    const call = slipway.requests.at(-1)!;
    assert.equal(call.method, 'POST');
    assert.equal(call.url, `/v2/auth/agents/support-bot/connections/${CONNECTION_ID}/token`);
    assert.equal(call.authorization, `Bearer ${CREDENTIAL}`);

    const other = randomUUID();
    const missing = await fetch(`${app!.base}/token?agent_id=support-bot&connection_id=${other}`);
    assert.equal(missing.status, 502);
    assert.deepEqual(await json(missing), {
      got_token: false,
      slipway_status: 404,
      detail: `Agent connection ID ${other} not found.`,
    });
    assert.equal((await fetch(`${app!.base}/token?agent_id=support-bot`)).status, 400);
    assert.ok(
      !app!.output().includes(ACCESS_TOKEN) && !app!.output().includes(CREDENTIAL),
      'secrets must stay out of the log',
    );
  });

  test('SIGTERM: a stream in flight finishes, new connections are refused, and it exits 0', async () => {
    const running = app!;
    let signalled = false;
    const streamed = readStream(running.base, () => {
      if (!signalled) {
        signalled = true;
        running.child.kill('SIGTERM');
      }
    });
    await eventually(
      'the app to begin shutting down',
      async () => (running.output().includes('SIGTERM') ? true : null),
      { retryErrors: true },
    );
    const refused = await new Promise<string>((resolve) => {
      http
        .get(`${running.base}/healthz`, { agent: false }, (res) => resolve(`answered ${res.statusCode}`))
        .on('error', (error: NodeJS.ErrnoException) => resolve(error.code ?? error.message));
    });
    // Refused; or reset, when it reached the kernel's queue of the listening socket in the moment before
    // the app closed it (a busy host can pause the app between its log line and the close): never served.
    assert.ok(['ECONNREFUSED', 'ECONNRESET'].includes(refused), `a new connection was ${refused}`);
    const { events } = await streamed;
    assert.equal(events.at(-1)?.event, 'done');
    assert.equal(events.filter((e) => e.event === 'token').length, 5);
    assert.equal(await running.exited, 0);
    // One log line per request, the stream included.
    assert.match(running.output(), /POST \/notes 201 \d+ms/);
    assert.match(running.output(), /GET \/stream 200 \d+ms\n[^]*stopped/);
  });

  test('notes survive a restart (a new revision on the same database)', async () => {
    restarted = await startApp({ ...env, SLIPWAY_REVISION_ID: randomUUID() });
    const list = await json<{ notes: Note[] }>(await fetch(`${restarted.base}/notes`));
    assert.deepEqual(list.notes.map((n) => n.text).sort(), ["it's'); drop table notes; --", 'remember the milk']);
    restarted.child.kill('SIGTERM');
    assert.equal(await restarted.exited, 0);
  });
});

describe('the example agent app without a database or a GREETING', { timeout: 60_000 }, () => {
  let app: RunningApp | undefined;
  before(async () => {
    app = await startApp({ SLIPWAY_REVISION_ID: 'r1', SLIPWAY_DEPLOYMENT_ID: 'd1', SLIPWAY_TRACING_PROJECT_NAME: 'p' });
  });
  after(() => stop(app));

  test('it is healthy at once, greets with its default, and says notes need a database', async () => {
    const body = await json<{ greeting: string; revision_id: string }>(await fetch(`${app!.base}/`));
    assert.equal(body.greeting, 'Hello from a Slipway agent');
    assert.equal(body.revision_id, 'r1');
    const notes = await fetch(`${app!.base}/notes`);
    assert.equal(notes.status, 503);
    assert.match((await json<{ error: string }>(notes)).error, /no database/);
  });
});

test("pg-lite's SCRAM-SHA-256 matches the exchange in RFC 7677", async () => {
  interface Scram {
    clientFirst: string;
    clientFinal(serverFirst: string): Promise<string>;
    verifyServerFinal(serverFinal: string): void;
  }
  const pgLite = (await import(new URL('pg-lite.js', `file://${APP_DIR}`).href)) as {
    scramSession(password: string, options: { user: string; nonce: string }): Scram;
  };
  const scram = pgLite.scramSession('pencil', { user: 'user', nonce: 'rOprNGfwEbeRWgbNEkqO' });
  assert.equal(scram.clientFirst, 'n,,n=user,r=rOprNGfwEbeRWgbNEkqO');
  const final = await scram.clientFinal(
    'r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096',
  );
  assert.equal(
    final,
    'c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=',
  );
  scram.verifyServerFinal('v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=');
  assert.throws(() => scram.verifyServerFinal('v=AAAArriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4='), /could not prove/);
});
