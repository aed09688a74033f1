/**
 * The reverse proxy in front of deployed apps, end to end over real sockets: a small Fastify API made
 * with appServerFactory listens on 127.0.0.1, and plain Node HTTP servers on port 0 stand in for the
 * app processes. Requests are sent with node:http so the Host header can name an app.
 */
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import http, { type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { after, describe, test } from 'node:test';
import Fastify, { type FastifyInstance } from 'fastify';
import { createAppRouter, type AppRouter } from '../../src/dataplane/app-router.ts';
import { appServerFactory } from '../../src/dataplane/app-server-factory.ts';
import { registerErrorHandler } from '../../src/http/error-handler.ts';
import { createLogger } from '../../src/logger.ts';

const WS_GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11';

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
    const accept = createHash('sha1').update(`${req.headers['sec-websocket-key']}${WS_GUID}`).digest('base64');
    socket.write(
      `HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n\r\n`,
    );
    if (head.length > 0) socket.write(head);
    socket.pipe(socket);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  app.port = (server.address() as AddressInfo).port;
  app.close = () =>
    new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
      for (const socket of upgraded) socket.destroy();
    });
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
// The service: a small API with the router in front.

interface Front {
  app: FastifyInstance;
  router: AppRouter;
  port: number;
  close(): Promise<void>;
}

async function startFront(drainTimeoutMs = 10_000): Promise<Front> {
  const router = createAppRouter({ appsDomain: 'localhost', logger: createLogger('silent'), drainTimeoutMs });
  const app = Fastify({ serverFactory: appServerFactory(router) });
  registerErrorHandler(app);
  app.get('/v2/ping', async (request) => ({ pong: true, upgrade: request.headers.upgrade ?? null }));
  app.post('/v2/echo', async (request) => ({ body: request.body }));
  await app.listen({ port: 0, host: '127.0.0.1' });
  const front = {
    app,
    router,
    port: (app.server.address() as AddressInfo).port,
    close: async () => {
      await app.close();
      await router.close();
    },
  };
  started.push(front);
  return front;
}

