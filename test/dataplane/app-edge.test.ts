/**
 * The app edge (src/dataplane/app-edge.ts) end to end over real sockets, every test against both edges:
 * HAProxy started and supervised by the service, and the built-in Node proxy. Plain Node HTTP servers on
 * port 0 stand in for app instances. Requests are sent with node:http so the Host header can name an app
 * (fetch ignores a Host header).
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import http, { type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import type { Duplex } from 'node:stream';
import { after, describe } from 'node:test';
import { processAlive } from '../../src/db/embedded-postgres.ts';
import { startAppEdge, type AppEdge } from '../../src/dataplane/app-edge.ts';
import type { EdgeAppStats } from '../../src/dataplane/edge-stats.ts';
import { createLogger } from '../../src/logger.ts';
import { eventually, pause } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';

/** SCHED_OTHER, the ordinary CPU class (sched(7)). */
const SCHED_OTHER = 0;
/** The scheduling policy and nice value of a thread, from /proc (fields 41 and 19 of its stat). */
async function scheduling(pid: number, tid: number): Promise<{ policy: number; nice: number }> {
  const stat = await fs.readFile(`/proc/${pid}/task/${tid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return { policy: Number(fields[38]), nice: Number(fields[16]) };
}

const WS_GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11';
const HAPROXY = '/usr/sbin/haproxy';
const KINDS = ['haproxy', 'builtin'] as const;
type Kind = (typeof KINDS)[number];

interface Deferred<T = void> {
  promise: Promise<T>;
  resolve(value: T): void;
}

function deferred<T = void>(): Deferred<T> {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

// ---------------------------------------------------------------------------------------------------
// Apps: HTTP servers on 127.0.0.1 port 0 that record what reached them.

interface Seen {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: string;
}

interface App {
  name: string;
  port: number;
  seen: Seen[];
  close(): Promise<void>;
}

type Handler = (req: IncomingMessage, res: ServerResponse, seen: Seen) => void | Promise<void>;

const started: { close(): Promise<void> }[] = [];

/** The default answer: who answered and what it saw, as JSON. */
function echo(name: string): Handler {
  return (_req, res, seen) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ name, ...seen }));
  };
}

async function startApp(name: string, handler: Handler = echo(name)): Promise<App> {
  const upgraded = new Set<Duplex>();
  const app: App = { name, port: 0, seen: [], close: async () => {} };
  const server = http.createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => (body += chunk));
    req.on('end', () => {
      const seen = { method: req.method!, url: req.url!, headers: req.headers, body };
      app.seen.push(seen);
      void handler(req, res, seen);
    });
  });
  // A WebSocket endpoint that echoes whatever bytes arrive after the handshake.
  server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    app.seen.push({ method: req.method!, url: req.url!, headers: req.headers, body: '' });
    upgraded.add(socket);
    socket.on('close', () => upgraded.delete(socket));
    socket.on('error', () => {});
    if (req.headers.upgrade?.toLowerCase() !== 'websocket') {
      // What a WebSocket library does with an upgrade it does not speak (ws answers 400).
      socket.end('HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\n\r\n');
      return;
    }
    const accept = createHash('sha1').update(`${req.headers['sec-websocket-key']}${WS_GUID}`).digest('base64');
    socket.write(
      `HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n\r\n`,
    );
    if (head.length > 0) socket.write(head);
    socket.pipe(socket);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  app.port = (server.address() as AddressInfo).port;
  let closing: Promise<void> | null = null;
  app.close = () =>
    (closing ??= new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
      for (const socket of upgraded) socket.destroy();
    }));
  started.push(app);
  return app;
}

/** A port nothing listens on: bound once, then released. */
async function deadPort(): Promise<number> {
  const server = http.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

// ---------------------------------------------------------------------------------------------------
// Edges.

const dataDirs: string[] = [];

interface EdgeOptions {
  drainTimeoutMs?: number;
  dataDir?: string;
  port?: number;
  edgeProxy?: Kind | 'auto';
  findHaproxy?: () => Promise<string | null>;
}

async function startEdge(kind: Kind, options: EdgeOptions = {}): Promise<AppEdge> {
  let dataDir = options.dataDir;
  if (dataDir === undefined) {
    dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-edge-'));
    dataDirs.push(dataDir);
  }
  const edge = await startAppEdge({
    config: {
      dataDir,
      appsDomain: 'localhost',
      appsHost: '127.0.0.1',
      appsPort: options.port ?? 0,
      appsPublicUrl: null,
      appsTls: null,
      edgeProxy: options.edgeProxy ?? kind,
      drainTimeoutMs: options.drainTimeoutMs ?? 10_000,
    },
    logger: createLogger('silent'),
    ...(options.findHaproxy ? { findHaproxy: options.findHaproxy } : {}),
  });
  started.push(edge);
  return edge;
}

after(async () => {
  for (const s of started.reverse()) await s.close();
  for (const dir of dataDirs) await fs.rm(dir, { recursive: true, force: true });
});

// ---------------------------------------------------------------------------------------------------
// Clients.

interface Reply {
  status: number;
  headers: IncomingHttpHeaders;
  body: string;
  json<T = Record<string, unknown>>(): T;
}

interface Call {
  method?: string;
  path?: string;
  /** The Host header. */
  host: string;
  /** Request headers; an array gives raw pairs (for repeated headers). */
  headers?: Record<string, string> | string[];
  body?: string;
  agent?: http.Agent;
}

function call(port: number, options: Call): Promise<Reply> {
  const headers = Array.isArray(options.headers)
    ? ['host', options.host, ...options.headers]
    : { host: options.host, ...options.headers };
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        hostname: '127.0.0.1',
        port,
        method: options.method ?? 'GET',
        path: options.path ?? '/',
        headers,
        agent: options.agent ?? false,
      },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (body += chunk));
        res.on('end', () =>
          resolve({ status: res.statusCode!, headers: res.headers, body, json: <T>() => JSON.parse(body) as T }),
        );
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(options.body);
  });
}

const appHost = (slug: string, edge: AppEdge) => `${slug}.localhost:${edge.port}`;

/**
 * An app's counts once they show `requests` requests, each with its response: with a thread per CPU,
 * HAProxy may answer `show stat` on one thread while another still adds a request's last counters, so
 * counts read right after the responses can be one short for a moment. More than that fails the wait.
 */
async function countedTo(edge: AppEdge, slug: string, requests: number): Promise<EdgeAppStats> {
  let last: EdgeAppStats | undefined;
  return eventually(
    `${slug} counted at ${requests} requests`,
    async () => {
      last = (await edge.stats()).get(slug);
      const answered = last ? Object.values(last.responses).reduce((sum, n) => sum + n, 0) : 0;
      return last !== undefined && last.requests === requests && answered === requests && last;
    },
    { seconds: 30, describe: () => JSON.stringify(last) },
  );
}

/** What the app saw of a request sent to it through the edge (the echo app answers it). */
async function seenBy(edge: AppEdge, slug: string, headers: Record<string, string> | string[]): Promise<Seen> {
  const reply = await call(edge.port, { host: appHost(slug, edge), headers });
  assert.equal(reply.status, 200, reply.body);
  return reply.json<Seen>();
}

/** The edge's own error answer: the API's error shape, as JSON, with a request id. */
function assertEdgeError(reply: Reply, status: number, code: string, what: string): void {
  assert.equal(reply.status, status, `${what}: ${reply.body}`);
  assert.match(String(reply.headers['content-type']), /^application\/json/, what);
  const body = reply.json();
  assert.equal(body.code, code, what);
  assert.equal(typeof body.detail, 'string', what);
  assert.match(String(reply.headers['x-request-id']), /^[\x21-\x7e]{1,200}$/, `${what}: a request id`);
}

interface WebSocketReply {
  status: number;
  headers: IncomingHttpHeaders;
  /** The raw connection after a 101. */
  socket: Duplex | null;
  /** The body of a refused handshake. */
  body: string;
  acceptOk: boolean;
}

/** A WebSocket handshake by hand (Node 20 has no WebSocket client). */
function openWebSocket(port: number, path: string, host: string): Promise<WebSocketReply> {
  const key = randomBytes(16).toString('base64');
  const expected = createHash('sha1').update(`${key}${WS_GUID}`).digest('base64');
  return new Promise((resolve, reject) => {
    const req = http.request({
      hostname: '127.0.0.1',
      port,
      path,
      agent: false,
      headers: {
        host,
        connection: 'Upgrade',
        upgrade: 'websocket',
        'sec-websocket-key': key,
        'sec-websocket-version': '13',
      },
    });
    req.on('upgrade', (res, socket, head) => {
      if (head.length > 0) socket.unshift(head);
      socket.on('error', () => {});
      resolve({
        status: res.statusCode!,
        headers: res.headers,
        socket,
        body: '',
        acceptOk: res.headers['sec-websocket-accept'] === expected,
      });
    });
    req.on('response', (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () =>
        resolve({ status: res.statusCode!, headers: res.headers, socket: null, body, acceptOk: false }),
      );
    });
    req.on('error', reject);
    req.end();
  });
}

/** Writes the text and reads until as many bytes came back. */
function roundTrip(socket: Duplex, text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    let got = '';
    const onData = (chunk: Buffer) => {
      got += chunk.toString('utf8');
      if (got.length >= text.length) {
        socket.off('data', onData);
        resolve(got);
      }
    };
    socket.on('data', onData);
    socket.once('error', reject);
    socket.write(text);
  });
}

function closed(socket: Duplex): Promise<void> {
  return socket.destroyed ? Promise.resolve() : new Promise((resolve) => socket.once('close', () => resolve()));
}

/** A GET whose response is read until it ends or is cut: whether it completed, and what came. */
function readToClose(port: number, host: string, path: string): Promise<{ complete: boolean; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.get({ hostname: '127.0.0.1', port, path, headers: { host }, agent: false }, (res) => {
      let body = '';
      res.on('data', (chunk: Buffer) => (body += chunk.toString()));
      res.on('error', () => {});
      res.on('close', () => resolve({ complete: res.complete, body }));
    });
    req.on('error', reject);
  });
}

// ---------------------------------------------------------------------------------------------------

for (const kind of KINDS) {
  describe(`app edge (${kind})`, { timeout: 120_000 }, () => {
    test('the edge is the kind asked for, and an app is reached at <slug>.<apps domain>:<apps port>', async () => {
      const edge = await startEdge(kind);
      assert.equal(edge.kind, kind);
      assert.equal(edge.publicUrl, `http://localhost:${edge.port}`);
    });

    test('by host name: the app gets the whole path, the query, the body and X-Forwarded-*, and its answer comes back as sent', async () => {
      const edge = await startEdge(kind);
      const app = await startApp('hosted', (req, res) => {
        if (req.method === 'POST') return echo('hosted')(req, res, app.seen.at(-1)!);
        res.writeHead(201, [
          ['x-app', 'yes'],
          ['set-cookie', 'a=1'],
          ['set-cookie', 'b=2'],
          ['content-type', 'text/plain'],
        ]);
        res.end('created');
      });
      await edge.setTargets('hosted-0000000a', [{ instanceId: 'i-1', port: app.port }]);
      const host = appHost('hosted-0000000a', edge);
      const reply = await call(edge.port, {
        path: '/threads/1?x=2&y=%2F',
        host,
        headers: {
          'x-forwarded-for': '203.0.113.9',
          'x-forwarded-prefix': '/spoofed',
          'x-forwarded-host': 'evil.example',
          'x-forwarded-port': '1',
          'x-forwarded-proto': 'https',
        },
      });
      assert.equal(reply.status, 201);
      assert.equal(reply.body, 'created');
      assert.equal(reply.headers['x-app'], 'yes');
      assert.deepEqual(reply.headers['set-cookie'], ['a=1', 'b=2']);
      const seen = app.seen.at(-1)!;
      assert.equal(seen.url, '/threads/1?x=2&y=%2F');
      assert.equal(seen.headers.host, host, 'the app sees the Host the user asked for');
      assert.equal(seen.headers['x-forwarded-host'], host, "a client's X-Forwarded-Host never reaches the app");
      assert.equal(seen.headers['x-forwarded-proto'], 'http');
      assert.equal(seen.headers['x-forwarded-for'], '203.0.113.9, 127.0.0.1');
      assert.equal(seen.headers['x-forwarded-prefix'], undefined, 'a client cannot make up a prefix');
      assert.equal(seen.headers['x-forwarded-port'], undefined);
      // An app at the root of its host keeps /apps/... paths of its own.
      await call(edge.port, { path: '/apps/other-12345678/x', host });
      assert.equal(app.seen.at(-1)!.url, '/apps/other-12345678/x');
      // Host names are case-insensitive.
      await call(edge.port, { path: '/upper', host: `HOSTED-0000000A.LocalHost:${edge.port}` });
      assert.equal(app.seen.at(-1)!.url, '/upper');

      const big = 'x'.repeat(3 * 1024 * 1024);
      const posted = await call(edge.port, {
        method: 'POST',
        path: '/items?q=1',
        host,
        headers: { 'content-type': 'text/plain' },
        body: big,
      });
      assert.equal(posted.status, 200);
      const echoed = posted.json<Seen>();
      assert.equal(echoed.method, 'POST');
      assert.equal(echoed.url, '/items?q=1');
      assert.equal(echoed.body.length, big.length, 'a large body reaches the app whole');
    });

    test('per-app counts: requests and responses by class since the app got its route, and a mean response time', async () => {
      const edge = await startEdge(kind);
      const app = await startApp('counted', (req, res) => {
        res.writeHead(req.url === '/missing' ? 404 : 200);
        res.end('x');
      });
      const slug = 'counted-00000060';
      await edge.setTargets(slug, [{ instanceId: 'i-1', port: app.port }]);
      assert.deepEqual((await edge.stats()).get(slug)?.requests, 0);
      for (const path of ['/', '/a', '/b', '/missing']) await call(edge.port, { host: appHost(slug, edge), path });
      let stats = await countedTo(edge, slug, 4);
      assert.equal(stats.responses['2xx'], 3);
      assert.equal(stats.responses['4xx'], 1);
      assert.ok(stats.averageResponseSeconds !== null && stats.averageResponseSeconds >= 0);
      // No instance: the edge's own 502/503 count as the app's 5xx.
      await edge.setTargets(slug, [], { drainTimeoutMs: 500 });
      await call(edge.port, { host: appHost(slug, edge) });
      stats = await countedTo(edge, slug, 5);
      assert.equal(stats.responses['5xx'], 1);
      // A removed app's counts go; an app routed next (HAProxy hands it a backend of the pool, maybe the
      // same one) counts from zero.
      await edge.remove(slug, { drainTimeoutMs: 500 });
      assert.equal((await edge.stats()).has(slug), false);
      const next = 'counted-00000061';
      await edge.setTargets(next, [{ instanceId: 'i-2', port: app.port }]);
      await call(edge.port, { host: appHost(next, edge) });
      await countedTo(edge, next, 1);
    });

    test('any host that is not a routed app gets 404 in the error shape, and no app sees the request', async () => {
      const edge = await startEdge(kind);
      const app = await startApp('bystander');
      await edge.setTargets('bystander-0000000d', [{ instanceId: 'i-1', port: app.port }]);
      const hosts = [
        `127.0.0.1:${edge.port}`, // the address itself
        '127.0.0.1:8124', // the API's host
        `localhost:${edge.port}`, // the apps domain itself
        '10.0.0.7', // another IP
        'bystander-0000000d.example.org', // another domain
        `nobody-0000000f.localhost:${edge.port}`, // an unknown slug
        `x.bystander-0000000d.localhost:${edge.port}`, // a deeper subdomain
      ];
      for (const host of hosts) {
        for (const path of ['/', '/apps/bystander-0000000d/', '/v2/deployments']) {
          const reply = await call(edge.port, { host, path, headers: { 'x-request-id': 'req-404' } });
          assertEdgeError(reply, 404, 'not_found', `${host}${path}`);
          assert.equal(reply.headers['x-request-id'], 'req-404', `${host}${path}: the sane request id is echoed`);
        }
      }
      const generated = await call(edge.port, { host: `127.0.0.1:${edge.port}` });
      assertEdgeError(generated, 404, 'not_found', 'without a request id');
      for (const insane of ['has space', 'x'.repeat(201)]) {
        const reply = await call(edge.port, { host: `127.0.0.1:${edge.port}`, headers: { 'x-request-id': insane } });
        assertEdgeError(reply, 404, 'not_found', `request id ${insane.slice(0, 20)}`);
        assert.notEqual(reply.headers['x-request-id'], insane, 'an insane request id is replaced');
      }
      const ws = await openWebSocket(edge.port, '/socket', `127.0.0.1:${edge.port}`);
      assert.equal(ws.status, 404);
      assert.equal(JSON.parse(ws.body).code, 'not_found');
      assert.equal(app.seen.length, 0, 'the app saw none of it');
    });

    test('an Upgrade that is not a WebSocket (curl --http2 sends h2c) is served as a plain request', async () => {
      const edge = await startEdge(kind);
      const app = await startApp('plain');
      await edge.setTargets('plain-0000000e', [{ instanceId: 'i-1', port: app.port }]);
      const h2c = {
        connection: 'Upgrade, HTTP2-Settings',
        upgrade: 'h2c',
        'http2-settings': 'AAMAAABkAAQCAAAAAAIAAAAA',
      };
      const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
      try {
        const host = appHost('plain-0000000e', edge);
        const toApp = await call(edge.port, { method: 'POST', path: '/form', host, headers: h2c, body: 'x=1', agent });
        assert.equal(toApp.status, 200, toApp.body);
        const seen = toApp.json<Seen>();
        assert.equal(seen.url, '/form');
        assert.equal(seen.body, 'x=1');
        assert.equal(seen.headers.upgrade, undefined, 'the app is not asked to switch protocols');
        const again = await call(edge.port, { path: '/again', host, headers: h2c, agent });
        assert.equal(again.status, 200, 'the connection is still good for the next request');
        const other = await call(edge.port, { path: '/', host: `127.0.0.1:${edge.port}`, headers: h2c, agent });
        assertEdgeError(other, 404, 'not_found', 'h2c to a host that is no app');
      } finally {
        agent.destroy();
      }
    });

    test("an app that closes each connection does not close the client's connection to the edge", async () => {
      const edge = await startEdge(kind);
      const app = await startApp('closer', (_req, res) => {
        res.writeHead(200, { connection: 'close', 'content-type': 'text/plain' });
        res.end('bye');
      });
      await edge.setTargets('closer-0000001d', [{ instanceId: 'i-1', port: app.port }]);
      const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
      try {
        const sockets = new Set<unknown>();
        for (let i = 0; i < 3; i++) {
          const reply = await new Promise<{ body: string; connection: string | undefined }>((resolve, reject) => {
            const req = http.get(
              {
                hostname: '127.0.0.1',
                port: edge.port,
                path: '/',
                headers: { host: appHost('closer-0000001d', edge) },
                agent,
              },
              (res) => {
                sockets.add(req.socket);
                let body = '';
                res.on('data', (chunk: Buffer) => (body += chunk.toString()));
                res.on('end', () => resolve({ body, connection: res.headers.connection }));
              },
            );
            req.on('error', reject);
          });
          assert.equal(reply.body, 'bye');
          assert.notEqual(reply.connection, 'close');
        }
        assert.equal(sockets.size, 1, 'all three requests went over one connection');
      } finally {
        agent.destroy();
      }
    });

    test("an app's own error answers reach the client unchanged", async () => {
      const edge = await startEdge(kind);
      const app = await startApp('failing', (req, res) => {
        const status = Number(req.url!.slice(1));
        res.writeHead(status, { 'content-type': 'text/plain', 'x-app': 'own' });
        res.end(`app says ${status}`);
      });
      await edge.setTargets('failing-00000020', [{ instanceId: 'i-1', port: app.port }]);
      for (const status of [404, 500, 502, 503, 504]) {
        const reply = await call(edge.port, { host: appHost('failing-00000020', edge), path: `/${status}` });
        assert.equal(reply.status, status);
        assert.equal(reply.body, `app says ${status}`);
        assert.equal(reply.headers['x-app'], 'own');
      }
    });

    test('a known slug without instances yet is 503 unavailable', async () => {
      const edge = await startEdge(kind);
      await edge.setTargets('deploying-00000010', []);
      const reply = await call(edge.port, { host: appHost('deploying-00000010', edge), path: '/x' });
      assertEdgeError(reply, 503, 'unavailable', 'no instance');
      assert.match(String(reply.json().detail), /deploying-00000010/);
      assert.deepEqual(edge.targets('deploying-00000010'), []);
    });

    test('a paused slug (scaled to zero) is 503 saying so; once it has an instance again it serves', async () => {
      const edge = await startEdge(kind);
      const host = appHost('paused-00000012', edge);
      const app = await startApp('resumed');
      await edge.setTargets('paused-00000012', [{ instanceId: 'web-0', port: app.port }]);
      await edge.setTargets('paused-00000012', [], { scaledToZero: true });
      const paused = await call(edge.port, { host, path: '/x' });
      assertEdgeError(paused, 503, 'unavailable', 'paused');
      assert.equal(
        paused.json().detail,
        'Deployment paused-00000012 is scaled to zero: resource_spec.min_scale is 0; set it to 1 or more to serve it.',
      );
      await edge.setTargets('paused-00000012', [{ instanceId: 'web-1', port: app.port }]);
      assert.equal((await call(edge.port, { host, path: '/x' })).status, 200);
      // Without instances for another reason, it says so again.
      await edge.setTargets('paused-00000012', []);
      const waiting = await call(edge.port, { host, path: '/x' });
      assertEdgeError(waiting, 503, 'unavailable', 'no instance');
      assert.match(String(waiting.json().detail), /has no running instance yet/);
      await edge.remove('paused-00000012');
    });

    test('instances that refuse connections: 502 bad_gateway, and requests go to one that answers once added', async () => {
      const edge = await startEdge(kind);
      const dead = await deadPort();
      await edge.setTargets('flaky-00000011', [{ instanceId: 'gone', port: dead }]);
      const host = appHost('flaky-00000011', edge);
      for (const options of [{ path: '/' }, { method: 'POST', path: '/x', body: 'payload' }]) {
        const reply = await call(edge.port, { host, ...options, headers: { 'x-request-id': 'req-502' } });
        assertEdgeError(reply, 502, 'bad_gateway', `${options.path}`);
        assert.match(String(reply.json().detail), /flaky-00000011/);
        assert.equal(reply.headers['x-request-id'], 'req-502');
      }
      const live = await startApp('live');
      await edge.setTargets('flaky-00000011', [
        { instanceId: 'gone', port: dead },
        { instanceId: 'live', port: live.port },
      ]);
      for (let i = 0; i < 6; i++) {
        const reply = await call(edge.port, { host, path: `/${i}` });
        assert.equal(reply.status, 200, `request ${i}: ${reply.body}`);
        assert.equal(reply.json().name, 'live');
      }
    });

    test('requests are spread over the instances', async () => {
      const edge = await startEdge(kind);
      const one = await startApp('one');
      const two = await startApp('two');
      await edge.setTargets('spread-00000012', [
        { instanceId: 'one', port: one.port },
        { instanceId: 'two', port: two.port },
      ]);
      const names: string[] = [];
      for (let i = 0; i < 12; i++)
        names.push(String((await call(edge.port, { host: appHost('spread-00000012', edge) })).json().name));
      assert.equal(names.filter((n) => n === 'one').length, 6, names.join());
      assert.equal(names.filter((n) => n === 'two').length, 6, names.join());
      assert.deepEqual(edge.targets('spread-00000012'), [
        { instanceId: 'one', port: one.port },
        { instanceId: 'two', port: two.port },
      ]);
    });

    test('an instance that dies mid-answer: the client sees a cut response, not a hang, and the edge goes on', async () => {
      const edge = await startEdge(kind);
      const app = await startApp('dying', (req, res) => {
        if (req.url === '/fixed') res.writeHead(200, { 'content-length': '100' });
        else if (req.url === '/chunked') res.writeHead(200, { 'content-type': 'text/plain' });
        else return echo('dying')(req, res, app.seen.at(-1)!);
        res.write('partial');
        setTimeout(() => req.socket.destroy(), 20);
      });
      await edge.setTargets('dying-00000013', [{ instanceId: 'i-1', port: app.port }]);
      const host = appHost('dying-00000013', edge);
      for (const path of ['/fixed', '/chunked']) {
        const outcome = await readToClose(edge.port, host, path);
        assert.equal(outcome.complete, false, `${path} is seen as cut`);
        assert.equal(outcome.body, 'partial');
      }
      assert.equal((await call(edge.port, { host, path: '/fine' })).status, 200);
    });

    test('a client that leaves mid-stream ends the request to the app too', async () => {
      const edge = await startEdge(kind);
      const appSawClose = deferred();
      const app = await startApp('stream', (_req, res) => {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write('data: first\n\n');
        // A keep-alive comment now and then, as SSE servers send: HAProxy notices a client that left when
        // it has something to pass on (a stream that stays quiet is ended by the edge's client timeout).
        const beat = setInterval(() => res.write(': keep-alive\n\n'), 100);
        res.on('close', () => {
          clearInterval(beat);
          appSawClose.resolve();
        });
      });
      await edge.setTargets('stream-00000014', [{ instanceId: 'i-1', port: app.port }]);
      await new Promise<void>((resolve, reject) => {
        const req = http.get(
          {
            hostname: '127.0.0.1',
            port: edge.port,
            path: '/events',
            headers: { host: appHost('stream-00000014', edge) },
            agent: false,
          },
          (res) => {
            res.once('data', () => {
              req.destroy();
              resolve();
            });
          },
        );
        req.once('error', reject);
      });
      await appSawClose.promise;
      // Nothing is in flight any more, so removing the route does not wait for the (long) drain time.
      await edge.remove('stream-00000014', { drainTimeoutMs: 60_000 });
      const reply = await call(edge.port, { host: appHost('stream-00000014', edge) });
      assertEdgeError(reply, 404, 'not_found', 'a removed route');
    });

    test('streaming answers (SSE, chunked) reach the client chunk by chunk, as the app writes them', async () => {
      const edge = await startEdge(kind);
      // The app writes each next chunk only once the client has received the previous one: a proxy that
      // buffered would never deliver the first, and the exchange would stall.
      const received = [deferred(), deferred()];
      const app = await startApp('sse', async (req, res) => {
        const sse = req.url === '/events';
        res.writeHead(
          200,
          sse ? { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' } : { 'content-type': 'text/plain' },
        );
        res.write(sse ? 'data: one\n\n' : 'one;');
        await received[0]!.promise;
        res.write(sse ? 'data: two\n\n' : 'two;');
        await received[1]!.promise;
        res.end(sse ? 'data: three\n\n' : 'three;');
      });
      await edge.setTargets('sse-00000015', [{ instanceId: 'i-1', port: app.port }]);
      for (const [path, marks] of [
        ['/events', ['data: one', 'data: two', 'data: three']],
        ['/chunked', ['one;', 'two;', 'three;']],
      ] as const) {
        received[0] = deferred();
        received[1] = deferred();
        const result = await new Promise<{ text: string; type: string | undefined; encoding: string | undefined }>(
          (resolve, reject) => {
            const req = http.get(
              {
                hostname: '127.0.0.1',
                port: edge.port,
                path,
                headers: { host: appHost('sse-00000015', edge) },
                agent: false,
              },
              (res) => {
                let text = '';
                res.setEncoding('utf8');
                res.on('data', (chunk: string) => {
                  text += chunk;
                  if (text.includes(marks[0])) received[0]!.resolve();
                  if (text.includes(marks[1])) received[1]!.resolve();
                });
                res.on('end', () =>
                  resolve({ text, type: res.headers['content-type'], encoding: res.headers['transfer-encoding'] }),
                );
              },
            );
            req.on('error', reject);
          },
        );
        assert.equal(result.text, marks.map((m) => (m.startsWith('data') ? `${m}\n\n` : m)).join(''));
        assert.equal(result.encoding, 'chunked');
        if (path === '/events') assert.equal(result.type, 'text/event-stream');
      }
    });

    test('WebSockets: the handshake reaches the app and data goes both ways', async () => {
      const edge = await startEdge(kind);
      const app = await startApp('ws');
      await edge.setTargets('ws-00000016', [{ instanceId: 'i-1', port: app.port }]);
      const host = appHost('ws-00000016', edge);
      const ws = await openWebSocket(edge.port, '/socket?room=1', host);
      assert.equal(ws.status, 101);
      assert.ok(ws.acceptOk, "the app's Sec-WebSocket-Accept comes through");
      assert.equal(await roundTrip(ws.socket!, 'hello over host'), 'hello over host');
      assert.equal(await roundTrip(ws.socket!, 'again'), 'again', 'several messages on one connection');
      assert.equal(app.seen.at(-1)!.url, '/socket?room=1');
      assert.equal(app.seen.at(-1)!.headers['x-forwarded-host'], host);
      ws.socket!.end();
      await closed(ws.socket!);
    });

    test('WebSocket handshakes that cannot go through get an HTTP answer in the error shape', async () => {
      const edge = await startEdge(kind);
      const unknown = await openWebSocket(edge.port, '/socket', appHost('nobody-00000017', edge));
      assert.equal(unknown.status, 404);
      assert.equal(JSON.parse(unknown.body).code, 'not_found');

      await edge.setTargets('waiting-00000017', []);
      const waiting = await openWebSocket(edge.port, '/', appHost('waiting-00000017', edge));
      assert.equal(waiting.status, 503);
      assert.equal(JSON.parse(waiting.body).code, 'unavailable');

      await edge.setTargets('dead-00000017', [{ instanceId: 'gone', port: await deadPort() }]);
      const dead = await openWebSocket(edge.port, '/socket', appHost('dead-00000017', edge));
      assert.equal(dead.status, 502);
      assert.equal(JSON.parse(dead.body).code, 'bad_gateway');
    });

    test('setTargets says when it has switched, then waits for requests in flight to the old instance, while new requests already go to the new one', async () => {
      const edge = await startEdge(kind);
      const release = deferred();
      const inside = deferred();
      const old = await startApp('old', async (req, res, seen) => {
        if (req.url !== '/slow') return echo('old')(req, res, seen);
        inside.resolve();
        await release.promise;
        res.end('old answer');
      });
      const fresh = await startApp('new');
      await edge.setTargets('switch-00000018', [{ instanceId: 'old', port: old.port }]);
      const host = appHost('switch-00000018', edge);

      const slow = call(edge.port, { host, path: '/slow' });
      await inside.promise;
      let drained = false;
      // What the caller does at the switch (tell the old revision: src/dataplane/app-replaced.ts) comes
      // before the drain's end, while the old instance still serves its request.
      const switched = deferred<boolean>();
      const switching = edge
        .setTargets('switch-00000018', [{ instanceId: 'new', port: fresh.port }], {
          drainTimeoutMs: 60_000,
          onSwitched: () => switched.resolve(drained),
        })
        .then(() => (drained = true));
      assert.equal(await switched.promise, false, 'onSwitched came before the drain ended');
      const quick = await eventually(
        'a request that reaches the new instance',
        async () => {
          const reply = await call(edge.port, { host, path: '/quick' });
          return reply.json().name === 'new' && reply;
        },
        { retryErrors: true },
      );
      assert.equal(quick.status, 200);
      assert.equal(drained, false, 'the old instance still has a request in flight');
      assert.deepEqual(edge.targets('switch-00000018'), [{ instanceId: 'new', port: fresh.port }]);

      release.resolve();
      const slowReply = await slow;
      await switching;
      assert.equal(slowReply.status, 200);
      assert.equal(slowReply.body, 'old answer');
      assert.equal(drained, true);
    });

    test('under a steady stream of requests, switching instances loses none', async () => {
      const edge = await startEdge(kind);
      // The old instance takes a little time per request, so some are in flight when the switch comes.
      let oldActive = 0;
      let oldArrival = deferred();
      const old = await startApp('old', (req, res, seen) => {
        oldActive++;
        oldArrival.resolve();
        oldArrival = deferred();
        res.on('finish', () => oldActive--);
        setTimeout(() => void echo('old')(req, res, seen), 3);
      });
      const fresh = await startApp('new');
      const slug = 'steady-00000019';
      await edge.setTargets(slug, [{ instanceId: 'old', port: old.port }]);

      const CLIENTS = 4;
      const PER_CLIENT = 60;
      const switchAt = (CLIENTS * PER_CLIENT) / 3;
      const agent = new http.Agent({ keepAlive: true });
      const failures: string[] = [];
      const servedBy: string[][] = Array.from({ length: CLIENTS }, () => []);
      let completed = 0;
      let oldActiveAtSwitch = 0;
      const trigger = deferred();

      const client = async (index: number) => {
        for (let n = 0; n < PER_CLIENT; n++) {
          try {
            // POSTs with a body: never sent twice by anyone, so only the drain can save them.
            const reply = await call(edge.port, {
              method: 'POST',
              host: appHost(slug, edge),
              path: `/work/${index}/${n}`,
              body: `job ${n}`,
              agent,
            });
            if (reply.status === 200) servedBy[index]!.push(String(reply.json().name));
            else failures.push(`${reply.status} ${reply.body}`);
          } catch (error) {
            failures.push(`request ${index}/${n}: ${String(error)}`);
          }
          if (++completed === switchAt) trigger.resolve();
        }
      };
      const switching = trigger.promise.then(async () => {
        while (oldActive === 0) await oldArrival.promise;
        oldActiveAtSwitch = oldActive;
        await edge.setTargets(slug, [{ instanceId: 'new', port: fresh.port }]);
        // Only now is the old instance stopped, as the data plane does.
        await old.close();
      });
      try {
        await Promise.all([...Array.from({ length: CLIENTS }, (_, i) => client(i)), switching]);
      } finally {
        agent.destroy();
      }

      assert.deepEqual(failures, [], 'no request failed');
      const all = servedBy.flat();
      assert.equal(all.length, CLIENTS * PER_CLIENT);
      assert.ok(all.includes('old') && all.includes('new'), 'both instances served');
      for (const [index, names] of servedBy.entries()) {
        assert.equal(names.at(-1), 'new', `client ${index} ends on the new instance`);
        const firstNew = names.indexOf('new');
        assert.ok(!names.slice(firstNew).includes('old'), `client ${index} never goes back to the old instance`);
      }
      assert.ok(oldActiveAtSwitch > 0, 'the switch came while the old instance had requests in flight');
    });

    test('the drain gives up after drainTimeoutMs: an open WebSocket does not hold a switch, and keeps working', async () => {
      const edge = await startEdge(kind);
      const old = await startApp('old');
      const fresh = await startApp('new');
      await edge.setTargets('sockets-0000001a', [{ instanceId: 'old', port: old.port }]);
      const host = appHost('sockets-0000001a', edge);
      const ws = await openWebSocket(edge.port, '/live', host);
      assert.equal(ws.status, 101);

      // Bounded by the test's own timeout: a drain that waited for the socket would never end.
      await edge.setTargets('sockets-0000001a', [{ instanceId: 'new', port: fresh.port }], { drainTimeoutMs: 50 });
      assert.equal(
        await roundTrip(ws.socket!, 'still here'),
        'still here',
        'the old connection is not cut by the switch',
      );
      const next = await openWebSocket(edge.port, '/live', host);
      assert.equal(next.status, 101);
      assert.equal(fresh.seen.at(-1)!.url, '/live', 'a new connection goes to the new instance');

      await edge.remove('sockets-0000001a', { drainTimeoutMs: 50 });
      assertEdgeError(await call(edge.port, { host }), 404, 'not_found', 'after remove');
      ws.socket!.destroy();
      next.socket!.destroy();
    });

    test('close(): a request in flight gets its answer, open WebSockets and endless streams are cut, the port stops answering', async () => {
      const edge = await startEdge(kind, { drainTimeoutMs: 1_000 });
      const release = deferred();
      const inside = deferred();
      const app = await startApp('closing', async (req, res) => {
        if (req.url === '/slow') {
          inside.resolve();
          await release.promise;
          res.end('late answer');
          return;
        }
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write('data: forever\n\n');
      });
      await edge.setTargets('closing-0000001b', [{ instanceId: 'i-1', port: app.port }]);
      const host = appHost('closing-0000001b', edge);
      const ws = await openWebSocket(edge.port, '/', host);
      assert.equal(ws.status, 101);
      const stream = await new Promise<IncomingMessage>((resolve, reject) => {
        const req = http.get(
          { hostname: '127.0.0.1', port: edge.port, path: '/events', headers: { host }, agent: false },
          (res) => res.once('data', () => resolve(res)),
        );
        req.on('error', reject);
      });
      const streamEnded = new Promise<boolean>((resolve) => {
        stream.on('error', () => {});
        stream.on('close', () => resolve(stream.complete));
      });
      const slow = call(edge.port, { host, path: '/slow' });
      await inside.promise;

      const closing = edge.close();
      release.resolve();
      assert.equal((await slow).body, 'late answer', 'the request in flight got its answer');
      await closing;
      await closed(ws.socket!);
      assert.equal(await streamEnded, false, 'the endless stream was cut');
      await assert.rejects(call(edge.port, { host }), /ECONNREFUSED/, 'nothing answers on the apps port any more');
      await edge.close(); // idempotent
    });

    test('attacker: Slipway credentials a client sends never reach the app; other credentials do', async () => {
      const edge = await startEdge(kind);
      const app = await startApp('thief');
      await edge.setTargets('thief-00000021', [{ instanceId: 'i-1', port: app.port }]);
      const slug = 'thief-00000021';
      const secrets = ['slw_4bXsecretadminkey', 'slwl_listenercredential', 'slwa_agentcredential', 'SLW_UPPERCASE'];
      for (const secret of secrets) {
        for (const headers of [
          { 'x-api-key': secret } as Record<string, string>,
          { authorization: `Bearer ${secret}` },
          { authorization: `bearer ${secret}` },
          { authorization: secret },
        ]) {
          const seen = await seenBy(edge, slug, headers);
          const leaked = JSON.stringify(seen.headers);
          assert.ok(
            !leaked.toLowerCase().includes(secret.toLowerCase()),
            `${JSON.stringify(headers)} reached the app: ${leaked}`,
          );
        }
      }
      // Repeated headers: the Slipway key in the second of two.
      const repeated = await seenBy(edge, slug, ['x-api-key', 'sk-app-key', 'x-api-key', 'slw_4bXsecondkey']);
      assert.ok(
        !JSON.stringify(repeated.headers).includes('slw_'),
        `a repeated X-Api-Key leaked: ${JSON.stringify(repeated.headers)}`,
      );
      const both = await seenBy(edge, slug, { 'x-api-key': 'slw_4bXinkey', authorization: 'Bearer slwa_inauth' });
      assert.equal(both.headers['x-api-key'], undefined);
      assert.equal(both.headers.authorization, undefined);

      const honest = await seenBy(edge, slug, { authorization: 'Bearer sk-abc', 'x-api-key': 'app-key-123' });
      assert.equal(honest.headers.authorization, 'Bearer sk-abc', "the app's own credentials reach it");
      assert.equal(honest.headers['x-api-key'], 'app-key-123');
      assert.equal(
        (await seenBy(edge, slug, { authorization: 'Basic dXNlcjpwYXNz' })).headers.authorization,
        'Basic dXNlcjpwYXNz',
      );

      // Over a WebSocket handshake too.
      const ws = await new Promise<IncomingHttpHeaders>((resolve, reject) => {
        const req = http.request({
          hostname: '127.0.0.1',
          port: edge.port,
          path: '/ws',
          agent: false,
          headers: {
            host: appHost(slug, edge),
            connection: 'Upgrade',
            upgrade: 'websocket',
            'sec-websocket-key': randomBytes(16).toString('base64'),
            'sec-websocket-version': '13',
            'x-api-key': 'slw_4bXoverwebsocket',
            authorization: 'Bearer slw_4bXoverwebsocket',
          },
        });
        req.on('upgrade', (_res, socket) => {
          socket.destroy();
          resolve(app.seen.at(-1)!.headers);
        });
        req.on('response', (res) => reject(new Error(`no upgrade: ${res.statusCode}`)));
        req.on('error', reject);
        req.end();
      });
      assert.ok(!JSON.stringify(ws).includes('slw_'), `a WebSocket handshake leaked: ${JSON.stringify(ws)}`);
    });

    test("attacker: the service's own cookies (the dashboard's sign-in session) never reach the app; the app's do", async () => {
      const edge = await startEdge(kind);
      const app = await startApp('cookie-thief');
      const slug = 'cookies-00000022';
      await edge.setTargets(slug, [{ instanceId: 'i-1', port: app.port }]);
      const cookieSeen = async (cookie: string | string[]) =>
        (await seenBy(edge, slug, Array.isArray(cookie) ? cookie.flatMap((c) => ['cookie', c]) : { cookie })).headers
          .cookie;
      const cases: [string, string | undefined][] = [
        ['slipway_session=s3cret', undefined],
        ['__Host-slipway_session=s3cret', undefined],
        ['theme=dark; slipway_session=s3cret; lang=en', 'theme=dark; lang=en'],
        ['slipway_session=s3cret; theme=dark', 'theme=dark'],
        ['theme=dark;slipway_sso_state=st4te', 'theme=dark'],
        [
          'a=1; __Host-slipway_session=s3cret; slipway_session=s3cret; __Secure-slipway_sso_state=st4te; b=2',
          'a=1; b=2',
        ],
        // The app's own cookies, even ones whose names merely contain the word, are the app's.
        ['my_slipway_session=mine; theme=dark', 'my_slipway_session=mine; theme=dark'],
        ['theme=dark', 'theme=dark'],
      ];
      for (const [sent, expected] of cases) {
        const seen = await cookieSeen(sent);
        assert.equal(seen, expected, `Cookie: ${sent}`);
      }
      // Many copies (a client can send what it likes): none gets through.
      const many = Array.from({ length: 12 }, (_, i) => `slipway_session=s3cret${i}`).join('; ');
      assert.ok(!String(await cookieSeen(`x=1; ${many}; y=2`)).includes('s3cret'));
      // In two Cookie header lines (as an HTTP/2 client's cookies arrive split).
      const split = await cookieSeen(['theme=dark', 'slipway_session=s3cret; lang=en']);
      assert.ok(!String(split).includes('s3cret'), `split cookies leaked: ${split}`);
      assert.match(String(split), /theme=dark/);
    });

    test("attacker: an app's Service-Worker-Allowed header never reaches the client", async () => {
      const edge = await startEdge(kind);
      const app = await startApp('worker', (req, res) => {
        res.writeHead(200, {
          'content-type': 'text/javascript',
          'Service-Worker-Allowed': '/',
          'x-kept': 'yes',
        });
        res.end('self.addEventListener("fetch", () => {});');
      });
      await edge.setTargets('worker-00000022', [{ instanceId: 'i-1', port: app.port }]);
      const reply = await call(edge.port, { host: appHost('worker-00000022', edge), path: '/sw.js' });
      assert.equal(reply.status, 200);
      assert.equal(reply.headers['service-worker-allowed'], undefined);
      assert.equal(reply.headers['x-kept'], 'yes', 'other headers pass');
      assert.equal(app.seen.length, 1);
    });
  });
}

