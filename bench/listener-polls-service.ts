/**
 * The service of the listener long-poll bench (bench/listener-polls.ts), in a child process of its
 * own so that its memory is its alone: `buildApp` as src/main.ts builds it, with the change feed, on
 * the pool `connect()` makes, logging at the bench's level to /dev/null, listening on loopback.
 *
 * Started with `--expose-gc`: a memory sample collects garbage first, so that it shows what the
 * service holds, not when V8 last happened to collect. Talks to the bench over IPC (the messages
 * below); the only thing added to the service is a count of requests in flight at the HTTP server.
 */
import pino from 'pino';
import { buildApp } from '../src/app.ts';
import { bootstrap } from '../src/bootstrap.ts';
import { loadConfig } from '../src/config.ts';
import { createSecretBox } from '../src/crypto/secret-box.ts';
import { openChangeFeed } from '../src/db/change-feed.ts';
import { connect } from '../src/db/database.ts';
import { createLogger } from '../src/logger.ts';
import { randomBytes } from 'node:crypto';

export interface ServiceStart {
  databaseUrl: string;
  dataDir: string;
  apiKey: string;
  logLevel: string;
}

export type ServiceRequest = { type: 'memory' } | { type: 'cpu' } | { type: 'in-flight' } | { type: 'close' };

export interface MemorySample {
  /** Resident set size, bytes. */
  rss: number;
  heapUsed: number;
  heapTotal: number;
  /** Memory of C++ objects bound to JavaScript ones (sockets' buffers among them), bytes. */
  external: number;
}

export type ServiceReply =
  | { type: 'ready'; origin: string; pid: number }
  | { type: 'failed'; error: string }
  | { type: 'memory'; memory: MemorySample }
  | { type: 'cpu'; /** user + system CPU time of the process so far, microseconds. */ micros: number }
  | { type: 'in-flight'; count: number }
  | { type: 'closed' };

function send(reply: ServiceReply): void {
  process.send?.(reply);
}

async function start(options: ServiceStart): Promise<void> {
  const config = loadConfig({
    SLIPWAY_DATA_DIR: options.dataDir,
    SLIPWAY_BOOTSTRAP_API_KEY: options.apiKey,
    LOG_LEVEL: options.logLevel,
    HOST: '127.0.0.1',
    PORT: '0',
    // Every simulated listener polls from 127.0.0.1, in one workspace, each with its own credential: the
    // default stream budgets (per credential, and SLIPWAY_STREAMS_PER_WORKSPACE's 1,200 per workspace)
    // are sized to serve such a fleet, and the bench runs with them.
  });
  // Production's logger, written to /dev/null: the cost of logging is measured, not a terminal's.
  const logger = createLogger(config.logLevel, pino.destination({ dest: '/dev/null', sync: true }));
  const { db, pool } = connect(options.databaseUrl);
  await bootstrap(db, config.bootstrapApiKey);
  const changes = await openChangeFeed(options.databaseUrl, logger);
  const app = await buildApp({ config, db, pool, secretBox: createSecretBox(randomBytes(32)), logger, changes });
  let inFlight = 0;
  app.server.on('request', (_req, res) => {
    inFlight += 1;
    res.once('close', () => (inFlight -= 1));
  });
  const origin = await app.listen({ host: config.host, port: config.port });

  const gc = (globalThis as { gc?: () => void }).gc;
  process.on('message', (message: ServiceRequest) => {
    switch (message.type) {
      case 'memory': {
        // Twice, a moment apart: the first pass may leave garbage that only a second one frees (weak
        // references, finalizers), and V8 hands freed pages back to the system lazily.
        gc?.();
        setTimeout(() => {
          gc?.();
          const { rss, heapUsed, heapTotal, external } = process.memoryUsage();
          send({ type: 'memory', memory: { rss, heapUsed, heapTotal, external } });
        }, 500);
        return;
      }
      case 'cpu': {
        const cpu = process.cpuUsage();
        send({ type: 'cpu', micros: cpu.user + cpu.system });
        return;
      }
      case 'in-flight':
        send({ type: 'in-flight', count: inFlight });
        return;
      case 'close':
        // As main.ts shuts down: requests first (waiting long-polls answer at once), then the feed and the pool.
        void (async () => {
          await app.close();
          await changes.close();
          await db.destroy();
          send({ type: 'closed' });
          process.disconnect?.();
        })();
        return;
    }
  });
  send({ type: 'ready', origin, pid: process.pid });
}

process.once('message', (options: ServiceStart) => {
  start(options).catch((error: unknown) => {
    send({ type: 'failed', error: error instanceof Error ? (error.stack ?? error.message) : String(error) });
    process.exit(1);
  });
});
// The bench went away (Ctrl-C, a crash): nothing is left to serve.
process.on('disconnect', () => setTimeout(() => process.exit(0), 1_000).unref());
