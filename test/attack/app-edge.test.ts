/**
 * Attacks on the app edge (src/dataplane/app-edge.ts) as an outside client and as a tenant whose app
 * misbehaves, against both edges (HAProxy and the built-in Node proxy). Requests are written byte by
 * byte on raw sockets, so malformed and ambiguous forms reach the edge as an attacker would send them.
 * Plain Node HTTP servers on 127.0.0.1 stand in for two tenants' app instances; each answers with what it
 * saw, so a test can tell which app got a request and what reached it.
 *
 * The invariants: a request reaches only the app its Host names (and that app sees that Host); the
 * service's credentials and cookies never reach an app in any spelling the API would accept; a request
 * cannot smuggle a second one past the edge to another app; a backend given to a new app carries no
 * connection of the app it had before; a hanging app does not take the edge from the others.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import http, { type IncomingMessage } from 'node:http';
import net, { type AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, describe } from 'node:test';
import { test } from '../support/limited-test.ts';
import { clientOf, PER_CLIENT_CONNECTIONS, startAppEdge, type AppEdge } from '../../src/dataplane/app-edge.ts';
import { createLogger } from '../../src/logger.ts';
import { eventually } from '../support/wait.ts';
import { localEdgeConfig } from '../support/edge-config.ts';

const KINDS = ['haproxy', 'builtin'] as const;
type Kind = (typeof KINDS)[number];

interface Seen {
  app: string;
  method: string;
  url: string;
  /** The raw header lines the app got, lower-cased names. */
  headers: [string, string][];
  body: string;
}

interface App {
  name: string;
  port: number;
  seen: Seen[];
  /** Requests it holds without answering (a hanging app). */
  held: IncomingMessage[];
}

const closers: (() => Promise<void>)[] = [];
after(async () => {
  for (const close of closers.reverse()) await close();
});

/** An app that answers with what it saw, or (hang) never answers. */
async function startApp(name: string, mode: 'echo' | 'hang' = 'echo'): Promise<App> {
  const app: App = { name, port: 0, seen: [], held: [] };
  const server = http.createServer((req, res) => {
    let body = '';
    req.setEncoding('latin1');
    req.on('data', (chunk: string) => (body += chunk));
    req.on('end', () => {
      const headers: [string, string][] = [];
      for (let i = 0; i + 1 < req.rawHeaders.length; i += 2)
        headers.push([req.rawHeaders[i]!.toLowerCase(), req.rawHeaders[i + 1]!]);
      const seen = { app: name, method: req.method!, url: req.url!, headers, body };
      app.seen.push(seen);
      if (mode === 'hang') {
        app.held.push(req);
        return;
      }
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(seen));
    });
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  app.port = (server.address() as AddressInfo).port;
  closers.push(
    () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  );
  return app;
}

async function startEdge(kind: Kind): Promise<AppEdge> {
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-attack-edge-'));
  const edge = await startAppEdge({
    config: localEdgeConfig(dataDir, kind),
    logger: createLogger('silent'),
  });
  closers.push(async () => {
    await edge.close();
    await fs.rm(dataDir, { recursive: true, force: true });
  });
  return edge;
}

interface RawReply {
  /** Every response on the connection, in order: status and the app that answered (null: the edge). */
  responses: { status: number; app: string | null; body: string }[];
  text: string;
}

/**
 * Writes `text` on a fresh connection and reads every response until the edge closes it or
 * `responses` complete responses came. Responses are parsed with Node's own HTTP parser rules, loosely:
 * status lines and bodies (content-length or chunked).
 */
function rawRequest(port: number, text: string, responses: number): Promise<RawReply> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    let buffer = Buffer.alloc(0);
    const parsed: RawReply['responses'] = [];
    let done = false;
    const finish = () => {
      if (done) return;
      done = true;
      // A response without framing (Node's own 400) ends with the connection.
      const rest = buffer.toString('latin1');
      const status = /^HTTP\/1\.[01] (\d{3})/.exec(rest);
      if (status) parsed.push({ status: Number(status[1]), app: null, body: rest.slice(rest.indexOf('\r\n\r\n') + 4) });
      socket.destroy();
      resolve({ responses: parsed, text: buffer.toString('latin1') });
    };
    const parse = () => {
      for (;;) {
        const text = buffer.toString('latin1');
        const end = text.indexOf('\r\n\r\n');
        if (end < 0) return;
        const head = text.slice(0, end);
        const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(head)?.[1] ?? 0);
        const length = /\r\ncontent-length: *(\d+)/i.exec(head);
        let body: string;
        let consumed: number;
        if (length) {
          const n = Number(length[1]);
          if (text.length < end + 4 + n) return;
          body = text.slice(end + 4, end + 4 + n);
          consumed = end + 4 + n;
        } else if (/\r\ntransfer-encoding: *chunked/i.test(head)) {
          let at = end + 4;
          body = '';
          for (;;) {
            const lineEnd = text.indexOf('\r\n', at);
            if (lineEnd < 0) return;
            const size = parseInt(text.slice(at, lineEnd), 16);
            if (size === 0) {
              if (text.length < lineEnd + 4) return;
              consumed = lineEnd + 4;
              break;
            }
            if (text.length < lineEnd + 2 + size + 2) return;
            body += text.slice(lineEnd + 2, lineEnd + 2 + size);
            at = lineEnd + 2 + size + 2;
          }
        } else {
          return; // read to close
        }
        let app: string | null;
        try {
          app = (JSON.parse(body) as { app?: string }).app ?? null;
        } catch {
          app = null;
        }
        parsed.push({ status, app, body });
        buffer = buffer.subarray(Buffer.byteLength(text.slice(0, consumed), 'latin1'));
        if (parsed.length >= responses) return finish();
      }
    };
    socket.on('data', (chunk: Buffer) => {
      buffer = Buffer.concat([buffer, chunk]);
      parse();
    });
    socket.on('end', finish);
    socket.on('close', finish);
    socket.on('error', (error) => (done ? undefined : parsed.length > 0 ? finish() : reject(error)));
    socket.write(text, 'latin1');
  });
}

