/**
 * Attacker: a client that names far more LangGraph thread ids than the edge keeps pins for, against both
 * edges (docs/app-urls.md, "Traffic split", what stickiness cannot promise). Its made-up threads push
 * other conversations' pins out of the table; what must hold is what the docs say: the table never holds
 * more than its size (memory does not grow with the flood), and a conversation whose pin went is placed
 * again where it was as long as the split's weight has not changed (a client sending the same cookie,
 * header, or neither), so the flood moves no one's conversation.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, describe } from 'node:test';
import { startAppEdge, type AppEdge } from '../../src/dataplane/app-edge.ts';
import { findExecutable } from '../../src/dataplane/executables.ts';
import { createLogger } from '../../src/logger.ts';
import { test } from '../support/limited-test.ts';

const LABEL = 'shop-0123abcd--production';
/** A small table, so that the flood is many times its size in a few thousand requests. */
const PINS = 200;
const cleanups: (() => Promise<void>)[] = [];
after(async () => {
  for (const clean of cleanups.reverse()) await clean();
});

async function instance(revisionId: string): Promise<number> {
  const server = http.createServer((req, res) => {
    req.resume();
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ revision: revisionId }));
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return (server.address() as AddressInfo).port;
}

async function edgeOf(kind: 'haproxy' | 'builtin'): Promise<AppEdge> {
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-flood-'));
  const edge = await startAppEdge({
    config: {
      dataDir,
      appsDomain: 'localhost',
      appsHost: '127.0.0.1',
      appsPort: 0,
      appsPublicUrl: null,
      appsTls: null,
      edgeProxy: kind,
      drainTimeoutMs: 2_000,
    },
    logger: createLogger('silent'),
    threadPins: PINS,
  });
  cleanups.push(async () => {
    await edge.close();
    await fs.rm(dataDir, { recursive: true, force: true });
  });
  return edge;
}

const agent = new http.Agent({ keepAlive: true, maxSockets: 8 });
cleanups.push(async () => agent.destroy());

/** The revision that answered a request for the path (no cookie, no sticky header: a LangGraph SDK's client). */
function revisionOf(edge: AppEdge, url: string): Promise<string> {
  return new Promise((resolve, reject) => {
    http
      .get({ host: '127.0.0.1', port: edge.port, path: url, agent, headers: { host: `${LABEL}.localhost` } }, (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (body += chunk));
        res.on('end', () => resolve((JSON.parse(body) as { revision: string }).revision));
      })
      .on('error', reject);
  });
}

const kinds = (await findExecutable('haproxy')) === null ? (['builtin'] as const) : (['haproxy', 'builtin'] as const);

for (const kind of kinds)
  describe(`a thread-id flood through the ${kind} edge`, () => {
    test('many made-up threads keep the pin table at its size and move no other conversation', async () => {
      const edge = await edgeOf(kind);
      const a = randomUUID();
      const b = randomUUID();
      await edge.setTargets(LABEL, [{ instanceId: 'a-0', port: await instance(a), revisionId: a }]);
      await edge.setSplit(LABEL, {
        baseRevisionId: a,
        revisionId: b,
        weight: 50,
        targets: [{ instanceId: 'b-0', port: await instance(b), revisionId: b }],
      });
      // Other clients' conversations, each on the revision that first served it.
      const conversations = new Map<string, string>();
      for (let i = 0; i < 40; i++) {
        const thread = randomUUID();
        conversations.set(thread, await revisionOf(edge, `/threads/${thread}/runs`));
      }
      assert.ok(new Set(conversations.values()).size === 2, 'both revisions serve conversations');

      // The attacker: ten times the table's size in made-up thread ids, eight requests at a time.
      const made = Array.from({ length: PINS * 10 }, () => randomUUID());
      for (let i = 0; i < made.length; i += 8)
        await Promise.all(made.slice(i, i + 8).map((thread) => revisionOf(edge, `/threads/${thread}/runs/stream`)));
      const held = await edge.threadPins();
      assert.ok(held <= PINS, `${held} pins held, the table has ${PINS}`);
      assert.ok(held > 0, 'the table holds pins');

      // Every conversation continues on its revision.
      for (const [thread, revision] of conversations)
        assert.equal(await revisionOf(edge, `/threads/${thread}/runs`), revision, `conversation ${thread} moved`);
    });
  });
