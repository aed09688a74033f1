/**
 * The service with its local data plane, in the bench's process, as src/main.ts starts it: the API on
 * one loopback port, the app edge on another (nginx when it is installed, as `auto` chooses; else the
 * built-in proxy), the change feed, and the worker with the local runtime, in the sandbox mode asked
 * for (`SLIPWAY_SANDBOX`: `auto`, the default, isolates fully when bubblewrap, slirp4netns and socat
 * are installed; `none` runs apps bare; apps run as `nobody` when the bench runs as root). It runs on a
 * database and a data directory of its own, made on the bench's PostgreSQL server and dropped on
 * close: the seeded bench database holds thousands of QUEUED revisions that a worker would start
 * claiming, and two services (one per sandbox mode) run side by side.
 *
 * Plus the few client helpers the data plane bench needs: the API with the bootstrap key, uploading a
 * folder, and a request to an app by its Host header (fetch cannot set Host).
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import type { FastifyInstance } from 'fastify';
import type { Kysely } from 'kysely';
import type pg from 'pg';
import pino, { type Logger } from 'pino';
import * as tar from 'tar';
import { createMigratedDatabase } from '../scripts/scratch-server.ts';
import { buildApp } from '../src/app.ts';
import { bootstrap } from '../src/bootstrap.ts';
import { loadConfig, type Config } from '../src/config.ts';
import { createSecretBox } from '../src/crypto/secret-box.ts';
import { openChangeFeed, type ChangeFeed } from '../src/db/change-feed.ts';
import { connect } from '../src/db/database.ts';
import { freePort } from '../src/db/embedded-postgres.ts';
import { withClient } from '../src/db/admin-client.ts';
import { startAppEdge, type AppEdge } from '../src/dataplane/app-edge.ts';
import { startLocalDataPlane } from '../src/dataplane/local-data-plane.ts';
import { createLogger } from '../src/logger.ts';
import type { Worker } from '../src/domain/data-plane.ts';
import { createCodehostIntegrationService } from '../src/service/codehost-integrations.ts';
import type { Database } from '../src/store/schema.ts';

export interface DataPlaneService {
  /** http://127.0.0.1:<port> */
  origin: string;
  port: number;
  config: Config;
  /** Connection string of the service's own database (app databases live beside it). */
  databaseUrl: string;
  db: Kysely<Database>;
  pool: pg.Pool;
  /** Where apps are served: `edge.kind` says which proxy, `edge.port` where. */
  edge: AppEdge;
  /** The bootstrap API key (admin), for load on the API itself. */
  apiKey: string;
  /** The service's logger (to /dev/null), for other edges the bench starts beside it. */
  logger: Logger;
  /** What isolation the worker's sandbox gives, as the start-up log says it. */
  isolation: string;
  api<T = any>(method: string, url: string, body?: unknown): Promise<{ status: number; body: T }>;
  /** Packs a folder into a .tar.gz, uploads it and returns its source_tarball_path. */
  upload(dir: string): Promise<string>;
  /** Idempotent: stops the worker and its apps, the API, drops the databases, removes the data directory. */
  close(): Promise<void>;
}

/**
 * `serverUrl` is any database on the server to use (the bench's own): the service's database is
 * created next to it, with the same credentials, which must be allowed to create databases and roles.
 */
