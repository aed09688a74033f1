/**
 * HAProxy's request log, read by the service for the series per revision (src/dataplane/traffic-series.ts):
 * HAProxy sends one datagram per request to a UDP port on the loopback that this module owns, in a
 * compact format of ours (`requestLogFormat`): a token, the backend and server that served it, the
 * status, the active and server times and the termination state. The backend and server name the
 * route and the instance, and so the revision, through the edge's table (`RouteIndexSource`).
 *
 * A flood of requests never blocks anything: HAProxy's sends do not wait (a full socket buffer loses the
 * datagram in the kernel), and here datagrams wait in a queue of fixed size, handled in batches between
 * other work; when the queue is full a datagram is dropped and counted, for its route where the backend
 * names one (`dropped` in the series), and in `counts()` for /metrics.
 *
 * Forged lines: the token is made at each start and written only to HAProxy's configuration (mode 0600);
 * a datagram without it (another local process sending to the port) is counted as rejected and ignored.
 * Apps cannot reach the host's loopback at all (their own network namespace).
 */
import { randomBytes } from 'node:crypto';
import dgram from 'node:dgram';
import type { Logger } from 'pino';
import type { TrafficSeries } from './traffic-series.ts';

/** One line of the request log. */
export interface RequestLogEntry {
  backend: string;
  /** The server (instance slot) that answered; `<NOSRV>` when none was picked. */
  server: string;
  /** The status sent to the client; -1 when none was (the client left first). */
  status: number;
  /** From the request's arrival to the end of its response (HAProxy's Ta), milliseconds. */
  activeMs: number;
  /** HAProxy's termination state (`--` for a normal end; `sH`: the server's timeout...). */
  termination: string;
}

/** What the edge's table says of its routes, for the log's backend and server names. */
export interface RouteIndexSource {
  slug: string;
  backend: string;
  servers: readonly { name: string; port: number }[];
  targets: readonly { port: number; revisionId?: string }[];
}

export interface RequestLogCounts {
  /** Lines recorded into the series. */
  recorded: number;
  /** Lines dropped because the queue was full. */
  dropped: number;
  /** Datagrams without the token or not in the format. */
  rejected: number;
  /** The most datagrams that waited at once (never above the capacity). */
  peakQueued: number;
}

export interface RequestLog {
  /** `host:port` for HAProxy's `log` line. */
  readonly address: string;
  /** The `log-format` HAProxy is given. */
  readonly format: string;
  counts(): RequestLogCounts;
  close(): Promise<void>;
}

export interface RequestLogOptions {
  logger: Logger;
  traffic: TrafficSeries;
  routes: () => readonly RouteIndexSource[];
  /** Datagrams that may wait; more are dropped and counted. */
  capacity?: number;
  /** Datagrams handled before other work gets its turn. */
  batch?: number;
}

/** The log format: fields separated by single spaces, the token first. */
export function requestLogFormat(token: string): string {
  return `${token} %b %s %ST %Ta %ts`;
}

const FIELDS = /^(\S+) (\S+) (\S+) (-?\d+) (-?\d+) (\S\S)\s*$/;

export function parseRequestLogLine(line: string, token: string): RequestLogEntry | null {
  const match = FIELDS.exec(line);
  if (match === null || match[1] !== token) return null;
  return {
    backend: match[2]!,
    server: match[3]!,
    status: Number(match[4]),
    activeMs: Math.max(0, Number(match[5])),
    termination: match[6]!,
  };
}

/**
 * Whether HAProxy answered itself rather than an instance: no server was picked, or it ended the request
 * on the server's side (refused, aborted, timed out: `S`/`s`), its own (`P`, `R`, `I`) with a 5xx or no status.
 */
export function isEdgeAnswer(entry: RequestLogEntry): boolean {
  if (entry.server === '<NOSRV>') return true;
  return /^[SsPRI]/.test(entry.termination) && (entry.status >= 500 || entry.status < 100);
}

interface IndexEntry {
  label: string;
  servers: Map<string, string | null>;
}

/** How long the index of routes may be used before it is built again (it is also rebuilt on a miss). */
const INDEX_TTL_MS = 1_000;

