/**
 * HAProxy's request log as the service reads it (src/dataplane/edge-request-log.ts): the line format, the
 * edge's own answers told apart, forged lines refused, and a flood that stays bounded: datagrams past the
 * queue's capacity are dropped and counted for their route, never queued without end.
 */
import assert from 'node:assert/strict';
import dgram from 'node:dgram';
import pino from 'pino';
import { isEdgeAnswer, parseRequestLogLine, startRequestLog } from '../../src/dataplane/edge-request-log.ts';
import { createTrafficSeries } from '../../src/dataplane/traffic-series.ts';
import { eventually } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';

const REVISION = '11111111-1111-4111-8111-111111111111';
const routes = () => [
  {
    slug: 'shop-0123abcd',
    backend: 'app_3',
    servers: [{ name: 'slot0', port: 4000 }],
    targets: [{ port: 4000, revisionId: REVISION }],
  },
];

test('a line is parsed only with its token, and the edge answers are told apart', () => {
  const line = parseRequestLogLine('tok app_3 slot0 200 12 --', 'tok');
  assert.deepEqual(line, { backend: 'app_3', server: 'slot0', status: 200, activeMs: 12, termination: '--' });
  assert.equal(parseRequestLogLine('other app_3 slot0 200 12 --', 'tok'), null);
  assert.equal(parseRequestLogLine('tok app_3 slot0 200', 'tok'), null);
  assert.equal(isEdgeAnswer(line), false);
  assert.equal(isEdgeAnswer({ ...line, status: 500 }), false, "the app's own 500");
  assert.equal(isEdgeAnswer({ ...line, server: '<NOSRV>', status: 503, termination: 'SC' }), true);
  assert.equal(isEdgeAnswer({ ...line, status: 502, termination: 'SC' }), true, 'refused');
  assert.equal(isEdgeAnswer({ ...line, status: 504, termination: 'sH' }), true, 'timed out');
  assert.equal(isEdgeAnswer({ ...line, status: 200, termination: 'CD' }), false, 'the client left');
});

async function sendAll(port: number, lines: string[]): Promise<void> {
  const socket = dgram.createSocket('udp4');
  let i = 0;
  // In bursts, each waiting for the previous one to leave, so the sender's own buffer never refuses them.
  while (i < lines.length) {
    const burst = lines.slice(i, i + 200);
    i += burst.length;
    await Promise.all(
      burst.map((line) => new Promise<void>((resolve) => socket.send(line, port, '127.0.0.1', () => resolve()))),
    );
  }
  socket.close();
}

test('requests are recorded for their route and revision; forged lines are not', async () => {
  const traffic = createTrafficSeries();
  const log = await startRequestLog({ logger: pino({ level: 'silent' }), traffic, routes });
  try {
    const token = log.format.split(' ')[0]!;
    const port = Number(log.address.split(':')[1]);
    await sendAll(port, [
      `${token} app_3 slot0 200 5 --`,
      `${token} app_3 slot0 404 5 --`,
      `${token} app_3 <NOSRV> 503 0 SC`,
      `forged app_3 slot0 500 5 --`,
      `${token} slipway_unknown <NOSRV> 404 0 PR`,
    ]);
    await eventually('the lines handled', async () => log.counts().recorded + log.counts().rejected === 4);
    assert.equal(log.counts().rejected, 1);
    const series = traffic.query(['shop-0123abcd'], 60, 10);
    const byRevision = new Map(series.map((s) => [s.revisionId, s.total]));
    assert.equal(byRevision.get(REVISION)?.requests, 2);
    assert.equal(byRevision.get(REVISION)?.errors['4xx'], 1);
    assert.equal(byRevision.get(null)?.errors.edge, 1);
  } finally {
    await log.close();
  }
});

test('a flood of log lines stays within the queue: the rest is dropped and counted for its route', async () => {
  const traffic = createTrafficSeries();
  const capacity = 50;
  const log = await startRequestLog({ logger: pino({ level: 'silent' }), traffic, routes, capacity, batch: 5 });
  try {
    const token = log.format.split(' ')[0]!;
    const port = Number(log.address.split(':')[1]);
    const sent = 20_000;
    // One line first, so the route is known when the flood's drops are counted.
    await sendAll(port, [`${token} app_3 slot0 200 1 --`]);
    await eventually('the first line recorded', async () => log.counts().recorded === 1);
    await sendAll(
      port,
      Array.from({ length: sent }, () => `${token} app_3 slot0 200 1 --`),
    );
    let last = log.counts();
    // Settled: nothing more arrives (what the kernel dropped never does).
    await eventually('the queue emptied', async () => {
      const now = log.counts();
      const settled = now.recorded + now.dropped > 1 && now.recorded === last.recorded && now.dropped === last.dropped;
      last = now;
      return settled;
    });
    const counts = log.counts();
    assert.ok(counts.peakQueued <= capacity, JSON.stringify(counts));
    assert.ok(counts.dropped > 0, `a flood past the queue drops lines: ${JSON.stringify(counts)}`);
    assert.ok(counts.recorded + counts.dropped <= sent + 1, JSON.stringify(counts));
    // Said in the series: the drops count for the route, beside what was recorded.
    const series = traffic.query(['shop-0123abcd'], 60, 10);
    const total = (revisionId: string | null) => series.find((s) => s.revisionId === revisionId)?.total;
    assert.equal(total(null)?.dropped, counts.dropped);
    assert.equal(total(REVISION)?.requests, counts.recorded);
  } finally {
    await log.close();
  }
});