/** A GET from another client address (127.0.0.2: the whole 127/8 is the loopback). */
function getFrom(localAddress: string, port: number, host: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.get({ hostname: '127.0.0.1', localAddress, port, headers: { host }, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () => resolve({ status: res.statusCode!, body }));
    });
    req.on('error', reject);
  });
}

function get(port: number, host: string, agent: http.Agent | false = false): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.get({ hostname: '127.0.0.1', port, headers: { host }, agent }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () => resolve({ status: res.statusCode!, body }));
    });
    req.on('error', reject);
  });
}

const A = 'tenant-a-0000000a';
const B = 'tenant-b-0000000b';

for (const kind of KINDS) {
  describe(`attacker against the app edge (${kind})`, { timeout: 180_000 }, () => {
    let edge: AppEdge;
    let appA: App;
    let appB: App;
    const all = () => [...appA.seen, ...appB.seen];

    test('setup: two tenants, one app each', async () => {
      edge = await startEdge(kind);
      appA = await startApp('A');
      appB = await startApp('B');
      await edge.setTargets(A, [{ instanceId: 'a-1', port: appA.port }]);
      await edge.setTargets(B, [{ instanceId: 'b-1', port: appB.port }]);
      const reply = await rawRequest(edge.port, `GET / HTTP/1.1\r\nHost: ${A}.localhost\r\n\r\n`, 1);
      assert.equal(reply.responses[0]?.app, 'A', reply.text);
    });

    test('ambiguous host names reach no app, or only the app the Host it passes on names', async () => {
      const cases: Record<string, string> = {
        'two Host headers': `GET /dup HTTP/1.1\r\nHost: ${A}.localhost\r\nHost: ${B}.localhost\r\n\r\n`,
        'two hosts in one Host header': `GET /comma HTTP/1.1\r\nHost: ${A}.localhost, ${B}.localhost\r\n\r\n`,
        'absolute URI naming the other app': `GET http://${B}.localhost/abs HTTP/1.1\r\nHost: ${A}.localhost\r\n\r\n`,
        'user info before the host': `GET /userinfo HTTP/1.1\r\nHost: x@${B}.localhost\r\n\r\n`,
        'a path in the Host': `GET /pathhost HTTP/1.1\r\nHost: ${A}.localhost/${B}.localhost\r\n\r\n`,
        'HTTP/1.0 without Host': `GET /nohost HTTP/1.0\r\n\r\n`,
        'a host that only ends like the apps domain': `GET /suffix HTTP/1.1\r\nHost: ${B}.localhost.evil.example\r\n\r\n`,
        'the apps domain itself': `GET /bare HTTP/1.1\r\nHost: localhost\r\n\r\n`,
      };
      for (const [what, text] of Object.entries(cases)) {
        const before = all().length;
        const reply = await rawRequest(edge.port, text, 1);
        const reached = all().slice(before);
        assert.ok(reply.responses.length > 0 || reply.text === '', `${what}: ${reply.text}`);
        for (const seen of reached) {
          const hosts = seen.headers.filter(([name]) => name === 'host').map(([, value]) => value);
          const slug = seen.app === 'A' ? A : B;
          assert.deepEqual(
            hosts.map((h) => h.toLowerCase().split(':')[0]),
            [`${slug}.localhost`],
            `${what}: app ${seen.app} got a request whose Host names another: ${JSON.stringify(hosts)}`,
          );
        }
      }
      // The comma form in particular is not routed by one of its parts: a front proxy that checks the
      // Host would see neither name, the edge would pick one.
      const comma = await rawRequest(
        edge.port,
        `GET /comma HTTP/1.1\r\nHost: ${A}.localhost, ${B}.localhost\r\n\r\n`,
        1,
      );
      assert.equal(comma.responses[0]?.status, 404, comma.text);
    });

    test("the service's credentials and cookies never reach an app, whatever the spelling", async () => {
      const secret = 'SECRETsessiontoken42';
      const key = `slw_${secret}`;
      const cases: Record<string, string> = {
        'X-Api-Key folded onto a continuation line': `X-Api-Key:\r\n ${key}`,
        'Authorization with a tab': `Authorization: Bearer\t${key}`,
        'Authorization with spaces around': `Authorization:   Bearer   ${key}  `,
        'Authorization in capitals': `AUTHORIZATION: BEARER ${key}`,
        'two Authorization headers': `Authorization: Basic dXNlcjpwYXNz\r\nAuthorization: Bearer ${key}`,
        'X-Api-Key twice': `X-Api-Key: app-key\r\nX-Api-Key: ${key}`,
        'a cookie folded onto a continuation line': `Cookie: a=1;\r\n slipway_session=${secret}`,
        'a cookie after a tab': `Cookie: a=1;\tslipway_session=${secret}`,
        'a cookie without a space': `Cookie: a=1;slipway_session=${secret}`,
        'a cookie with a space before =': `Cookie: slipway_session =${secret}`,
        'cookies joined with a comma (a proxy that folds Cookie lines)': `Cookie: a=1, slipway_session=${secret}`,
        'cookies joined with a comma, service cookie first': `Cookie: slipway_session=${secret}, a=1`,
        'a cookie in a second Cookie line': `Cookie: a=1\r\nCookie: slipway_session=${secret}`,
        'the secure-prefixed cookie': `Cookie: __Host-slipway_session=${secret}; theme=dark`,
        'five service cookies and then the session': `Cookie: slipway_a=1; slipway_b=2; slipway_c=3; slipway_d=4; x=1; slipway_session=${secret}`,
      };
      for (const [what, header] of Object.entries(cases)) {
        const before = all().length;
        const reply = await rawRequest(
          edge.port,
          `GET /creds HTTP/1.1\r\nHost: ${A}.localhost\r\n${header}\r\n\r\n`,
          1,
        );
        const reached = all().slice(before);
        for (const seen of reached) {
          const leaked = JSON.stringify(seen.headers);
          assert.ok(!leaked.includes(secret), `${what}: app ${seen.app} got the secret: ${leaked}`);
        }
        // Refusing such a request (400) is fine; passing it on without the secret is too.
        assert.ok(reply.responses[0]?.status === 200 || reply.responses[0]?.status === 400, `${what}: ${reply.text}`);
      }
    });

    test('no request smuggled behind another reaches the other app, and pipelined requests go each to their own app', async () => {
      const smuggled = `GET /smuggled HTTP/1.1\r\nHost: ${B}.localhost\r\n\r\n`;
      const bodies = {
        'Content-Length and Transfer-Encoding': `POST /front HTTP/1.1\r\nHost: ${A}.localhost\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n${smuggled}`,
        'Transfer-Encoding and Content-Length': `POST /front HTTP/1.1\r\nHost: ${A}.localhost\r\nTransfer-Encoding: chunked\r\nContent-Length: ${5 + smuggled.length}\r\n\r\n0\r\n\r\n${smuggled}`,
        'an obfuscated Transfer-Encoding': `POST /front HTTP/1.1\r\nHost: ${A}.localhost\r\nContent-Length: ${smuggled.length}\r\nTransfer-Encoding: xchunked\r\n\r\n${smuggled}`,
        'Transfer-Encoding with a space before the colon': `POST /front HTTP/1.1\r\nHost: ${A}.localhost\r\nContent-Length: ${smuggled.length}\r\nTransfer-Encoding : chunked\r\n\r\n${smuggled}`,
        'two Content-Lengths': `POST /front HTTP/1.1\r\nHost: ${A}.localhost\r\nContent-Length: 0\r\nContent-Length: ${smuggled.length}\r\n\r\n${smuggled}`,
      };
      for (const [what, text] of Object.entries(bodies)) {
        const before = all().length;
        const reply = await rawRequest(edge.port, text, 2);
        const reached = all().slice(before);
        // The second request on the connection is the client's own (it wrote it): it may be answered, but
        // only by the app its Host names, and the front request's body carries nothing to app A's parser
        // that makes A see a request it was not sent.
        for (const seen of reached) {
          if (seen.url === '/smuggled') assert.equal(seen.app, 'B', `${what}: A got the smuggled request`);
          if (seen.app === 'A') assert.equal(seen.url, '/front', `${what}: A saw ${seen.url}`);
        }
        for (const r of reply.responses) if (r.app !== null) assert.ok(r.status < 500, `${what}: ${reply.text}`);
      }
      const pipelined = await rawRequest(
        edge.port,
        `GET /1 HTTP/1.1\r\nHost: ${A}.localhost\r\n\r\nGET /2 HTTP/1.1\r\nHost: ${B}.localhost\r\n\r\nGET /3 HTTP/1.1\r\nHost: ${A}.localhost\r\n\r\n`,
        3,
      );
      assert.deepEqual(
        pipelined.responses.map((r) => [r.app, (JSON.parse(r.body) as Seen).url]),
        [
          ['A', '/1'],
          ['B', '/2'],
          ['A', '/3'],
        ],
      );
    });

    test('a backend given to a new app carries no kept-alive connection of the app it had before', async () => {
      const old = await startApp('OLD');
      const fresh = await startApp('NEW');
      const oldSlug = 'old-app-000000c1';
      const newSlug = 'new-app-000000c2';
      await edge.setTargets(oldSlug, [{ instanceId: 'old-1', port: old.port }]);
      const agent = new http.Agent({ keepAlive: true, maxSockets: 8 });
      // Several connections at once, so the edge keeps several idle ones to the old app.
      await Promise.all(Array.from({ length: 8 }, () => get(edge.port, `${oldSlug}.localhost`, agent)));
      // The old app stays up (its instance may take a while to stop): only the route goes.
      await edge.remove(oldSlug);
      await edge.setTargets(newSlug, [{ instanceId: 'new-1', port: fresh.port }]);
      const answers = new Set<string>();
      for (let i = 0; i < 24; i++) {
        const reply = await get(edge.port, `${newSlug}.localhost`, i % 2 === 0 ? agent : false);
        answers.add((JSON.parse(reply.body) as Seen).app);
      }
      agent.destroy();
      assert.deepEqual([...answers], ['NEW'], "the new app's host was answered by the old app");
      const gone = await get(edge.port, `${oldSlug}.localhost`);
      assert.equal(gone.status, 404);
    });

    test("an app's malformed answers (extra bytes, a second response) never become another app's response on a shared client connection", async () => {
      // A tenant's app that writes its own bytes on the socket: a short answer followed by a forged one.
      const forger = net.createServer((socket) => {
        socket.on('error', () => {});
        socket.once('data', () => {
          socket.write(
            'HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: keep-alive\r\n\r\nhello' +
              'HTTP/1.1 200 OK\r\nContent-Length: 16\r\nContent-Type: application/json\r\n\r\n{"app":"FORGED"}',
          );
        });
      });
      await new Promise<void>((resolve) => forger.listen(0, '127.0.0.1', resolve));
      closers.push(() => new Promise<void>((resolve) => forger.close(() => resolve())));
      const forgerSlug = 'forger-000000e1';
      await edge.setTargets(forgerSlug, [{ instanceId: 'f-1', port: (forger.address() as AddressInfo).port }]);
      // One client connection (a front proxy's, say) carrying requests for two apps in turn.
      const reply = await rawRequest(
        edge.port,
        `GET /forge HTTP/1.1\r\nHost: ${forgerSlug}.localhost\r\n\r\nGET /after HTTP/1.1\r\nHost: ${B}.localhost\r\n\r\n`,
        2,
      );
      assert.equal(reply.responses[0]?.body, 'hello', reply.text);
      assert.ok(!reply.text.includes('FORGED'), `the forged response reached the client: ${reply.text}`);
      if (reply.responses.length > 1) assert.equal(reply.responses[1]!.app, 'B', reply.text);
      // And the next request to the forger does not get the forged bytes either.
      const again = await rawRequest(edge.port, `GET /again HTTP/1.1\r\nHost: ${forgerSlug}.localhost\r\n\r\n`, 1);
      assert.ok(!again.text.includes('FORGED'), `a later request got the forged response: ${again.text}`);
    });

    test('one client cannot hold the edge: past its share of connections, its new ones are closed, and other clients are served', async () => {
      const extra = 100;
      const sockets: net.Socket[] = [];
      const closedEarly = new Set<net.Socket>();
      for (let i = 0; i < PER_CLIENT_CONNECTIONS + extra; i++) {
        // From an address of its own: the other tests' connections from 127.0.0.1 do not count here.
        const socket = net.connect({ port: edge.port, host: '127.0.0.1', localAddress: '127.0.0.3' });
        socket.on('error', () => {});
        socket.once('close', () => closedEarly.add(socket));
        sockets.push(socket);
        if (i % 200 === 199) await new Promise((resolve) => setTimeout(resolve, 20));
      }
      await Promise.all(
        sockets.map((socket) =>
          socket.connecting
            ? new Promise((resolve) => socket.once('connect', resolve).once('close', resolve))
            : Promise.resolve(),
        ),
      );
      // Another client is served while the first holds its connections.
      const other = await getFrom('127.0.0.2', edge.port, `${B}.localhost`);
      assert.equal((JSON.parse(other.body) as Seen).app, 'B');
      // Each of the flooding client's connections asks for an app: only its share is answered.
      const answered = await Promise.all(
        sockets.map(
          (socket) =>
            new Promise<boolean>((resolve) => {
              if (socket.destroyed || closedEarly.has(socket)) return resolve(false);
              socket.once('data', () => resolve(true));
              socket.once('close', () => resolve(false));
              socket.write(`GET /flood HTTP/1.1\r\nHost: ${B}.localhost\r\n\r\n`);
            }),
        ),
      );
      for (const socket of sockets) socket.destroy();
      const count = answered.filter(Boolean).length;
      assert.ok(count <= PER_CLIENT_CONNECTIONS, `${count} connections of one client were served`);
      assert.ok(count >= PER_CLIENT_CONNECTIONS - 50, `only ${count} of its connections were served`);
      assert.equal(clientOf('2001:db8:1:2::7'), clientOf('2001:db8:1:2:ffff::1'), 'an IPv6 /64 is one client');
      assert.notEqual(clientOf('2001:db8:1:3::7'), clientOf('2001:db8:1:2::7'));
    });

    test("an app that never answers, with hundreds of requests stuck in it, does not take the edge from another tenant's app", async () => {
      const hung = await startApp('HUNG', 'hang');
      const hungSlug = 'hung-app-000000d1';
      await edge.setTargets(hungSlug, [{ instanceId: 'h-1', port: hung.port }]);
      const sockets: net.Socket[] = [];
      const stuck = 300;
      for (let i = 0; i < stuck; i++) {
        const socket = net.connect(edge.port, '127.0.0.1');
        socket.on('error', () => {});
        socket.write(`GET /wait/${i} HTTP/1.1\r\nHost: ${hungSlug}.localhost\r\n\r\n`);
        sockets.push(socket);
      }
      // And slow clients that never finish their request heads.
      for (let i = 0; i < 100; i++) {
        const socket = net.connect(edge.port, '127.0.0.1');
        socket.on('error', () => {});
        socket.write(`GET /slow HTTP/1.1\r\nHost: ${A}.localhost\r\nX-Slow: `);
        sockets.push(socket);
      }
      await eventually('the hanging app to hold every request', () => hung.held.length === stuck, {
        seconds: 60,
        everyMs: 50,
        describe: () => `it holds ${hung.held.length} of ${stuck}`,
      });
      for (let i = 0; i < 20; i++) {
        const reply = await rawRequest(edge.port, `GET /ok HTTP/1.1\r\nHost: ${B}.localhost\r\n\r\n`, 1);
        assert.equal(reply.responses[0]?.app, 'B', reply.text);
      }
      // A huge request head is refused without harm to the others.
      const huge = await rawRequest(
        edge.port,
        `GET / HTTP/1.1\r\nHost: ${B}.localhost\r\nX-Big: ${'x'.repeat(200_000)}\r\n\r\n`,
        1,
      ).catch(() => ({ responses: [], text: 'reset' }));
      assert.ok(
        huge.responses.length === 0 || [400, 413, 431].includes(huge.responses[0]!.status),
        `a 200 kB head: ${huge.text.slice(0, 200)}`,
      );
      for (const socket of sockets) socket.destroy();
      const after = await rawRequest(edge.port, `GET /after HTTP/1.1\r\nHost: ${B}.localhost\r\n\r\n`, 1);
      assert.equal(after.responses[0]?.app, 'B');
    });
  });
}
