/**
 * The space a deployment's own PostgreSQL database takes, and for a LangGraph deployment how much of it
 * is its state (threads, runs, checkpoints, the store) and which TTLs keep it from growing
 * (docs/langgraph.md, "How much space the state takes").
 */
import type pg from 'pg';
import type { SecretBox } from '../crypto/secret-box.ts';
import { appDatabaseClient } from '../dataplane/app-database.ts';
import { AppError, notFound } from '../errors.ts';
import { databaseSize, langGraphUsage, type LangGraphUsage } from '../store/app-database-usage.ts';
import { getDeployment } from '../store/deployments.ts';
import { getDeploymentRuntime } from '../store/deployment-runtimes.ts';
import type { Db } from '../store/schema.ts';
import { systemClock, type Clock } from '../clock.ts';

export interface DeploymentStorage {
  deployment_id: string;
  /** Null when the deployment has no database on this service (a listener runs it, or it wants none). */
  database: { name: string; size_bytes: number } | null;
  /** Null when its database holds no LangGraph state. */
  langgraph: LangGraphUsage | null;
  measured_at: string;
}

export interface DeploymentStorageDeps {
  db: Db;
  secretBox: SecretBox;
  /** The service's pool: app databases are on its server. */
  pool?: pg.Pool;
  now?: Clock;
}

export type DeploymentStorageService = ReturnType<typeof createDeploymentStorageService>;

/** PostgreSQL's error code when a role holds every connection its limit allows. */
const TOO_MANY_CONNECTIONS = '53300';
/** PostgreSQL's error code when a role may not log in: a database cut off for its size (src/dataplane/app-database-storage.ts). */
const LOGIN_REFUSED = '28000';

export function createDeploymentStorageService(deps: DeploymentStorageDeps) {
  const now = deps.now ?? systemClock;

  return {
    /** 404 when the deployment is not the workspace's, like every route under it. */
    async measure(workspaceId: string, deploymentId: string): Promise<DeploymentStorage> {
      const deployment = await getDeployment(deps.db, workspaceId, deploymentId);
      if (!deployment) throw notFound('Deployment', deploymentId);
      const measuredAt = now().toISOString();
      const runtime = await getDeploymentRuntime(deps.db, deploymentId);
      const name = runtime?.database_name;
      if (!name || !runtime.role_name || !runtime.database_password_sealed)
        return { deployment_id: deploymentId, database: null, langgraph: null, measured_at: measuredAt };
      const pool = deps.pool;
      if (!pool)
        throw new AppError('unavailable', "This replica has no connection to the deployments' databases; retry later.");
      const size = await withServiceClient(pool, (client) => databaseSize(client, name));
      // Dropped meanwhile (the deployment is being deleted): there is nothing left to measure.
      if (size === null)
        return { deployment_id: deploymentId, database: null, langgraph: null, measured_at: measuredAt };
      const app = appDatabaseClient(pool, {
        name,
        role: runtime.role_name,
        password: deps.secretBox.open(runtime.database_password_sealed),
      });
      try {
        await app.connect();
      } catch (error) {
        await app.end().catch(() => undefined);
        // Cut off for its size: its size is known, what is inside cannot be read as the app.
        if ((error as { code?: string }).code === LOGIN_REFUSED)
          return {
            deployment_id: deploymentId,
            database: { name, size_bytes: size },
            langgraph: null,
            measured_at: measuredAt,
          };
        if ((error as { code?: string }).code === TOO_MANY_CONNECTIONS)
          throw new AppError(
            'unavailable',
            `The deployment's instances hold every connection its database role may have; retry when they hold fewer.`,
            { retryAfterSeconds: 5 },
          );
        throw error;
      }
      try {
        // One read-only transaction: nothing the app made runs with more than a reader's rights.
        await app.query('begin transaction read only');
        const langgraph = await langGraphUsage(app);
        await app.query('commit');
        return {
          deployment_id: deploymentId,
          database: { name, size_bytes: size },
          langgraph,
          measured_at: measuredAt,
        };
      } finally {
        await app.end();
      }
    },
  };
}

async function withServiceClient<T>(pool: pg.Pool, work: (client: pg.ClientBase) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  try {
    return await work(client);
  } finally {
    client.release();
  }
}
