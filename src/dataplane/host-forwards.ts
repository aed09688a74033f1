/**
 * The only ways out of a sandbox's network namespace to the host: a Unix socket per deployment and
 * target (its PostgreSQL database, the service's API), bound into the sandbox, where the namespace's
 * own 127.0.0.1:<port> leads (socat inside the sandbox, src/dataplane/sandbox.ts). Each socket leads to
 * exactly one host address, and caps the connections open through it, so an app cannot use it to reach
 * anything else or to take every connection slot of the service's PostgreSQL. The cap is per app and,
 * through a budget shared by every app's forward to the same server, for all apps together: PostgreSQL
 * only checks reserved slots after a login, so connections that stall before it would otherwise let
 * enough apps fill the server's every slot.
 */
import fs from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import type { Logger } from 'pino';
import { decideStartup, type AllowedLogin } from './postgres-startup-gate.ts';

/** How long a connection through a PostgreSQL forward may take to say who it logs in as. */
const STARTUP_TIMEOUT_MS = 15_000;

/** Connections open through every forward that shares it, at most `max`. */
export interface ConnectionBudget {
  readonly max: number;
  open: number;
}

export interface ForwardTarget {
  /** What it leads to, for logs: `database`, `api`. */
  name: string;
  host: string;
  port: number;
  /** The port it is reached at on the sandbox's own 127.0.0.1. */
  insidePort: number;
  /** Connections open through it at once; more are closed at once. */
  maxConnections: number;
  /** Shared with the forwards of other apps to the same server. */
  budget?: ConnectionBudget;
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

export async function openHostForward(
  dir: string,
  target: ForwardTarget,
  logger: Pick<Logger, 'warn'>,
): Promise<HostForward> {
  const socketPath = path.join(dir, `${target.name}.sock`);
  await fs.rm(socketPath, { force: true });
  const sockets = new Set<net.Socket>();
  let refusedLogged = false;
  const budget = target.budget ?? { max: Number.POSITIVE_INFINITY, open: 0 };
  const server = net.createServer((client) => {
    if (sockets.size >= target.maxConnections || budget.open >= budget.max) {
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
    budget.open += 1;
    let upstream: net.Socket | null = null;
    const end = () => {
      if (!sockets.delete(client)) return;
      budget.open -= 1;
      client.destroy();
      upstream?.destroy();
    };
    client.on('error', end).on('close', end);
    const connect = (first: Buffer) => {
      const socket = net.createConnection({ host: target.host, port: target.port });
      upstream = socket;
      socket.on('error', end).on('close', end);
      if (first.length > 0) socket.write(first);
      client.pipe(socket);
      socket.pipe(client);
    };
    const login = target.postgresLogin;
    if (!login) {
      connect(Buffer.alloc(0));
      return;
    }
    // Nothing reaches the server until the client has said who it logs in as, and that is the app's own.
    let pending = Buffer.alloc(0);
    const timer = setTimeout(end, STARTUP_TIMEOUT_MS);
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
        clearTimeout(timer);
        client.off('data', onData);
        if (decision.kind === 'refuse') {
          logger.warn(
            { target: target.name, socket: socketPath, reason: decision.reason },
            'an app asked its database forward for another login; refused',
          );
          client.end(decision.reply);
          return;
        }
        client.pause();
        connect(pending);
        return;
      }
    };
    client.on('data', onData).on('close', () => clearTimeout(timer));
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
