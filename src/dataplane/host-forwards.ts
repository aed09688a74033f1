/**
 * The only ways out of a sandbox's network namespace to the host: a Unix socket per deployment and
 * target (its PostgreSQL database, the service's API), bound into the sandbox, where the namespace's
 * own 127.0.0.1:<port> leads (socat inside the sandbox, src/dataplane/sandbox.ts). Each socket leads to
 * exactly one host address, and caps the connections open through it, so an app cannot use it to reach
 * anything else or to take every connection slot of the service's PostgreSQL. The cap is per app and,
 * through budgets shared with other apps' forwards to the same server (its workspace's, and all apps'
 * together), per tenant and for everyone: one tenant's apps holding their budget leave every other
 * tenant's connections alone.
 *
 * To a PostgreSQL server, a connection counts against the shared budgets only once it has logged in
 * (the server said AuthenticationOk), and one that has not logged in within LOGIN_TIMEOUT_MS of its
 * arrival is closed: PostgreSQL holds a connection that stalls before its login for a minute and counts
 * it against its slots, so stalled connections would otherwise fill them, and a budget counted from
 * the accept would let one tenant's stalled connections refuse everyone's logins.
 */
import fs from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import type { Logger } from 'pino';
import { decideStartup, type AllowedLogin } from './postgres-startup-gate.ts';

/** How long a connection through a PostgreSQL forward may take from its arrival to its login. */
const LOGIN_TIMEOUT_MS = 5_000;

/** Whether a URL's hostname is the host's loopback: what only a forward lets a sandbox reach. */
export function isLoopbackHost(hostname: string): boolean {
  return LOOPBACK_HOSTS.has(hostname);
}
const LOOPBACK_HOSTS = new Set(['127.0.0.1', 'localhost', '[::1]', '::1']);

/** Connections open through every forward that shares it, at most `max`. */
export interface ConnectionBudget {
  /** Whose it is, for the refusal's message: `its workspace`, `all apps`. */
  readonly name: string;
  readonly max: number;
  open: number;
}

/**
 * Where each connection goes on: a TCP address, or a server of this process that takes the connection
 * as it is (and knows from it which forward, so which app, it came through).
 */
export type ForwardTarget = ForwardOptions &
  ({ host: string; port: number } | { deliver: (socket: net.Socket) => void });

export interface ForwardOptions {
  /** What it leads to, for logs: `database`, `api`. */
  name: string;
  /** The port it is reached at on the sandbox's own 127.0.0.1. */
  insidePort: number;
  /** Connections open through it at once; more are closed at once. */
  maxConnections: number;
  /** Shared with the forwards of other apps to the same server: its workspace's, everyone's. */
  budgets?: readonly ConnectionBudget[];
  /**
   * For a PostgreSQL server: the only role and database a connection may ask for
   * (src/dataplane/postgres-startup-gate.ts); any other start-up is refused before the server sees it.
   */
  postgresLogin?: AllowedLogin;
}

export interface HostForward {
  /** The port the app connects to on its own 127.0.0.1. */
  readonly port: number;
  /** The Unix socket on the host. */
  readonly socketPath: string;
  /** Connections open now. */
  readonly open: number;
  close(): Promise<void>;
}

/**
 * Follows what a PostgreSQL server sends at the start of a connection: `ok` once it sent
 * AuthenticationOk ('R' with code 0), `failed` once it sent an ErrorResponse ('E') first or broke the
 * protocol, `pending` until then (authentication requests, a NegotiateProtocolVersion).
 */
function loginWatcher(): (chunk: Buffer) => 'pending' | 'ok' | 'failed' {
  let buffered = Buffer.alloc(0);
  return (chunk) => {
    buffered = Buffer.concat([buffered, chunk]);
    for (;;) {
      if (buffered.length < 5) return 'pending';
      const type = String.fromCharCode(buffered[0]!);
      const length = buffered.readInt32BE(1);
      if (length < 4 || length > 1 << 20) return 'failed';
      if (type === 'E') return 'failed';
      if (type === 'R') {
        if (buffered.length < 9) return 'pending';
        if (buffered.readInt32BE(5) === 0) return 'ok';
      } else if (type !== 'v') return 'failed';
      if (buffered.length < 1 + length) return 'pending';
      buffered = buffered.subarray(1 + length);
    }
  };
}

/** The FATAL error PostgreSQL itself sends when its slots are taken (53300), naming the budget. */
function tooManyConnections(budget: ConnectionBudget): Buffer {
  const fields = Buffer.concat(
    [
      ['S', 'FATAL'],
      ['V', 'FATAL'],
      ['C', '53300'],
      ['M', `too many connections: ${budget.name} may hold ${budget.max} database connections at once`],
    ]
      .map(([type, value]) => Buffer.from(`${type}${value}\0`, 'utf8'))
      .concat(Buffer.from([0])),
  );
  const header = Buffer.alloc(5);
  header.write('E', 0);
  header.writeInt32BE(fields.length + 4, 1);
  return Buffer.concat([header, fields]);
}

