/**
 * The host ports app instances listen on (their `PORT`, published on the host's 127.0.0.1 by
 * slirp4netns's forward, or bound by the app itself without a network of its own).
 *
 * A port is chosen before the instance starts and taken only when its sandbox's forward (or the app)
 * binds it, a moment later. A port from the kernel's ephemeral range (`ip_local_port_range`, 32768 to
 * 60999 by default), as binding port 0 gives, can be taken in that moment by any outgoing connection
 * on the host: the service's PostgreSQL pool, HAProxy's connections to apps, an app's own requests.
 * Its forward then fails ("slirp_add_hostfwd failed") and the instance with it, and a pooled connection
 * can hold the port for as long as it lives. So the ports come from below that range, where the kernel
 * never picks a connection's local port: only another listener can take one, and each is checked free
 * when chosen. Where the range leaves too little below it, a port of the kernel's choice, as before.
 */
import fs from 'node:fs/promises';
import net from 'node:net';
import { freePort } from '../db/embedded-postgres.ts';

/** The lowest port chosen (above the well-known and the commonly configured service ports). */
export const APP_PORT_FLOOR = 20_000;
/** How many ports below the ephemeral range there must be for them to be used. */
const MIN_PORTS = 2_000;
const TRIES = 50;
const RANGE_FILE = '/proc/sys/net/ipv4/ip_local_port_range';

/**
 * The ports to choose from, given the kernel's `ip_local_port_range` text ("32768\t60999"): from
 * APP_PORT_FLOOR to just below the ephemeral range; null when that is too few, or the text unreadable.
 */
export function appPortRange(rangeText: string | null): { low: number; high: number } | null {
  const ephemeralLow = Number(rangeText?.trim().split(/\s+/)[0]);
  if (!Number.isInteger(ephemeralLow)) return null;
  const high = ephemeralLow - 1;
  return high - APP_PORT_FLOOR + 1 >= MIN_PORTS ? { low: APP_PORT_FLOOR, high } : null;
}

/** Binds `port` on 127.0.0.1 and lets it go: the port, or null when it is taken. */
function tryPort(port: number): Promise<number | null> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.once('error', () => resolve(null));
    server.listen({ port, host: '127.0.0.1', exclusive: true }, () => {
      const address = server.address();
      server.close(() => resolve(typeof address === 'object' && address ? address.port : null));
    });
  });
}

/** The ranges read, once per file: the kernel's setting is read at the first start, not at every one. */
const ranges = new Map<string, Promise<{ low: number; high: number } | null>>();

/** A port free on the host's 127.0.0.1 now, outside the ephemeral range where the host has room for that. */
export async function freeAppPort(rangeFile = RANGE_FILE): Promise<number> {
  let read = ranges.get(rangeFile);
  if (read === undefined) {
    read = fs.readFile(rangeFile, 'utf8').then(appPortRange, () => null);
    ranges.set(rangeFile, read);
  }
  const range = await read;
  if (range !== null) {
    for (let i = 0; i < TRIES; i++) {
      const port = await tryPort(range.low + Math.floor(Math.random() * (range.high - range.low + 1)));
      if (port !== null) return port;
    }
  }
  return freePort();
}
