/**
 * Test helpers: a database cloned from the migrated template per test file, the app built on it with
 * a known admin key, and a second replica of it listening on a port. See scripts/run-tests.ts for
 * where the template comes from.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { FastifyInstance, InjectOptions } from 'fastify';
import type { Kysely } from 'kysely';
import pg from 'pg';
import type { Logger } from 'pino';
import { buildApp, type AppDeps } from '../../src/app.ts';
import { bootstrap } from '../../src/bootstrap.ts';
import { loadConfig, type Config } from '../../src/config.ts';
import { createSecretBox, type SecretBox } from '../../src/crypto/secret-box.ts';
import { databaseUrl, withClient } from '../../src/db/admin-client.ts';
import { openChangeFeed, type ChangeFeed } from '../../src/db/change-feed.ts';
import { connect } from '../../src/db/database.ts';
import { startAppEdge, type AppEdge } from '../../src/dataplane/app-edge.ts';
import { createLogger } from '../../src/logger.ts';
import type { Database } from '../../src/store/schema.ts';
import { assertAnswerDocumented } from './openapi-conformance.ts';
import { startTracing, type Tracing } from '../../src/telemetry/tracing.ts';

function testEnvironment(): { adminUrl: string; template: string } {
  const adminUrl = process.env.SLIPWAY_TEST_ADMIN_URL;
  const template = process.env.SLIPWAY_TEST_TEMPLATE;
  if (!adminUrl || !template) throw new Error('Run tests with `npm test` (it prepares the test database).');
  return { adminUrl, template };
}

export interface TestDatabase {
  url: string;
  db: Kysely<Database>;
  pool: pg.Pool;
  drop(): Promise<void>;
}

function admin<T>(fn: (client: pg.Client) => Promise<T>): Promise<T> {
  return withClient(testEnvironment().adminUrl, fn);
}

/** A fresh database with every migration applied, cloned from the template. */
export async function createTestDatabase(): Promise<TestDatabase> {
  const { adminUrl, template } = testEnvironment();
  const name = `${template}_${randomBytes(4).toString('hex')}`;
  await admin((c) => c.query(`create database ${name} template ${template}`));
  const url = databaseUrl(adminUrl, name);
  const { db, pool } = connect(url, 10);
  return {
    url,
    db,
    pool,
    async drop() {
      await db.destroy();
      await admin((c) => c.query(`drop database if exists ${name} with (force)`));
    },
  };
}

export const ADMIN_KEY = 'slw_test_admin_key_0123456789abcdef';

export interface TestApp {
  app: FastifyInstance;
  database: TestDatabase;
  config: Config;
  secretBox: SecretBox;
  workspaceId: string;
  organizationId: string;
  /** The first-start organization admin key. */
  orgKey: string;
  dataDir: string;
  logger: Logger;
  /** The change feed, when asked for (TestAppOptions.changes). */
  changes: ChangeFeed | null;
  /** The edge that serves deployed apps, when asked for (TestAppOptions.edge). */
  edge: AppEdge | null;
  /** Traces, when the env names an OTLP endpoint (otherwise the no-op one). */
  tracing: Tracing;
  /** Closes the app, its edge and change feed, then drops the database and the data directory. */
  close(): Promise<void>;
}

export interface TestAppOptions {
  /** Options of the code-host clients, e.g. `{ retries: 0 }` so a failing fake host answers at once. */
  codehostClient?: AppDeps['codehostClient'];
  /** Where the app logs (e.g. into an array, to assert on the lines); else at the config's LOG_LEVEL. */
  logger?: Logger;
  /** A change feed on the database for the app, so followers and long-polls wake at once. */
  changes?: boolean;
  /** The edge that serves deployed apps (src/dataplane/app-edge.ts: nginx when installed), on a port of its own. */
  edge?: boolean;
  /** The apps for /metrics (the data plane harness's worker and edge). */
  apps?: AppDeps['apps'];
}