// ---------------------------------------------------------------------------------------------------

describe('choosing the edge', { timeout: 60_000 }, () => {
  test('the fallback works when the HAProxy binary is absent: auto gives the built-in edge, which serves apps', async () => {
    const edge = await startEdge('builtin', { edgeProxy: 'auto', findHaproxy: async () => null });
    assert.equal(edge.kind, 'builtin');
    const app = await startApp('fallback');
    await edge.setTargets('fallback-00000030', [{ instanceId: 'i-1', port: app.port }]);
    const reply = await call(edge.port, { host: appHost('fallback-00000030', edge) });
    assert.equal(reply.status, 200);
    assert.equal(reply.json().name, 'fallback');
  });

  test('auto takes HAProxy when it is installed; HAProxy asked for but absent stops the start naming the fix', async () => {
    const edge = await startEdge('haproxy', { edgeProxy: 'auto' });
    assert.equal(edge.kind, 'haproxy');
    await assert.rejects(startEdge('haproxy', { findHaproxy: async () => null }), /HAProxy is not installed/);
  });
});

describe('HAProxy edge: supervision', { timeout: 120_000 }, () => {
  /** The pid of the HAProxy master serving the edge, from its pid file. */
  async function masterPid(dataDir: string): Promise<number> {
    return Number((await fs.readFile(path.join(dataDir, 'edge', 'haproxy.pid'), 'utf8')).trim());
  }

  async function served(edge: AppEdge, slug: string, name: string): Promise<boolean> {
    const reply = await call(edge.port, { host: appHost(slug, edge) }).catch(() => null);
    return reply !== null && reply.status === 200 && reply.json().name === name;
  }

  test("HAProxy carries app traffic at the service's own priority: master and every worker thread in the ordinary CPU class, a thread per CPU", async () => {
    const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-edge-'));
    dataDirs.push(dataDir);
    await startEdge('haproxy', { dataDir });
    const master = await masterPid(dataDir);
    const worker = Number(
      (await fs.readFile(`/proc/${master}/task/${master}/children`, 'utf8')).trim().split(/\s+/)[0],
    );
    assert.ok(worker > 0, 'HAProxy has a worker');
    const threads = await fs.readdir(`/proc/${worker}/task`);
    assert.equal(threads.length, os.availableParallelism(), 'threads');
    // Not the idle class it once ran in, where a host's other work left it (and the apps) nothing.
    const service = await scheduling(process.pid, process.pid);
    assert.equal(service.policy, SCHED_OTHER);
    for (const [pid, tid] of [[master, master], ...threads.map((t) => [worker, Number(t)])] as const)
      assert.deepEqual(await scheduling(pid, tid), service, `scheduling of ${pid}/${tid}`);
  });

  /** The pids of the master's workers. */
  async function workerPids(master: number): Promise<number[]> {
    const text = await fs.readFile(`/proc/${master}/task/${master}/children`, 'utf8').catch(() => '');
    return text.trim() === '' ? [] : text.trim().split(/\s+/).map(Number);
  }

  test("an app's counts survive a restart of HAProxy", async () => {
    const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-edge-'));
    dataDirs.push(dataDir);
    const edge = await startEdge('haproxy', { dataDir });
    const app = await startApp('survivor');
    const slug = 'survivor-00000062';
    await edge.setTargets(slug, [{ instanceId: 'i-1', port: app.port }]);
    for (let i = 0; i < 3; i++) assert.ok(await served(edge, slug, 'survivor'));
    await countedTo(edge, slug, 3);
    const pid = await masterPid(dataDir);
    const workers = await workerPids(pid);
    process.kill(pid, 'SIGKILL');
    // Only once the old worker is gone does a request reach the new HAProxy (a dying worker still serves,
    // and what it counts after the last read is lost with it).
    await eventually(
      'the old HAProxy gone and a new one up',
      async () => {
        const now = await masterPid(dataDir).catch(() => 0);
        return now !== pid && processAlive(now) && !workers.some(processAlive);
      },
      { retryErrors: true },
    );
    await eventually('the route served again', () => served(edge, slug, 'survivor'), { retryErrors: true });
    // The three before, and at least the one that found it served again. HAProxy counts a request as its
    // stream ends, which can be just after the client has its answer, so the count is waited for.
    let after: EdgeAppStats | undefined;
    await eventually(
      'the three before the restart and the one after counted',
      async () => {
        after = (await edge.stats()).get(slug);
        return after !== undefined && after.requests >= 4 && after.responses['2xx'] >= 4;
      },
      { seconds: 30, describe: () => JSON.stringify(after) },
    );
  });

  test('counts asked for while HAProxy does not answer are the last ones read, not an error (the metrics stay up)', async () => {
    const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-edge-'));
    dataDirs.push(dataDir);
    const edge = await startEdge('haproxy', { dataDir });
    const app = await startApp('downtime');
    const slug = 'downtime-00000063';
    await edge.setTargets(slug, [{ instanceId: 'i-1', port: app.port }]);
    for (let i = 0; i < 3; i++) assert.ok(await served(edge, slug, 'downtime'));
    await countedTo(edge, slug, 3);
    // HAProxy not answering on its runtime socket (as while it restarts): the socket moved out of the way.
    const socket = path.join(dataDir, 'edge', 'admin.sock');
    await fs.rename(socket, `${socket}.away`);
    const during = (await edge.stats()).get(slug);
    await fs.rename(`${socket}.away`, socket);
    assert.equal(during?.requests, 3);
    assert.equal(during?.responses['2xx'], 3);
    assert.ok(await served(edge, slug, 'downtime'));
    // Counted on once HAProxy answers again.
    await countedTo(edge, slug, 4);
  });

  test('HAProxy killed with SIGKILL is started again, and route changes after it are served', async () => {
    const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-edge-'));
    dataDirs.push(dataDir);
    const edge = await startEdge('haproxy', { dataDir });
    const first = await startApp('first');
    await edge.setTargets('killed-00000040', [{ instanceId: 'first', port: first.port }]);
    assert.ok(await served(edge, 'killed-00000040', 'first'));

    const pid = await masterPid(dataDir);
    process.kill(pid, 'SIGKILL');
    await eventually(
      'a new HAProxy master',
      async () => {
        const now = await masterPid(dataDir).catch(() => 0);
        return now !== pid && now > 0 && processAlive(now);
      },
      { retryErrors: true },
    );
    await eventually('the route served again', () => served(edge, 'killed-00000040', 'first'), { retryErrors: true });

    // A change after the crash is in force: the new HAProxy, not a leftover worker, serves.
    const second = await startApp('second');
    await edge.setTargets('killed-00000040', [{ instanceId: 'second', port: second.port }], { drainTimeoutMs: 1_000 });
    await first.close();
    for (let i = 0; i < 6; i++)
      assert.ok(await served(edge, 'killed-00000040', 'second'), `request ${i} reaches the new instance`);
    const other = await startApp('other');
    await edge.setTargets('added-00000041', [{ instanceId: 'other', port: other.port }]);
    assert.ok(await served(edge, 'added-00000041', 'other'), 'a route added after the crash is served');
  });

  for (const pidFile of ['written', 'missing'] as const)
    test(`a HAProxy left running by an earlier service on the same data directory is replaced at start (its pid file ${pidFile})`, async () => {
      const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-edge-'));
      dataDirs.push(dataDir);
      // The earlier service: its edge wrote the configuration, and its HAProxy outlived it (started here by
      // hand, outside any supervisor, as a HAProxy whose service was killed would be).
      const earlier = await startEdge('haproxy', { dataDir });
      const port = earlier.port;
      const stale = await startApp('stale');
      await earlier.setTargets('left-00000042', [{ instanceId: 'stale', port: stale.port }]);
      await earlier.close();
      const edgeDir = path.join(dataDir, 'edge');
      const leftover = spawn(HAPROXY, ['-W', '-db', '-f', path.join(edgeDir, 'haproxy.cfg')], {
        detached: true,
        stdio: 'ignore',
      });
      leftover.unref();
      await eventually('the leftover HAProxy serving', () => served(earlier, 'left-00000042', 'stale'), {
        retryErrors: true,
      });

      // A HAProxy still starting has not written its pid file yet; the leftover is found all the same, by
      // its command line, master and worker.
      if (pidFile === 'missing') await fs.rm(path.join(edgeDir, 'haproxy.pid'));
      // Not every process that names the configuration is a HAProxy: an operator following it is left be.
      const reader = spawn('tail', ['-f', path.join(edgeDir, 'haproxy.cfg')], { stdio: 'ignore' });
      const edge = await startEdge('haproxy', { dataDir, port });
      const readerAlive = processAlive(reader.pid!);
      reader.kill('SIGKILL');
      assert.equal(readerAlive, true, 'a `tail -f` of the configuration is not stopped as a leftover');
      const fresh = await startApp('fresh');
      await edge.setTargets('left-00000042', [{ instanceId: 'fresh', port: fresh.port }]);
      for (let i = 0; i < 6; i++)
        assert.ok(await served(edge, 'left-00000042', 'fresh'), `request ${i} is served by the new edge`);
      assert.equal(processAlive(leftover.pid!), false, 'the leftover HAProxy is gone');
    });

  test('a second edge started on the data directory and port of one still running takes over and serves', async () => {
    const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-edge-'));
    dataDirs.push(dataDir);
    const a = await startEdge('haproxy', { dataDir });
    const appA = await startApp('a');
    await a.setTargets('both-00000043', [{ instanceId: 'a', port: appA.port }]);
    const b = await startEdge('haproxy', { dataDir, port: a.port });
    const appB = await startApp('b');
    await b.setTargets('both-00000043', [{ instanceId: 'b', port: appB.port }]);
    await eventually('edge B serving', () => served(b, 'both-00000043', 'b'), { retryErrors: true });
    // Whatever edge A's supervisor does now, B keeps serving and keeps applying its changes.
    await pause(3_000, "edge A's supervisor (another process) has time to act against B");
    const appB2 = await startApp('b2');
    await b.setTargets('both-00000043', [{ instanceId: 'b2', port: appB2.port }], { drainTimeoutMs: 1_000 });
    for (let i = 0; i < 6; i++) assert.ok(await served(b, 'both-00000043', 'b2'), `request ${i} is served by edge B`);
  });
});
