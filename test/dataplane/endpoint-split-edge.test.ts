/**
 * Traffic splits at the app edge (docs/app-urls.md, "Traffic split"), against both edges over real
 * sockets: HAProxy (its split map, rand(), stick table) and the built-in proxy. Plain Node servers stand
 * in for two revisions' instances and answer with their revision; a LangGraph-style path
 * (`/threads/<id>/...`) is answered the same way.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs/promises';
import http, { type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, describe } from 'node:test';
import { startAppEdge, type AppEdge } from '../../src/dataplane/app-edge.ts';
import type { AppTarget } from '../../src/dataplane/app-backends.ts';
import { createLogger } from '../../src/logger.ts';
import { test } from '../support/limited-test.ts';
import { localEdgeConfig } from '../support/edge-config.ts';

const KINDS = ['haproxy', 'builtin'] as const;
const LABEL = 'shop-0123abcd--production';
const cleanups: (() => Promise<void>)[] = [];
after(async () => {
  for (const clean of cleanups.reverse()) await clean();
});

interface Instance {
  target: AppTarget;
  /** Cookie headers the instance received. */
  cookies: string[];
}

/** An instance of `revisionId` answering `{revision}` with `status`. */
async function instance(revisionId: string, status = 200): Promise<Instance> {
  const cookies: string[] = [];
  const server = http.createServer((req, res) => {
    if (req.headers.cookie !== undefined) cookies.push(req.headers.cookie);
    req.resume();
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ revision: revisionId }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
  server.keepAliveTimeout = 60_000;
  const port = (server.address() as AddressInfo).port;
  return { target: { instanceId: `web-${port}`, port, revisionId }, cookies };
}

async function edgeOf(kind: (typeof KINDS)[number]): Promise<AppEdge> {
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-split-'));
  const edge = await startAppEdge({
    config: localEdgeConfig(dataDir, kind, { drainTimeoutMs: 5_000 }),
    logger: createLogger('silent'),
  });
  cleanups.push(async () => {
    await edge.close();
    await fs.rm(dataDir, { recursive: true, force: true });
  });
  return edge;
}

const agent = new http.Agent({ keepAlive: true, maxSockets: 16 });
cleanups.push(async () => agent.destroy());

interface Reply {
  status: number;
  headers: IncomingHttpHeaders;
  revision: string | null;
}

function get(edge: AppEdge, url: string, headers: Record<string, string> = {}): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: '127.0.0.1', port: edge.port, path: url, agent, headers: { host: `${LABEL}.localhost`, ...headers } },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (body += chunk));
        res.on('end', () => {
          let revision: string | null = null;
          try {
            revision = (JSON.parse(body) as { revision?: string }).revision ?? null;
          } catch {
            // The edge's own answer (no revision).
          }
          resolve({ status: res.statusCode ?? 0, headers: res.headers, revision });
        });
      },
    );
    req.on('error', reject);
    req.end();
  });
}

/** The `slipway_split=...` pair of a reply's Set-Cookie, if any. */
function splitCookie(reply: Reply): string | null {
  const line = (reply.headers['set-cookie'] ?? []).find((c) => c.startsWith('slipway_split='));
  return line === undefined ? null : line.split(';')[0]!;
}

/** How far a count of `n` draws with chance `p` may be from n*p: 4 standard deviations (a 1 in 15,000 miss). */
function binomialBound(n: number, p: number): { low: number; high: number } {
  const sigma = Math.sqrt(n * p * (1 - p));
  return { low: n * p - 4 * sigma, high: n * p + 4 * sigma };
}

async function splitRoute(edge: AppEdge, weight: number) {
  const a = randomUUID();
  const b = randomUUID();
  const base = await instance(a);
  const second = await instance(b);
  await edge.setTargets(LABEL, [base.target]);
  await edge.setSplit(LABEL, { baseRevisionId: a, revisionId: b, targets: [second.target], weight });
  return { a, b, base, second };
}