after(async () => {
  for (const s of started.reverse()) await s.close();
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
  /** The Host header; defaults to the service's own address. */
  host?: string;
  headers?: Record<string, string>;
  body?: string;
  agent?: http.Agent;
}

function call(port: number, options: Call = {}): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        hostname: '127.0.0.1',
        port,
        method: options.method ?? 'GET',
        path: options.path ?? '/',
        headers: { host: options.host ?? `127.0.0.1:${port}`, ...options.headers },
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

const appHost = (slug: string, port: number) => `${slug}.localhost:${port}`;

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
function openWebSocket(port: number, path: string, host = `127.0.0.1:${port}`): Promise<WebSocketReply> {
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

// ---------------------------------------------------------------------------------------------------

describe('app router', { timeout: 120_000 }, () => {
  test('host-based: the app gets the whole path, the query and X-Forwarded-*, and its answer comes back as sent', async () => {
    const front = await startFront();
    const app = await startApp('hosted', (_req, res) => {
      res.writeHead(201, [
        ['x-app', 'yes'],
        ['set-cookie', 'a=1'],
        ['set-cookie', 'b=2'],
        ['content-type', 'text/plain'],
      ]);
      res.end('created');
    });
    await front.router.setTargets('hosted-0000000a', [{ instanceId: 'i-1', port: app.port }]);
    const host = appHost('hosted-0000000a', front.port);
    const reply = await call(front.port, {
      path: '/threads/1?x=2&y=%2F',
      host,
      headers: {
        'x-forwarded-for': '203.0.113.9',
        'x-forwarded-prefix': '/spoofed',
        'x-forwarded-host': 'evil.example',
      },
    });
    assert.equal(reply.status, 201);
    assert.equal(reply.body, 'created');
    assert.equal(reply.headers['x-app'], 'yes');
    assert.deepEqual(reply.headers['set-cookie'], ['a=1', 'b=2']);
    const seen = app.seen.at(-1)!;
    assert.equal(seen.url, '/threads/1?x=2&y=%2F');
    assert.equal(seen.headers.host, host, 'the app sees the Host the user asked for');
    assert.equal(seen.headers['x-forwarded-host'], host);
    assert.equal(seen.headers['x-forwarded-proto'], 'http');
    assert.equal(seen.headers['x-forwarded-for'], '203.0.113.9, 127.0.0.1');
    assert.equal(seen.headers['x-forwarded-prefix'], undefined, 'a client cannot make up a prefix');
    // An app at the root of its host keeps /apps/... paths of its own.
    await call(front.port, { path: '/apps/other-12345678/x', host });
    assert.equal(app.seen.at(-1)!.url, '/apps/other-12345678/x');
  });

  test('path-based: /apps/<slug> is stripped, X-Forwarded-Prefix is set, bodies reach the app', async () => {
    const front = await startFront();
    const app = await startApp('pathed');
    await front.router.setTargets('pathed-0000000b', [{ instanceId: 'i-1', port: app.port }]);
    const posted = await call(front.port, {
      method: 'POST',
      path: '/apps/pathed-0000000b/items?q=1',
      headers: { 'content-type': 'application/json' },
      body: '{"title":"hello"}',
    });
    assert.equal(posted.status, 200);
    const seen = posted.json<{ method: string; url: string; body: string; headers: IncomingHttpHeaders }>();
    assert.equal(seen.method, 'POST');
    assert.equal(seen.url, '/items?q=1');
    assert.equal(seen.body, '{"title":"hello"}');
    assert.equal(seen.headers['x-forwarded-prefix'], '/apps/pathed-0000000b');
    assert.equal(seen.headers['x-forwarded-host'], `127.0.0.1:${front.port}`);
    assert.equal(seen.headers['x-forwarded-proto'], 'http');
    assert.equal(seen.headers['x-forwarded-for'], '127.0.0.1');
    assert.equal((await call(front.port, { path: '/apps/pathed-0000000b/' })).json().url, '/');
  });

  test('/apps/<slug> without the trailing slash redirects (308) to /apps/<slug>/, keeping the query', async () => {
    const front = await startFront();
    const app = await startApp('redirected');
    await front.router.setTargets('redirected-0000000c', [{ instanceId: 'i-1', port: app.port }]);
    const plain = await call(front.port, { path: '/apps/redirected-0000000c' });
    assert.equal(plain.status, 308);
    assert.equal(plain.headers.location, '/apps/redirected-0000000c/');
    const query = await call(front.port, { method: 'POST', path: '/apps/redirected-0000000c?x=1', body: '' });
    assert.equal(query.status, 308);
    assert.equal(query.headers.location, '/apps/redirected-0000000c/?x=1');
    assert.equal(app.seen.length, 0, 'the app saw none of it');
  });

  test('requests that are not for an app reach the API as before', async () => {
    const front = await startFront();
    const app = await startApp('bystander');
    await front.router.setTargets('bystander-0000000d', [{ instanceId: 'i-1', port: app.port }]);
    const ping = await call(front.port, { path: '/v2/ping' });
    assert.equal(ping.status, 200);
    assert.deepEqual(ping.json(), { pong: true, upgrade: null });
    assert.equal(
      (await call(front.port, { path: '/v2/ping', host: `localhost:${front.port}` })).status,
      200,
      'the apps domain itself is the service',
    );
    assert.equal(
      (await call(front.port, { path: '/v2/ping', host: 'bystander-0000000d.example.org' })).status,
      200,
      'another domain is the service',
    );
    for (const path of ['/apps', '/apps/', '/apps/not-a-slug/', '/v2/nothing']) {
      const reply = await call(front.port, { path });
      assert.equal(reply.status, 404, path);
      assert.equal(reply.json().code, 'route_not_found', `${path} is answered by the API`);
    }
    const echoed = await call(front.port, {
      method: 'POST',
      path: '/v2/echo',
      headers: { 'content-type': 'application/json' },
      body: '{"a":1}',
    });
    assert.deepEqual(echoed.json(), { body: { a: 1 } });
    assert.equal(app.seen.length, 0);
  });

  test('an Upgrade that is not a WebSocket for an app (curl --http2 sends h2c) is served as a plain request', async () => {
    const front = await startFront();
    const app = await startApp('plain');
    await front.router.setTargets('plain-0000000e', [{ instanceId: 'i-1', port: app.port }]);
    const h2c = { connection: 'Upgrade, HTTP2-Settings', upgrade: 'h2c', 'http2-settings': 'AAMAAABkAAQCAAAAAAIAAAAA' };
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    try {
      const api = await call(front.port, { path: '/v2/ping', headers: h2c, agent });
      assert.equal(api.status, 200);
      assert.deepEqual(api.json(), { pong: true, upgrade: null });
      const posted = await call(front.port, {
        method: 'POST',
        path: '/v2/echo',
        headers: { ...h2c, 'content-type': 'application/json' },
        body: '{"b":2}',
        agent,
      });
      assert.deepEqual(posted.json(), { body: { b: 2 } }, 'the body survives');
      const toApp = await call(front.port, {
        method: 'POST',
        path: '/apps/plain-0000000e/form',
        headers: h2c,
        body: 'x=1',
        agent,
      });
      assert.equal(toApp.status, 200);
      const seen = toApp.json<Seen>();
      assert.equal(seen.url, '/form');
      assert.equal(seen.body, 'x=1');
      assert.equal(seen.headers.upgrade, undefined);
      // A WebSocket handshake to an API path gets the API's answer too, as it did without the router.
      const ws = await openWebSocket(front.port, '/v2/nothing');
      assert.equal(ws.status, 404);
      assert.equal(JSON.parse(ws.body).code, 'route_not_found');
      // And the connection is still good for the next request.
      assert.equal((await call(front.port, { path: '/v2/ping', agent })).status, 200);
    } finally {
      agent.destroy();
    }
  });

  test("an app that closes each connection does not close the client's connection to the service", async () => {
    const front = await startFront();
    const app = await startApp('closer', (_req, res) => {
      res.writeHead(200, { connection: 'close', 'content-type': 'text/plain' });
      res.end('bye');
    });
    await front.router.setTargets('closer-0000001d', [{ instanceId: 'i-1', port: app.port }]);
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    try {
      const sockets = new Set<unknown>();
      for (let i = 0; i < 3; i++) {
        const reply = await new Promise<{ body: string; connection: string | undefined }>((resolve, reject) => {
          const req = http.get(
            { hostname: '127.0.0.1', port: front.port, path: '/apps/closer-0000001d/', agent },
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

  test('an unknown slug is 404 not_found in the API error shape, with a request id', async () => {
    const front = await startFront();
    for (const options of [
      { host: appHost('nobody-0000000f', front.port), path: '/' },
      { path: '/apps/nobody-0000000f/x' },
    ]) {
      const reply = await call(front.port, { ...options, headers: { 'x-request-id': 'req-404' } });
      assert.equal(reply.status, 404);
      assert.match(String(reply.headers['content-type']), /^application\/json/);
      assert.deepEqual(reply.json(), { detail: 'No deployment is served at nobody-0000000f.', code: 'not_found' });
      assert.equal(reply.headers['x-request-id'], 'req-404');
    }
    const generated = await call(front.port, { path: '/apps/nobody-0000000f/' });
    assert.match(String(generated.headers['x-request-id']), /^[0-9a-f-]{36}$/);
  });

  test('a known slug without instances yet is 503 unavailable', async () => {
    const front = await startFront();
    await front.router.setTargets('deploying-00000010', []);
    const reply = await call(front.port, { path: '/apps/deploying-00000010/' });
    assert.equal(reply.status, 503);
    assert.equal(reply.json().code, 'unavailable');
    assert.match(String(reply.json().detail), /deploying-00000010/);
    assert.deepEqual(front.router.targets('deploying-00000010'), []);
  });

  test('instances that refuse connections: 502 bad_gateway, and requests go to one that answers', async () => {
    const front = await startFront();
    const dead = await deadPort();
    await front.router.setTargets('flaky-00000011', [{ instanceId: 'gone', port: dead }]);
    for (const options of [
      { path: '/apps/flaky-00000011/' },
      { method: 'POST', path: '/apps/flaky-00000011/x', body: 'payload' },
    ]) {
      const reply = await call(front.port, options);
      assert.equal(reply.status, 502);
      assert.equal(reply.json().code, 'bad_gateway');
      assert.match(String(reply.json().detail), /flaky-00000011/);
    }
    const live = await startApp('live');
    await front.router.setTargets('flaky-00000011', [
      { instanceId: 'gone', port: dead },
      { instanceId: 'live', port: live.port },
    ]);
    for (let i = 0; i < 6; i++) {
      const reply = await call(front.port, { path: `/apps/flaky-00000011/${i}` });
      assert.equal(reply.status, 200, `request ${i}: ${reply.body}`);
      assert.equal(reply.json().name, 'live');
    }
    assert.equal((await call(front.port, { path: '/v2/ping' })).status, 200, 'the service is unharmed');
  });

  test('requests are spread round-robin over the instances', async () => {
    const front = await startFront();
    const one = await startApp('one');
    const two = await startApp('two');
    await front.router.setTargets('spread-00000012', [
      { instanceId: 'one', port: one.port },
      { instanceId: 'two', port: two.port },
    ]);
    const names: string[] = [];
    for (let i = 0; i < 6; i++)
      names.push(String((await call(front.port, { path: '/apps/spread-00000012/' })).json().name));
    assert.equal(names.filter((n) => n === 'one').length, 3, names.join());
    assert.equal(names.filter((n) => n === 'two').length, 3, names.join());
    assert.deepEqual(front.router.targets('spread-00000012'), [
      { instanceId: 'one', port: one.port },
      { instanceId: 'two', port: two.port },
    ]);
  });

  test('an instance that dies mid-answer: the client sees a cut response, not a hang, and the service goes on', async () => {
    const front = await startFront();
    const app = await startApp('dying', (req, res) => {
      if (req.url === '/fixed') res.writeHead(200, { 'content-length': '100' });
      else res.writeHead(200, { 'content-type': 'text/plain' });
      res.write('partial');
      setImmediate(() => req.socket.destroy());
    });
    await front.router.setTargets('dying-00000013', [{ instanceId: 'i-1', port: app.port }]);
    for (const path of ['/apps/dying-00000013/fixed', '/apps/dying-00000013/chunked']) {
      const outcome = await new Promise<{ complete: boolean; body: string }>((resolve, reject) => {
        const req = http.get({ hostname: '127.0.0.1', port: front.port, path, agent: false }, (res) => {
          let body = '';
          res.on('data', (chunk: Buffer) => (body += chunk.toString()));
          res.on('error', () => {});
          res.on('close', () => resolve({ complete: res.complete, body }));
        });
        req.on('error', reject);
      });
      assert.equal(outcome.complete, false, path);
      assert.equal(outcome.body, 'partial');
    }
    assert.equal((await call(front.port, { path: '/v2/ping' })).status, 200);
  });

  test('a client that leaves mid-stream ends the request to the app too', async () => {
    const front = await startFront();
    const appSawClose = deferred();
    const app = await startApp('stream', (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('data: first\n\n');
      res.on('close', () => appSawClose.resolve());
    });
    await front.router.setTargets('stream-00000014', [{ instanceId: 'i-1', port: app.port }]);
    await new Promise<void>((resolve, reject) => {
      const req = http.get(
        { hostname: '127.0.0.1', port: front.port, path: '/apps/stream-00000014/events', agent: false },
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
    await front.router.remove('stream-00000014');
    assert.equal((await call(front.port, { path: '/apps/stream-00000014/' })).status, 404);
  });

  test('streaming answers (SSE, chunked) reach the client chunk by chunk, as the app writes them', async () => {
    const front = await startFront();
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
    await front.router.setTargets('sse-00000015', [{ instanceId: 'i-1', port: app.port }]);
    for (const [options, marks] of [
      [{ host: appHost('sse-00000015', front.port), path: '/events' }, ['data: one', 'data: two', 'data: three']],
      [{ host: `127.0.0.1:${front.port}`, path: '/apps/sse-00000015/chunked' }, ['one;', 'two;', 'three;']],
    ] as const) {
      received[0] = deferred();
      received[1] = deferred();
      const result = await new Promise<{ text: string; type: string | undefined; encoding: string | undefined }>(
        (resolve, reject) => {
          const req = http.get(
            {
              hostname: '127.0.0.1',
              port: front.port,
              path: options.path,
              headers: { host: options.host },
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
      if (options.path === '/events') assert.equal(result.type, 'text/event-stream');
    }
  });

  test('WebSockets: host-based and path-based handshakes reach the app and carry data both ways', async () => {
    const front = await startFront();
    const app = await startApp('ws');
    await front.router.setTargets('ws-00000016', [{ instanceId: 'i-1', port: app.port }]);

    const hosted = await openWebSocket(front.port, '/socket?room=1', appHost('ws-00000016', front.port));
    assert.equal(hosted.status, 101);
    assert.ok(hosted.acceptOk, "the app's Sec-WebSocket-Accept comes through");
    assert.equal(await roundTrip(hosted.socket!, 'hello over host'), 'hello over host');
    assert.equal(app.seen.at(-1)!.url, '/socket?room=1');
    assert.equal(app.seen.at(-1)!.headers['x-forwarded-host'], appHost('ws-00000016', front.port));

    const pathed = await openWebSocket(front.port, '/apps/ws-00000016/socket?room=2');
    assert.equal(pathed.status, 101);
    assert.equal(await roundTrip(pathed.socket!, 'hello over path'), 'hello over path');
    assert.equal(app.seen.at(-1)!.url, '/socket?room=2');
    assert.equal(app.seen.at(-1)!.headers['x-forwarded-prefix'], '/apps/ws-00000016');

    // Several messages on one connection, both directions still open.
    assert.equal(await roundTrip(pathed.socket!, 'again'), 'again');
    hosted.socket!.end();
    pathed.socket!.end();
    await Promise.all([closed(hosted.socket!), closed(pathed.socket!)]);
  });

  test('WebSocket handshakes that cannot go through get an HTTP answer and a closed socket', async () => {
    const front = await startFront();
    const unknown = await openWebSocket(front.port, '/apps/nobody-00000017/socket');
    assert.equal(unknown.status, 404);
    assert.equal(JSON.parse(unknown.body).code, 'not_found');

    await front.router.setTargets('waiting-00000017', []);
    const waiting = await openWebSocket(front.port, '/', appHost('waiting-00000017', front.port));
    assert.equal(waiting.status, 503);
    assert.equal(JSON.parse(waiting.body).code, 'unavailable');

    await front.router.setTargets('dead-00000017', [{ instanceId: 'gone', port: await deadPort() }]);
    const dead = await openWebSocket(front.port, '/apps/dead-00000017/socket');
    assert.equal(dead.status, 502);
    assert.equal(JSON.parse(dead.body).code, 'bad_gateway');
    assert.equal((await call(front.port, { path: '/v2/ping' })).status, 200);
  });

  test('setTargets waits for requests in flight to the old instance, while new requests already go to the new one', async () => {
    const front = await startFront();
    const release = deferred();
    const inside = deferred();
    const old = await startApp('old', async (_req, res) => {
      inside.resolve();
      await release.promise;
      res.end('old answer');
    });
    const fresh = await startApp('new');
    await front.router.setTargets('switch-00000018', [{ instanceId: 'old', port: old.port }]);

    const slow = call(front.port, { path: '/apps/switch-00000018/slow' });
    await inside.promise;
    let drained = false;
    const switching = front.router
      .setTargets('switch-00000018', [{ instanceId: 'new', port: fresh.port }])
      .then(() => (drained = true));
    assert.deepEqual(
      front.router.targets('switch-00000018'),
      [{ instanceId: 'new', port: fresh.port }],
      'the table changes at once',
    );
    const quick = await call(front.port, { path: '/apps/switch-00000018/quick' });
    assert.equal(quick.json().name, 'new');
    assert.equal(drained, false, 'the old instance still has a request in flight');

    release.resolve();
    const slowReply = await slow;
    await switching;
    assert.equal(slowReply.status, 200);
    assert.equal(slowReply.body, 'old answer');
    assert.equal(drained, true);
  });

  test('under a steady stream of requests, switching instances loses none', async () => {
    const front = await startFront();
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
    await front.router.setTargets(slug, [{ instanceId: 'old', port: old.port }]);

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
          // POSTs with a body: the router never sends those twice, so only the drain can save them.
          const reply = await call(front.port, {
            method: 'POST',
            path: `/apps/${slug}/work/${index}/${n}`,
            body: `job ${n}`,
            agent,
          });
          if (reply.status === 200) servedBy[index]!.push(String(reply.json().name));
          else failures.push(`${reply.status} ${reply.body}`);
        } catch (error) {
          failures.push(String(error));
        }
        if (++completed === switchAt) trigger.resolve();
      }
    };
    const switching = trigger.promise.then(async () => {
      while (oldActive === 0) await oldArrival.promise;
      oldActiveAtSwitch = oldActive;
      await front.router.setTargets(slug, [{ instanceId: 'new', port: fresh.port }]);
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
    const front = await startFront();
    const old = await startApp('old');
    const fresh = await startApp('new');
    await front.router.setTargets('sockets-0000001a', [{ instanceId: 'old', port: old.port }]);
    const ws = await openWebSocket(front.port, '/apps/sockets-0000001a/live');
    assert.equal(ws.status, 101);

    await front.router.setTargets('sockets-0000001a', [{ instanceId: 'new', port: fresh.port }], {
      drainTimeoutMs: 50,
    });
    assert.equal(
      await roundTrip(ws.socket!, 'still here'),
      'still here',
      'the old connection is not cut by the switch',
    );
    const next = await openWebSocket(front.port, '/apps/sockets-0000001a/live');
    assert.equal(next.status, 101);
    assert.equal(fresh.seen.at(-1)!.url, '/live', 'a new connection goes to the new instance');

    await front.router.remove('sockets-0000001a', { drainTimeoutMs: 50 });
    assert.equal((await call(front.port, { path: '/apps/sockets-0000001a/' })).status, 404);
    ws.socket!.destroy();
    next.socket!.destroy();
  });

  test('router.close(): app requests get 503, WebSockets are closed, the API still answers', async () => {
    const front = await startFront(1_000);
    const app = await startApp('closing');
    await front.router.setTargets('closing-0000001b', [{ instanceId: 'i-1', port: app.port }]);
    const ws = await openWebSocket(front.port, '/apps/closing-0000001b/');
    assert.equal(ws.status, 101);

    await front.router.close();
    await closed(ws.socket!);
    const reply = await call(front.port, { path: '/apps/closing-0000001b/' });
    assert.equal(reply.status, 503);
    assert.equal(reply.json().code, 'unavailable');
    assert.equal((await call(front.port, { path: '/v2/ping' })).status, 200);
    await front.router.close(); // idempotent
  });

  test('closing the service does not hang on an open WebSocket or an endless stream', async () => {
    const front = await startFront(50);
    const app = await startApp('endless', (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('data: forever\n\n');
    });
    await front.router.setTargets('endless-0000001c', [{ instanceId: 'i-1', port: app.port }]);
    const ws = await openWebSocket(front.port, '/apps/endless-0000001c/');
    assert.equal(ws.status, 101);
    const stream = await new Promise<IncomingMessage>((resolve, reject) => {
      const req = http.get(
        { hostname: '127.0.0.1', port: front.port, path: '/apps/endless-0000001c/events', agent: false },
        (res) => res.once('data', () => resolve(res)),
      );
      req.on('error', reject);
    });
    const streamEnded = new Promise<boolean>((resolve) => {
      stream.on('error', () => {});
      stream.on('close', () => resolve(stream.complete));
    });

    await front.app.close();
    await closed(ws.socket!);
    assert.equal(await streamEnded, false, 'the endless stream was cut after the drain time');
  });
});
