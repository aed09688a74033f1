/**
 * One client that opens connections and never finishes its requests' heads (a slowloris) must not hold
 * the API's connections: each half-sent request is closed when its head is late, and one address holds
 * at most its cap of connections at once. What the old code did: 19,900 such connections were all
 * accepted and held, the service ran out of descriptors and its health checks took seconds.
 */
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, test } from 'node:test';
import { createTestApp, freePort, listen, type TestApp } from '../support/harness.ts';

const CAP = 20;
let t: TestApp;
let port: number;

before(async () => {
  port = await freePort();
  t = await createTestApp({
    PORT: String(port),
    SLIPWAY_HEADERS_TIMEOUT_SECONDS: '2',
    SLIPWAY_MAX_CONNECTIONS_PER_ADDRESS: String(CAP),
  });
  await listen(t.app, port);
});
after(async () => {
  await t?.close();
});

/** Opens a connection and sends half a request; resolves when the server has accepted it. */
function halfSent(): Promise<{ socket: net.Socket; closed: Promise<string> }> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    let answer = '';
    socket.setEncoding('utf8').on('data', (chunk: string) => (answer += chunk));
    const closed = new Promise<string>((done) => socket.once('close', () => done(answer)));
    socket.once('error', () => undefined);
    socket.once('connect', () => {
      socket.write('GET /healthz HTTP/1.1\r\nHost: slow\r\n');
      resolve({ socket, closed });
    });
    socket.once('error', reject);
  });
}

test('connections over the per-address cap are closed at once, and half-sent heads are closed when late', async () => {
  const held = [];
  for (let i = 0; i < CAP + 10; i++) held.push(await halfSent());
  // The ten over the cap are closed without an answer; the others are still held.
  const overCap = await Promise.all(held.slice(CAP).map(({ closed }) => closed));
  assert.deepEqual(
    overCap,
    Array.from({ length: 10 }, () => ''),
    'connections over the cap are closed unanswered',
  );
  // The held ones are closed once their heads are late (Node answers 408), whatever they still send.
  const answers = await Promise.all(held.slice(0, CAP).map(({ closed }) => closed));
  for (const answer of answers) assert.match(answer, /^HTTP\/1\.1 408 /);
  // And the API serves again.
  const response = await fetch(`http://127.0.0.1:${port}/healthz`);
  assert.equal(response.status, 200);
});