export async function openHostForward(
  dir: string,
  target: ForwardTarget,
  logger: Pick<Logger, 'warn'>,
): Promise<HostForward> {
  const socketPath = path.join(dir, `${target.name}.sock`);
  await fs.rm(socketPath, { force: true });
  const sockets = new Set<net.Socket>();
  let refusedLogged = false;
  const budgets = target.budgets ?? [];
  const full = () => budgets.find((b) => b.open >= b.max) ?? null;
  const login = target.postgresLogin;
  const server = net.createServer((client) => {
    // To PostgreSQL the shared budgets are counted at the login, below; elsewhere from the accept.
    if (sockets.size >= target.maxConnections || (!login && full())) {
      if (!refusedLogged) {
        refusedLogged = true;
        logger.warn(
          { target: target.name, max: target.maxConnections, socket: socketPath },
          'an app reached its connection cap to a host service; further connections are closed',
        );
      }
      client.destroy();
      return;
    }
    refusedLogged = false;
    sockets.add(client);
    let counted = false;
    const count = () => {
      counted = true;
      for (const b of budgets) b.open += 1;
    };
    let upstream: net.Socket | null = null;
    let timer: NodeJS.Timeout | null = null;
    const end = () => {
      if (!sockets.delete(client)) return;
      if (timer) clearTimeout(timer);
      if (counted) for (const b of budgets) b.open -= 1;
      client.destroy();
      upstream?.destroy();
    };
    client.on('error', end).on('close', end);
    /**
     * Opens the upstream connection; `onServerData`, when given, sees what the server sends until it
     * answers `done` (pass this chunk on and stop watching) or `drop` (the connection is being closed).
     */
    const connect = (first: Buffer, onServerData?: (chunk: Buffer) => 'watch' | 'done' | 'drop') => {
      if ('deliver' in target) {
        target.deliver(client);
        return;
      }
      const socket = net.createConnection({ host: target.host, port: target.port });
      upstream = socket;
      socket.on('error', end).on('close', end);
      if (first.length > 0) socket.write(first);
      client.pipe(socket);
      if (!onServerData) {
        socket.pipe(client);
        return;
      }
      // Watched until it says the login went through (or not); passed on unchanged all the while.
      const watch = (chunk: Buffer) => {
        const next = onServerData(chunk);
        if (next === 'drop') return;
        client.write(chunk);
        if (next === 'done') {
          socket.off('data', watch);
          socket.pipe(client);
        }
      };
      socket.on('data', watch);
    };
    if (!login) {
      count();
      connect(Buffer.alloc(0));
      return;
    }
    // Nothing reaches the server until the client has said who it logs in as, and that is the app's own;
    // and the connection must have logged in within the time, or it is closed.
    let pending = Buffer.alloc(0);
    timer = setTimeout(end, LOGIN_TIMEOUT_MS);
    const onData = (chunk: Buffer) => {
      pending = Buffer.concat([pending, chunk]);
      for (;;) {
        const decision = decideStartup(pending, login);
        if (decision.kind === 'incomplete') return;
        if (decision.kind === 'answer') {
          client.write(decision.reply);
          pending = pending.subarray(decision.consumed);
          continue;
        }
        client.off('data', onData);
        if (decision.kind === 'refuse') {
          clearTimeout(timer);
          logger.warn(
            { target: target.name, socket: socketPath, reason: decision.reason },
            'an app asked its database forward for another login; refused',
          );
          client.end(decision.reply);
          return;
        }
        client.pause();
        const watcher = loginWatcher();
        connect(pending, (chunk) => {
          const seen = watcher(chunk);
          if (seen === 'pending') return 'watch';
          clearTimeout(timer);
          // The server's own refusal (a wrong password, its own limits) reaches the client as it is.
          if (seen === 'failed') return 'done';
          // Logged in: now it counts, if its workspace and everyone still have room.
          const over = full();
          if (over) {
            logger.warn(
              { target: target.name, socket: socketPath, budget: over.name, max: over.max },
              'an app reached a shared database connection budget; its new connection is refused',
            );
            upstream?.destroy();
            client.end(tooManyConnections(over));
            return 'drop';
          }
          count();
          return 'done';
        });
        return;
      }
    };
    client.on('data', onData);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(socketPath, () => {
      server.off('error', reject);
      resolve();
    });
  });
  // The app's user (nobody, when the service is root) must be able to connect; the directory above it
  // is what keeps everyone else out.
  await fs.chmod(socketPath, 0o666);
  return {
    port: target.insidePort,
    socketPath,
    get open() {
      return sockets.size;
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await fs.rm(socketPath, { force: true });
    },
  };
}