export async function startDataPlaneService(
  serverUrl: string,
  logLevel: string,
  sandbox: 'auto' | 'none' = 'auto',
): Promise<DataPlaneService> {
  const name = `slipway_bench_dp_${process.pid}_${randomBytes(3).toString('hex')}`;
  const databaseUrl = await createMigratedDatabase(serverUrl, name);
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-bench-dp-'));
  // The sandboxed app user (nobody, when we are root) must be able to pass through it, never list it.
  await fs.chmod(dataDir, 0o711);
  const apiKey = `slw_bench_${randomBytes(16).toString('hex')}`;
  const port = await freePort();
  // A free port of its own for the edge (the default, PORT + 1, may be taken, by the other service too).
  const appsPort = await freePort();
  const config = loadConfig({
    SLIPWAY_DATA_DIR: dataDir,
    SLIPWAY_BOOTSTRAP_API_KEY: apiKey,
    LOG_LEVEL: logLevel,
    SLIPWAY_SANDBOX: sandbox,
    HOST: '127.0.0.1',
    PORT: String(port),
    SLIPWAY_APPS_PORT: String(appsPort),
    // Bounds for the bench: a broken app fails in 30 s, a deleted one is stopped within 3 s.
    SLIPWAY_HEALTH_TIMEOUT_SECONDS: '30',
    SLIPWAY_DRAIN_SECONDS: '3',
  });
  // As bench-servers.ts does for the API service: production's logger, written to /dev/null.
  const logger = createLogger(config.logLevel, pino.destination({ dest: '/dev/null', sync: true }));
  const { db, pool } = connect(databaseUrl);
  const secretBox = createSecretBox(randomBytes(32));
  let changes: ChangeFeed | null = null;
  let edge: AppEdge | null = null;
  let app: FastifyInstance | null = null;
  let worker: Worker | null = null;

  let closing: Promise<void> | null = null;
  const close = () =>
    (closing ??= (async () => {
      // As main.ts shuts down: requests first, then the apps and builds, then the proxy and the feed.
      await app?.close();
      await worker?.stop();
      await edge?.close();
      await changes?.close();
      // App databases and roles live on the same server: drop what is left of them.
      const left = await db
        .selectFrom('deployment_runtimes')
        .select('database_name')
        .execute()
        .catch(() => []);
      await db.destroy();
      await withClient(serverUrl, async (client) => {
        for (const { database_name } of left) {
          if (!database_name) continue;
          await client.query(`drop database if exists ${client.escapeIdentifier(database_name)} with (force)`);
          await client.query(`drop role if exists ${client.escapeIdentifier(database_name)}`);
        }
        await client.query(`drop database if exists ${client.escapeIdentifier(name)} with (force)`);
      });
      await fs.rm(dataDir, { recursive: true, force: true });
    })());

  try {
    await bootstrap(db, config.bootstrapApiKey);
    changes = await openChangeFeed(databaseUrl, logger);
    edge = await startAppEdge({ config, logger });
    app = await buildApp({ config, db, secretBox, logger, changes });
    await app.listen({ host: config.host, port: config.port });
    const dataPlane = (worker = await startLocalDataPlane({
      config,
      db,
      pool,
      databaseUrl,
      secretBox,
      changes,
      edge,
      repositories: createCodehostIntegrationService({ db, secretBox, allowInsecure: false, logger }).repositories,
      logger,
    }));
    const origin = `http://127.0.0.1:${port}`;
    return {
      origin,
      port,
      config,
      databaseUrl,
      db,
      pool,
      edge,
      apiKey,
      logger,
      isolation: dataPlane.isolation,
      async api(method, url, body) {
        const response = await fetch(`${origin}${url}`, {
          method,
          headers: { 'x-api-key': apiKey, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
          ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
          signal: AbortSignal.timeout(30_000),
        });
        const text = await response.text();
        return { status: response.status, body: text === '' ? undefined : JSON.parse(text) };
      },
      async upload(dir) {
        const archive = path.join(os.tmpdir(), `slipway-bench-app-${randomBytes(4).toString('hex')}.tar.gz`);
        await tar.c({ gzip: true, file: archive, cwd: dir, portable: true }, await fs.readdir(dir));
        try {
          const response = await fetch(`${origin}/v2/uploads`, {
            method: 'POST',
            headers: { 'x-api-key': apiKey, 'content-type': 'application/gzip' },
            body: await fs.readFile(archive),
            signal: AbortSignal.timeout(30_000),
          });
          const answer = (await response.json()) as { source_tarball_path: string };
          if (response.status !== 201) throw new Error(`upload failed: ${response.status} ${JSON.stringify(answer)}`);
          return answer.source_tarball_path;
        } finally {
          await fs.rm(archive, { force: true });
        }
      },
      close,
    };
  } catch (error) {
    await close();
    throw error;
  }
}

/** GET of `pathname` on `port` (the app edge's) with Host `host`; status only, body drained. */
export function requestByHost(port: number, host: string, pathname: string, timeoutMs = 2_000): Promise<number> {
  return new Promise((resolve, reject) => {
    const request = http.request(
      { host: '127.0.0.1', port, path: pathname, method: 'GET', headers: { host }, agent: false, timeout: timeoutMs },
      (response) => {
        response.resume();
        response.on('end', () => resolve(response.statusCode ?? 0));
        response.on('error', reject);
      },
    );
    request.on('timeout', () => request.destroy(new Error(`no answer from ${host}${pathname} within ${timeoutMs} ms`)));
    request.on('error', reject);
    request.end();
  });
}