export async function createTestApp(env: Record<string, string> = {}, options: TestAppOptions = {}): Promise<TestApp> {
  const database = await createTestDatabase();
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-data-'));
  const config = loadConfig({
    SLIPWAY_DATA_DIR: dataDir,
    SLIPWAY_BOOTSTRAP_API_KEY: ADMIN_KEY,
    LOG_LEVEL: 'silent',
    SLIPWAY_APPS_PORT: '0',
    ...env,
  });
  const logger = options.logger ?? createLogger(config.logLevel);
  const secretBox = createSecretBox(randomBytes(32));
  const first = await bootstrap(database.db, config.bootstrapApiKey);
  const changes = options.changes ? await openChangeFeed(database.url, logger) : null;
  const edge = options.edge ? await startAppEdge({ config, logger }) : null;
  // Traces when the env names an OTLP endpoint, as main.ts does.
  const tracing = startTracing(config.tracing, logger);
  const app = await buildApp({
    config,
    db: database.db,
    secretBox,
    logger,
    tracing,
    ...(options.apps ? { apps: options.apps } : {}),
    codehostClient: options.codehostClient,
    ...(changes ? { changes } : {}),
  });
  await app.ready();
  return {
    app,
    database,
    config,
    secretBox,
    workspaceId: first.workspaceId,
    organizationId: first.organizationId,
    orgKey: first.generatedKey!,
    dataDir,
    logger,
    changes,
    edge,
    tracing,
    async close() {
      await app.close();
      await edge?.close();
      await changes?.close();
      await tracing.shutdown();
      await database.drop();
      await fs.rm(dataDir, { recursive: true, force: true });
    },
  };
}

export interface Replica {
  app: FastifyInstance;
  /** Where it listens, e.g. `http://127.0.0.1:41234`. */
  url: string;
  /** Its own change feed: a change made through another replica reaches it through PostgreSQL. */
  changes: ChangeFeed;
  /** Closes the app, then its change feed. */
  close(): Promise<void>;
}

/**
 * Another replica of the test app: the same database, config and key, with a change feed of its own,
 * listening on a port of 127.0.0.1 (for long-polls and followed streams over real HTTP).
 */
export async function startReplica(t: TestApp): Promise<Replica> {
  const logger = createLogger('silent');
  const changes = await openChangeFeed(t.database.url, logger);
  try {
    const app = await buildApp({ config: t.config, db: t.database.db, secretBox: t.secretBox, logger, changes });
    try {
      const url = await app.listen({ port: 0, host: '127.0.0.1' });
      return {
        app,
        url,
        changes,
        async close() {
          await app.close();
          await changes.close();
        },
      };
    } catch (error) {
      await app.close();
      throw error;
    }
  } catch (error) {
    await changes.close();
    throw error;
  }
}

export interface Response<T = any> {
  status: number;
  body: T;
  headers: Record<string, string | string[] | number | undefined>;
}

/**
 * A small client over inject(): JSON in, parsed JSON out, with an API key and optional tenant. Every
 * answer is checked against the app's OpenAPI document (test/support/openapi-conformance.ts): an
 * answer the document does not describe fails the test that asked for it.
 */
export function client(app: FastifyInstance, key: string | null = ADMIN_KEY, tenant?: string) {
  const call = async <T = any>(
    method: InjectOptions['method'],
    url: string,
    body?: unknown,
    headers: Record<string, string> = {},
  ): Promise<Response<T>> => {
    const sent: Record<string, string> = {
      ...(key ? { 'x-api-key': key } : {}),
      ...(tenant ? { 'x-tenant-id': tenant } : {}),
      ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
      ...headers,
    };
    const response = await app.inject({
      method,
      url,
      headers: sent,
      ...(body !== undefined ? { payload: typeof body === 'string' ? body : JSON.stringify(body) } : {}),
    });
    const text = response.body;
    const host = Object.entries(sent).find(([name]) => name.toLowerCase() === 'host')?.[1];
    await assertAnswerDocumented(
      { app },
      {
        method: String(method),
        url,
        ...(host !== undefined ? { host } : {}),
        status: response.statusCode,
        header: (name) => {
          const value = response.headers[name];
          return value === undefined ? undefined : String(value);
        },
        body: text,
      },
    );
    return {
      status: response.statusCode,
      body: (text === '' ? undefined : JSON.parse(text)) as T,
      headers: response.headers,
    };
  };
  return {
    get: <T = any>(url: string, headers?: Record<string, string>) => call<T>('GET', url, undefined, headers),
    post: <T = any>(url: string, body?: unknown, headers?: Record<string, string>) =>
      call<T>('POST', url, body ?? {}, headers),
    patch: <T = any>(url: string, body: unknown, headers?: Record<string, string>) =>
      call<T>('PATCH', url, body, headers),
    put: <T = any>(url: string, body: unknown, headers?: Record<string, string>) => call<T>('PUT', url, body, headers),
    delete: <T = any>(url: string, headers?: Record<string, string>) => call<T>('DELETE', url, undefined, headers),
    call,
  };
}