export async function startRequestLog(options: RequestLogOptions): Promise<RequestLog> {
  const { logger, traffic } = options;
  const capacity = options.capacity ?? 16_384;
  const batch = options.batch ?? 512;
  const token = randomBytes(12).toString('hex');
  const counts: RequestLogCounts = { recorded: 0, dropped: 0, rejected: 0, peakQueued: 0 };
  /**
   * Backend to route and its servers to revisions. Entries of backends and servers that left the table
   * stay until they are used again, so the last requests of a drained instance, logged after the switch,
   * still count for its revision.
   */
  const index = new Map<string, IndexEntry>();
  let indexedAt = -Infinity;

  function reindex(): void {
    indexedAt = Date.now();
    for (const route of options.routes()) {
      const revisionOf = new Map(route.targets.map((t) => [t.port, t.revisionId ?? null]));
      const before = index.get(route.backend);
      const servers = before?.label === route.slug ? before.servers : new Map<string, string | null>();
      for (const server of route.servers) servers.set(server.name, revisionOf.get(server.port) ?? null);
      index.set(route.backend, { label: route.slug, servers });
    }
  }

  function lookup(backend: string, server: string): { label: string; revisionId: string | null } | null {
    let entry = index.get(backend);
    if (entry === undefined || (server !== '<NOSRV>' && !entry.servers.has(server))) {
      reindex();
      entry = index.get(backend);
    }
    if (entry === undefined) return null;
    return { label: entry.label, revisionId: entry.servers.get(server) ?? null };
  }

  const queue: Buffer[] = [];
  let head = 0;
  let scheduled = false;

  function handle(): void {
    scheduled = false;
    if (Date.now() - indexedAt > INDEX_TTL_MS) reindex();
    const end = Math.min(queue.length, head + batch);
    for (; head < end; head++) {
      const entry = parseRequestLogLine(queue[head]!.toString('latin1'), token);
      if (entry === null) {
        counts.rejected += 1;
        continue;
      }
      const route = lookup(entry.backend, entry.server);
      // The unknown-host backend and backends of no route: not an app's request.
      if (route === null) continue;
      traffic.record({
        label: route.label,
        // The edge's own answers too, when an instance was picked (it refused, it timed out): the revision's failure.
        revisionId: route.revisionId,
        status: entry.status,
        seconds: entry.activeMs / 1000,
        edgeAnswer: isEdgeAnswer(entry),
      });
      counts.recorded += 1;
    }
    if (head >= queue.length) {
      queue.length = 0;
      head = 0;
    } else if (head > batch * 4) {
      queue.splice(0, head);
      head = 0;
    }
    if (head < queue.length) schedule();
  }

  function schedule(): void {
    if (scheduled) return;
    scheduled = true;
    setImmediate(handle);
  }

  /** A dropped line counts for its route when its backend names one (read without parsing the rest). */
  function drop(message: Buffer): void {
    counts.dropped += 1;
    const text = message.toString('latin1');
    const first = text.indexOf(' ');
    if (first < 0 || text.slice(0, first) !== token) return;
    const second = text.indexOf(' ', first + 1);
    const entry = index.get(text.slice(first + 1, second < 0 ? undefined : second));
    if (entry !== undefined) traffic.dropped(entry.label, 1);
  }

  const socket = dgram.createSocket({ type: 'udp4' });
  socket.on('message', (message, from) => {
    // Only this machine's loopback sends here (the socket is bound to it).
    if (from.address !== '127.0.0.1') {
      counts.rejected += 1;
      return;
    }
    if (queue.length - head >= capacity) return drop(message);
    queue.push(message);
    counts.peakQueued = Math.max(counts.peakQueued, queue.length - head);
    schedule();
  });
  socket.on('error', (error) => logger.warn({ err: error }, 'app edge: the request log socket failed'));
  await new Promise<void>((resolve, reject) => {
    socket.once('error', reject);
    socket.bind(0, '127.0.0.1', () => {
      socket.off('error', reject);
      resolve();
    });
  });
  try {
    // Room for bursts between the event loop's turns; the kernel caps it (net.core.rmem_max).
    socket.setRecvBufferSize(4 * 1024 * 1024);
  } catch (error) {
    logger.debug({ err: error }, 'app edge: the request log socket keeps its default buffer');
  }
  const { port } = socket.address();
  return {
    address: `127.0.0.1:${port}`,
    format: requestLogFormat(token),
    counts: () => ({ ...counts }),
    close: () => new Promise<void>((resolve) => socket.close(() => resolve())),
  };
}
