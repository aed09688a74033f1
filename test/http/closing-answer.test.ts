/**
 * While the service shuts down, a request that still reaches it (pipelined, or on a keep-alive
 * connection that is busy) is answered 503 `unavailable` in the error envelope, with Retry-After and an
 * X-Request-Id, so that a client or load balancer knows to retry elsewhere.
 */
import assert from 'node:assert/strict';
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { test } from 'node:test';
import { createTestApp, listen } from '../support/harness.ts';

/** The answers on one connection, split at each complete answer (all of them carry Content-Length). */
function answersOf(data: string): { status: number; headers: Record<string, string>; body: string }[] {
  const answers = [];
  let rest = data;
  for (;;) {
    const end = rest.indexOf('\r\n\r\n');
    if (end < 0) break;
    const [statusLine, ...lines] = rest.slice(0, end).split('\r\n');
    const headers: Record<string, string> = {};
    for (const line of lines) {
      const colon = line.indexOf(':');
      headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
    }
    const length = Number(headers['content-length'] ?? 0);
    answers.push({ status: Number(statusLine!.split(' ')[1]), headers, body: rest.slice(end + 4, end + 4 + length) });
    rest = rest.slice(end + 4 + length);
  }
  return answers;
}

test('a request that arrives while the service closes gets 503 unavailable in the envelope', async () => {
  const t = await createTestApp();
  try {
    await listen(t.app);
    const { port } = t.app.server.address() as net.AddressInfo;
    const socket = net.connect(port, '127.0.0.1');
    let data = '';
    socket.on('data', (chunk: Buffer) => (data += chunk.toString('latin1')));
    const ended = new Promise<void>((resolve) => socket.on('close', () => resolve()));
    await new Promise<void>((resolve) => socket.once('connect', () => resolve()));

    // A request whose body is still on its way keeps the connection busy, so closing does not reap it.
    socket.write(
      'POST /v2/deployments HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n',
    );
    await sleep(200);
    const closed = t.app.close();
    await sleep(100);
    // The rest of that body, and a second request pipelined behind it.
    socket.write('{}GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n');
    await ended;
    await closed;

    const [first, second] = answersOf(data);
    assert.equal(first?.status, 401, 'the request begun before closing is answered as usual');
    assert.ok(second, `an answer to the pipelined request: ${JSON.stringify(data)}`);
    assert.equal(second.status, 503, second.body);
    assert.deepEqual(JSON.parse(second.body), {
      detail: 'The service is shutting down; retry shortly.',
      code: 'unavailable',
    });
    assert.equal(second.headers['retry-after'], '1');
    assert.ok((second.headers['x-request-id'] ?? '').length > 0, 'has X-Request-Id');
    assert.equal(second.headers['connection'], 'close');
  } finally {
    await t.close();
  }
});
