/**
 * App instances' ports come from below the kernel's ephemeral range (src/dataplane/app-ports.ts): a port
 * from that range, as binding port 0 gives, could be taken by any outgoing connection on the host
 * between its choice and the sandbox's forward (CI saw `slirp_add_hostfwd failed` for such a port, and
 * the instance failed with it).
 */
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { APP_PORT_FLOOR, appPortRange, freeAppPort } from '../../src/dataplane/app-ports.ts';

let dir: string;
before(async () => {
  dir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-app-ports-'));
});
after(() => fs.rm(dir, { recursive: true, force: true }));

async function rangeFile(text: string): Promise<string> {
  const file = path.join(dir, `range-${Math.random().toString(16).slice(2)}`);
  await fs.writeFile(file, text);
  return file;
}

/** Whether `port` can be bound on 127.0.0.1 now. */
function bindable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.once('error', () => resolve(false));
    server.listen({ port, host: '127.0.0.1', exclusive: true }, () => server.close(() => resolve(true)));
  });
}

test("the ports to choose from end just below the kernel's ephemeral range, when it leaves room", () => {
  assert.deepEqual(appPortRange('32768\t60999\n'), { low: APP_PORT_FLOOR, high: 32767 });
  assert.deepEqual(appPortRange('49152 65535'), { low: APP_PORT_FLOOR, high: 49151 });
  assert.equal(appPortRange('21000 60999'), null, 'too few below it');
  assert.equal(appPortRange('1024 65535'), null, 'none below it');
  assert.equal(appPortRange('not a range'), null);
  assert.equal(appPortRange(null), null);
});

test('a port is never one an outgoing connection could hold: below the ephemeral range, and free', async () => {
  const file = await rangeFile('32768\t60999\n');
  const ports = await Promise.all(Array.from({ length: 20 }, () => freeAppPort(file)));
  for (const port of ports) {
    assert.ok(port >= APP_PORT_FLOOR && port < 32768, `${port} is below the ephemeral range`);
    assert.ok(await bindable(port), `${port} is free`);
  }
  // The machine's own range, as the service reads it.
  const own = await freeAppPort();
  const ephemeralLow = Number((await fs.readFile('/proc/sys/net/ipv4/ip_local_port_range', 'utf8')).split(/\s+/)[0]);
  if (appPortRange(String(ephemeralLow)) !== null) assert.ok(own < ephemeralLow, `${own} < ${ephemeralLow}`);
});

test("without room below the range, or without the kernel's file, the kernel's choice", async () => {
  for (const file of [await rangeFile('21000 60999'), path.join(dir, 'missing')]) {
    const port = await freeAppPort(file);
    assert.ok(Number.isInteger(port) && port > 0);
    assert.ok(await bindable(port), `${port} is free`);
  }
});