for (const kind of KINDS) {
  describe(`traffic split through the ${kind} edge`, () => {
    test('a 10% split sends about 10% of independent clients to the second revision, and each stays on its revision by its cookie', async () => {
      const edge = await edgeOf(kind);
      const { a, b, base, second } = await splitRoute(edge, 10);
      const clients = 400;
      let onB = 0;
      for (let i = 0; i < clients; i++) {
        const first = await get(edge, `/client/${i}`);
        assert.equal(first.status, 200);
        assert.ok(first.revision === a || first.revision === b, String(first.revision));
        if (first.revision === b) onB += 1;
        const cookie = splitCookie(first);
        assert.equal(cookie, `slipway_split=${first.revision}`, 'the first answer names its revision');
        for (let k = 0; k < 5; k++) {
          const again = await get(edge, `/client/${i}/${k}`, { cookie: `${cookie}; theirs=1` });
          assert.equal(again.revision, first.revision, `client ${i} moved revisions`);
          assert.equal(splitCookie(again), null, 'a client whose cookie names its revision is not given it again');
        }
      }
      const { low, high } = binomialBound(clients, 0.1);
      assert.ok(
        onB >= low && onB <= high,
        `${onB} of ${clients} clients on the 10% revision (expected ${low}-${high})`,
      );
      // The edge's cookie never reaches the apps; the apps' own cookies do.
      for (const seen of [...base.cookies, ...second.cookies]) assert.equal(seen, 'theirs=1');
    });

    test('a client id in X-Slipway-Sticky keeps the client on one revision, about the weight of them on the second', async () => {
      const edge = await edgeOf(kind);
      const { b } = await splitRoute(edge, 30);
      const clients = 200;
      let onB = 0;
      for (let i = 0; i < clients; i++) {
        const id = `client-${i}-${randomUUID()}`;
        const first = await get(edge, '/', { 'x-slipway-sticky': id });
        if (first.revision === b) onB += 1;
        for (let k = 0; k < 4; k++)
          assert.equal((await get(edge, '/', { 'x-slipway-sticky': id })).revision, first.revision);
      }
      const { low, high } = binomialBound(clients, 0.3);
      assert.ok(onB >= low && onB <= high, `${onB} of ${clients} ids on the 30% revision (expected ${low}-${high})`);
    });

    test('each LangGraph thread stays on the revision that first served it, whatever the client sends', async () => {
      const edge = await edgeOf(kind);
      const { a, b } = await splitRoute(edge, 50);
      const threads = Array.from({ length: 60 }, () => randomUUID());
      const first = new Map<string, string>();
      for (const thread of threads) first.set(thread, (await get(edge, `/threads/${thread}/runs`)).revision!);
      assert.ok([...first.values()].includes(a) && [...first.values()].includes(b), 'both revisions serve threads');
      for (const thread of threads) {
        // Another client (another cookie, another sticky id) on the same thread: the thread's revision.
        const other = first.get(thread) === a ? b : a;
        for (const url of [`/threads/${thread}`, `/threads/${thread}/runs/stream`, `/threads/${thread}/state`])
          assert.equal(
            (await get(edge, url, { cookie: `slipway_split=${other}`, 'x-slipway-sticky': randomUUID() })).revision,
            first.get(thread),
            `thread ${thread} moved`,
          );
      }
    });

    test('a split taken back sends every client to the base revision, cookies and threads included', async () => {
      const edge = await edgeOf(kind);
      const { a, b } = await splitRoute(edge, 99);
      await edge.setSplit(LABEL, null);
      for (let i = 0; i < 20; i++) {
        const reply = await get(edge, `/threads/${randomUUID()}/runs`, { cookie: `slipway_split=${b}` });
        assert.equal(reply.revision, a);
        assert.equal(splitCookie(reply), null);
      }
    });

    test('promoting the second revision under load (route to it, then end the split) fails no request', async () => {
      const edge = await edgeOf(kind);
      const { b, second } = await splitRoute(edge, 20);
      let stop = false;
      const failures: string[] = [];
      let sent = 0;
      const load = Array.from({ length: 4 }, async (_, w) => {
        for (let i = 0; i < 10_000 && !stop; i++) {
          sent += 1;
          const reply = await get(edge, `/load/${w}/${i}`).catch((error: Error) => ({ status: 0, error }));
          if (reply.status !== 200) failures.push(JSON.stringify(reply));
        }
      });
      while (sent < 200) await get(edge, '/warm');
      await edge.setTargets(LABEL, [second.target]);
      await edge.setSplit(LABEL, null);
      const after = sent;
      while (sent < after + 200) await get(edge, '/after');
      stop = true;
      await Promise.all(load);
      assert.deepEqual(failures, []);
      assert.equal((await get(edge, '/')).revision, b);
    });
  });
}
