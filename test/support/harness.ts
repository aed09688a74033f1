/**
 * The test harness every test that needs the service builds on, in small pieces that compose:
 * - database: a fresh one per test file, cloned from the migrated template (scripts/run-tests.ts);
 * - service app: buildApp(deps) on it with a known admin key (createTestApp), and more replicas of it;
 * - HTTP server: listening on a port of 127.0.0.1 (listen), and a caller over fetch (fetchApi);
 * - tenant and key: another workspace with a client acting in it, and its own admin key (newWorkspace);
 * - listener: a registered listener with a credential (registerListener);
 * - data plane: the local data plane's worker on the app's database (startDataPlane);
 * - the inject() client (client); waits are support/wait.ts's `eventually`.
 * Process-level tests (the service spawned as `npm start` runs it) use support/service-harness.ts.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
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
import { freePort } from '../../src/db/embedded-postgres.ts';
import { startAppEdge, type AppEdge } from '../../src/dataplane/app-edge.ts';
import { removeTree } from '../../src/dataplane/build-snapshot.ts';
import { probeSubordinateIds } from '../../src/dataplane/subordinate-ids.ts';
import type { LocalDataPlane } from '../../src/dataplane/local-data-plane.ts';
import { createLogger } from '../../src/logger.ts';
import type { Database } from '../../src/store/schema.ts';
import { startTracing, type Tracing } from '../../src/telemetry/tracing.ts';
import { DATABASES_ENV } from '../../scripts/sql-record.ts';
import { sourceOfBundle } from '../../scripts/test-bundles.ts';
import { unmountUnder } from './mounts.ts';
import { assertAnswerDocumented } from './openapi-conformance.ts';

/** The repository's root: where `npm start`, `packages/listener/src/main.ts` and `bin/slipway.mjs` are run from. */
export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

/** A port of 127.0.0.1 nothing listens on (taken, then released). */
export { freePort };

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

/**
 * While the run records the SQL of each file (`npm test -- --record-sql`, scripts/sql-record.ts): which
 * file this database is, by the server's id for it.
 */
async function recordDatabase(client: pg.Client, name: string): Promise<void> {
  const databases = process.env[DATABASES_ENV];
  if (!databases) return;
  const { rows } = await client.query<{ oid: number }>('select oid::int as oid from pg_database where datname = $1', [
    name,
  ]);
  const file = sourceOfBundle(process.argv[1] ?? '');
  await fs.appendFile(databases, `${JSON.stringify({ database: rows[0]!.oid, file })}\n`);
}

/** A fresh database with every migration applied, cloned from the template. */
export async function createTestDatabase(): Promise<TestDatabase> {
  const { adminUrl, template } = testEnvironment();
  const name = `${template}_${randomBytes(4).toString('hex')}`;
  await admin(async (c) => {
    await c.query(`create database ${name} template ${template}`);
    await recordDatabase(c, name);
  });
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
  /** Replaces fetch towards the single sign-on provider (test/sso/sso-harness.ts). */
  ssoFetch?: AppDeps['ssoFetch'];
  /** The services' clock (OAuth token expiry, listener state, session expiry), for a test that moves time instead of waiting. */
  now?: AppDeps['now'];
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
    traffic: () => edge?.traffic ?? null,
    codehostClient: options.codehostClient,
    ...(changes ? { changes } : {}),
    ...(options.ssoFetch ? { ssoFetch: options.ssoFetch } : {}),
    ...(options.now ? { now: options.now } : {}),
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
      // Deployments' own file systems stay mounted when the service stops (src/dataplane/disk-images.ts).
      await unmountUnder(dataDir);
      // Sealed builds have no write bits, which only root ignores (CI runs tests as an ordinary user too);
      // a service user with subordinate ids runs each deployment's app as one of them, whose files only a
      // removal in the mapped namespace can take (as the service's own teardown does). Where that namespace
      // cannot be made (no new privileges), the apps ran as the service's user: a plain removal does.
      const ids = process.getuid?.() === 0 ? null : (await probeSubordinateIds()).ids;
      await removeTree(dataDir, ids).catch(() => removeTree(dataDir));
    },
  };
}

/**
 * Another app on the test app's database, config and key (a second replica of the service), not
 * listening; `deps` replaces any of what it is built with (its own change feed, a counting database...).
 */
export async function buildReplicaApp(
  t: Pick<TestApp, 'config' | 'database' | 'secretBox'>,
  deps: Partial<AppDeps> = {},
): Promise<FastifyInstance> {
  const app = await buildApp({
    config: t.config,
    db: t.database.db,
    secretBox: t.secretBox,
    logger: createLogger('silent'),
    ...deps,
  });
  await app.ready();
  return app;
}

