/**
 * What one client may hold of the API's connections. Without these, a client that opens connections
 * and sends its requests a byte at a time (or never finishes their heads) is held as long as it likes,
 * each connection a descriptor, until the service has none left and its health checks wait too:
 *
 * - a request's head (request line and headers) must arrive within `headersTimeoutMs`, else Node's HTTP
 *   server answers 408 and closes the connection; bodies (uploads) and answers (log follows,
 *   long-polls) are not bound by it;
 * - one client address holds at most `maxPerAddress` connections at once; one more is closed at once.
 *
 * The app edge has its own limits for app traffic (src/dataplane/app-edge.ts).
 */
import type { Server } from 'node:http';
import type { Socket } from 'node:net';

export interface ConnectionLimits {
  headersTimeoutMs: number;
  maxPerAddress: number;
}

/** The options of Node's HTTP server that bound a request's head (how often it checks, too). */
export function headTimeoutOptions(limits: Pick<ConnectionLimits, 'headersTimeoutMs'>): {
  headersTimeout: number;
  connectionsCheckingInterval: number;
} {
  return {
    headersTimeout: limits.headersTimeoutMs,
    // Node checks the deadlines of open connections this often (30 s by default, beyond most heads).
    connectionsCheckingInterval: Math.max(250, Math.min(5_000, Math.floor(limits.headersTimeoutMs / 4))),
  };
}

/**
 * Counts connections by client address and closes those over the cap as they are accepted; `exempt`
 * connections (an app's own, capped by its forward) are not counted.
 */
export function capConnectionsPerAddress(
  server: Server,
  maxPerAddress: number,
  exempt: (socket: Socket) => boolean = () => false,
): void {
  const open = new Map<string, number>();
  server.on('connection', (socket: Socket) => {
    if (exempt(socket)) return;
    const address = socket.remoteAddress ?? '';
    const count = (open.get(address) ?? 0) + 1;
    if (count > maxPerAddress) {
      socket.destroy();
      return;
    }
    open.set(address, count);
    socket.once('close', () => {
      const left = (open.get(address) ?? 1) - 1;
      if (left <= 0) open.delete(address);
      else open.set(address, left);
    });
  });
}
