/**
 * Attacker: a client that names far more LangGraph thread ids than the edge keeps pins for, against both
 * edges (docs/app-urls.md, "Traffic split", what stickiness cannot promise). Its made-up threads push
 * other conversations' pins out of the table; what must hold is what the docs say: the table never holds
 * more than its size (memory does not grow with the flood), and a conversation whose pin went is placed
 * again where it was as long as the split's weight has not changed (a client sending the same cookie,
 * header, or neither), so the flood moves no one's conversation; after a change of weight, a conversation
 * whose pin went moves at most once, and only as the change moves new clients (a wider split: A to B).
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
import { localEdgeConfig } from '../support/edge-config.ts';

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
    config: localEdgeConfig(dataDir, kind),
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

/** A route with a split of `weight`% from A to B, both answering with their revision. */
async function splitRoute(edge: AppEdge, weight: number) {
  const a = randomUUID();
  const b = randomUUID();
  const second = await instance(b);
  await edge.setTargets(LABEL, [{ instanceId: 'a-0', port: await instance(a), revisionId: a }]);
  const split = (w: number) =>
    edge.setSplit(LABEL, {
      baseRevisionId: a,
      revisionId: b,
      weight: w,
      targets: [{ instanceId: 'b-0', port: second, revisionId: b }],
    });
  await split(weight);
  return { a, b, split };
}

/** Conversations of other clients, each started with a request: thread to the revision that served it. */
async function conversations(edge: AppEdge, count: number): Promise<Map<string, string>> {
  const started = new Map<string, string>();
  for (let i = 0; i < count; i++) {
    const thread = randomUUID();
    started.set(thread, await revisionOf(edge, `/threads/${thread}/runs`));
  }
  return started;
}

/** The attacker: ten times the table's size in made-up thread ids, eight requests at a time. */
async function flood(edge: AppEdge): Promise<void> {
  const made = Array.from({ length: PINS * 10 }, () => randomUUID());
  for (let i = 0; i < made.length; i += 8)
    await Promise.all(made.slice(i, i + 8).map((thread) => revisionOf(edge, `/threads/${thread}/runs/stream`)));
}

const kinds = (await findExecutable('haproxy')) === null ? (['builtin'] as const) : (['haproxy', 'builtin'] as const);

for (const kind of kinds)
  describe(`a thread-id flood through the ${kind} edge`, () => {
    test('many made-up threads keep the pin table at its size and move no other conversation', async () => {
      const edge = await edgeOf(kind);
      await splitRoute(edge, 50);
      const started = await conversations(edge, 40);
      assert.ok(new Set(started.values()).size === 2, 'both revisions serve conversations');

      await flood(edge);
      const held = await edge.threadPins();
      assert.ok(held <= PINS, `${held} pins held, the table has ${PINS}`);
      assert.ok(held > 0, 'the table holds pins');

      // Every conversation continues on its revision.
      for (const [thread, revision] of started)
        assert.equal(await revisionOf(edge, `/threads/${thread}/runs`), revision, `conversation ${thread} moved`);
    });

    test('after a wider split, a flood moves a conversation at most once, and only from A to B', async () => {
      const edge = await edgeOf(kind);
      const { a, b, split } = await splitRoute(edge, 50);
      const started = await conversations(edge, 40);
      await flood(edge);
      await split(90);
      const now = new Map<string, string>();
      for (const [thread, revision] of started) {
        const after = await revisionOf(edge, `/threads/${thread}/runs`);
        if (revision === b) assert.equal(after, b, `conversation ${thread} moved from B to A`);
        now.set(thread, after);
      }
      assert.ok([...now.values()].every((r) => r === a || r === b));
      // The flood did push their pins out (as the docs say): some of A's conversations are placed anew, on B.
      assert.ok(
        [...started].some(([thread, revision]) => revision === a && now.get(thread) === b),
        'no conversation of A was placed anew',
      );
      // Pushed out again: each stays where it went.
      await flood(edge);
      for (const [thread, revision] of now)
        assert.equal(await revisionOf(edge, `/threads/${thread}/runs`), revision, `conversation ${thread} moved twice`);
    });
  });
