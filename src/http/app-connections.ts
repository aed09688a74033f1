/**
 * Which deployment's app a connection to the API comes from. An app reaches the API through a forward
 * of its own (src/dataplane/app-host-access.ts): a Unix socket bound into its sandbox only, which the
 * service accepts itself and hands here, in this process, with the deployment it was opened for. That
 * hand-over is the only way a connection gets an origin: nothing a client sends (no header, no address)
 * can give one, so an app cannot count against another deployment's budget and an outside client cannot
 * pose as an app (docs/api.md, "Streams and long-polls").
 */
import type { Server } from 'node:http';
import type { Socket } from 'node:net';

export interface AppOrigin {
  deploymentId: string;
  workspaceId: string;
}

/** Takes a connection an app opened through its forward, as if the API had accepted it. */
export type AppConnectionSink = (socket: Socket, origin: AppOrigin) => void;

export interface AppConnections {
  /** The deployment whose app opened this connection; null for every other connection. */
  originOf(socket: Socket | undefined): AppOrigin | null;
  /** Hands an app's connection to the API's HTTP server, once the API is ready to serve it. */
  accept: AppConnectionSink;
}

export function createAppConnections(server: Server, ready: () => PromiseLike<unknown>): AppConnections {
  const origins = new WeakMap<Socket, AppOrigin>();
  return {
    originOf: (socket) => (socket ? (origins.get(socket) ?? null) : null),
    accept(socket, origin) {
      origins.set(socket, origin);
      // Apps adopted at start may call before the API has finished starting: they wait for it.
      Promise.resolve(ready()).then(
        () => {
          if (!socket.destroyed) server.emit('connection', socket);
        },
        () => socket.destroy(),
      );
    },
  };
}