/** Listens on a port of 127.0.0.1 (any free one unless given); its base URL, e.g. `http://127.0.0.1:41234`. */
export async function listen(app: FastifyInstance, port = 0): Promise<string> {
  return app.listen({ port, host: '127.0.0.1' });
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
 * Another replica of the test app with a change feed of its own, listening on a port of 127.0.0.1
 * (for long-polls and followed streams over real HTTP).
 */
export async function startReplica(t: TestApp): Promise<Replica> {
  const changes = await openChangeFeed(t.database.url, createLogger('silent'));
  try {
    const app = await buildReplicaApp(t, { changes });
    try {
      const url = await listen(app);
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

export interface ApiAnswer<T = any> {
  status: number;
  body: T;
}

export type FetchApi = <T = any>(method: string, url: string, body?: unknown) => Promise<ApiAnswer<T>>;

/**
 * JSON requests over real HTTP to the service at `base`, with the admin key unless another is given;
 * what a user does with curl. (support/http-caller.ts also checks each answer against the OpenAPI document.)
 */
export function fetchApi(base: string, options: { key?: string; timeoutMs?: number } = {}): FetchApi {
  return async <T = any>(method: string, url: string, body?: unknown): Promise<ApiAnswer<T>> => {
    const response = await fetch(`${base}${url}`, {
      method,
      headers: {
        'x-api-key': options.key ?? ADMIN_KEY,
        ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
      },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      ...(options.timeoutMs !== undefined ? { signal: AbortSignal.timeout(options.timeoutMs) } : {}),
    });
    const text = await response.text();
    return { status: response.status, body: (text === '' ? undefined : JSON.parse(text)) as T };
  };
}

export interface Workspace {
  id: string;
  /** The organization key acting in the new workspace (X-Tenant-Id). */
  api: ReturnType<typeof client>;
}

/** Another workspace of the test app's organization, made through the API with the organization key. */
export async function newWorkspace(t: Pick<TestApp, 'app' | 'orgKey'>, name: string): Promise<Workspace> {
  const made = await client(t.app, t.orgKey).post('/v2/workspaces', { name });
  if (made.status !== 201) throw new Error(`POST /v2/workspaces: ${made.status} ${JSON.stringify(made.body)}`);
  return { id: made.body.id, api: client(t.app, t.orgKey, made.body.id) };
}

/** A workspace admin API key of `workspaceId`, made with the organization key; a client using it. */
export async function newWorkspaceAdmin(
  t: Pick<TestApp, 'app' | 'orgKey'>,
  workspaceId: string,
  name: string,
): Promise<{ key: string; api: ReturnType<typeof client> }> {
  const made = await client(t.app, t.orgKey).post('/v2/api-keys', { name, role: 'admin', workspace_id: workspaceId });
  if (made.status !== 201) throw new Error(`POST /v2/api-keys: ${made.status} ${JSON.stringify(made.body)}`);
  return { key: made.body.key, api: client(t.app, made.body.key) };
}

export interface RegisteredListener {
  id: string;
  credential: string;
  credentialId: string;
}

/**
 * Registers a k8s listener and makes its credential, as docs/listener.md's steps 1 and 2 do, through
 * `post` (an inject() client's post, or a FetchApi's).
 */
export async function registerListener(
  post: (url: string, body: unknown) => Promise<ApiAnswer>,
  computeId: string,
  namespaces: string[],
): Promise<RegisteredListener> {
  const listener = await post('/v2/listeners', {
    compute_type: 'k8s',
    compute_id: computeId,
    compute_config: { k8s_namespaces: namespaces },
  });
  if (listener.status !== 201)
    throw new Error(`POST /v2/listeners: ${listener.status} ${JSON.stringify(listener.body)}`);
  const credential = await post(`/v2/listeners/${listener.body.id}/credentials`, {});
  if (credential.status !== 201)
    throw new Error(`POST /v2/listeners/{id}/credentials: ${credential.status} ${JSON.stringify(credential.body)}`);
  return { id: listener.body.id, credential: credential.body.credential, credentialId: credential.body.id };
}

/**
 * The local data plane's worker on the test app's database, edge and change feed (createTestApp with
 * `changes` and `edge`), with a short lease and back-off. Its modules load only here, for the tests
 * that start one.
 */
export async function startDataPlane(t: TestApp): Promise<LocalDataPlane> {
  if (t.changes === null || t.edge === null)
    throw new Error('startDataPlane needs createTestApp(..., { changes: true, edge: true })');
  const { startLocalDataPlane } = await import('../../src/dataplane/local-data-plane.ts');
  const { createCodehostIntegrationService } = await import('../../src/service/codehost-integrations.ts');
  const { config, database, secretBox, logger } = t;
  return startLocalDataPlane({
    config,
    db: database.db,
    pool: database.pool,
    databaseUrl: database.url,
    secretBox,
    changes: t.changes,
    edge: t.edge,
    repositories: createCodehostIntegrationService({
      db: database.db,
      secretBox,
      allowInsecure: true,
      allowedApiUrls: config.codehostAllowedUrls,
      logger,
    }).repositories,
    logger,
    tracing: t.tracing,
    // As main.ts: apps reach this API through their forwards, which tell it the deployment.
    ...(config.roles.includes('api') ? { apiConnections: t.app.appConnections.accept } : {}),
    leaseSeconds: 6,
    backoff: { initialMs: 100, maxMs: 500 },
  });
}

/** Drops the apps' own databases and roles, which live beside the test database on the same server. */
export async function dropAppDatabases(database: TestDatabase): Promise<void> {
  const left = await database.db
    .selectFrom('deployment_runtimes')
    .select('database_name')
    .execute()
    .catch(() => []);
  await withClient(database.url, async (c) => {
    for (const { database_name } of left) {
      if (!database_name) continue;
      await c.query(`drop database if exists ${c.escapeIdentifier(database_name)} with (force)`);
      await c.query(`drop role if exists ${c.escapeIdentifier(database_name)}`);
    }
  });
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
