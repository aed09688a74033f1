/**
 * What a running app has of the host besides its sandbox: its deployment's own writable directory
 * (`SLIPWAY_DATA_DIR`), and, when it has a network of its own, its ways to its database, to the
 * service's API and to the operator's OpenTelemetry collector (src/dataplane/host-forwards.ts), with
 * the caps that keep apps from taking the database server's connection slots.
 *
 * Its way to the API and its OTLP exports are taken by this process itself, with the running revision
 * they were opened for (src/http/app-connections.ts, src/telemetry/otlp-relay.ts): the API counts the
 * app's streams against its deployment, and its telemetry carries its own `slipway.*` attributes,
 * whatever the app sends.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from 'pino';
import type { Config } from '../config.ts';
import { MAX_CONNECTIONS, SERVICE_RESERVED_CONNECTIONS } from '../db/embedded-postgres.ts';
import { APP_ROLE_CONNECTION_LIMIT } from './app-database.ts';
import type { AppConnectionSink } from '../http/app-connections.ts';
import { createOtlpRelay } from '../telemetry/otlp-relay.ts';
import {
  isLoopbackHost,
  openHostForward,
  type ConnectionBudget,
  type ForwardTarget,
  type HostForward,
} from './host-forwards.ts';
import type { Sandbox } from './sandbox.ts';
import type { DiskLimiter } from './disk-limits.ts';
import type { ResourceSpec } from '../domain/resource-spec.ts';

/** Connections an app may hold to the service's PostgreSQL server through its forward (its role's limit, and a few in flight). */
const DATABASE_FORWARD_CONNECTIONS = APP_ROLE_CONNECTION_LIMIT + 5;
/**
 * Connections all apps together may hold to the service's PostgreSQL server: what the embedded server
 * has beyond the slots kept for the service, less a margin for connections on their way in and out.
 */
const DATABASE_FORWARD_BUDGET = MAX_CONNECTIONS - SERVICE_RESERVED_CONNECTIONS - 20;
/** Connections an app may hold to the service's API at once. */
const API_FORWARD_CONNECTIONS = 64;
/** Connections an app may hold to its OTLP relay (exporters keep one or two). */
const OTLP_FORWARD_CONNECTIONS = 16;

/** Where an app reaches its OTLP relay inside: OTLP/HTTP's usual port. */
const OTLP_INSIDE_PORT = 4318;

/** The running revision a set of forwards is opened for. */
export interface ForwardOwner {
  deploymentId: string;
  revisionId: string;
  workspaceId: string;
}

/** What a worker instance may use: the `queue_` fields of the spec when any is set, else those of web instances. */
export function queueResourceSpec(spec: ResourceSpec | null | undefined): ResourceSpec | null {
  if (!spec) return null;
  const fields = ['cpu', 'cpu_limit', 'memory_mb', 'memory_limit_mb'] as const;
  if (!fields.some((f) => spec[`queue_${f}`] !== undefined && spec[`queue_${f}`] !== null)) return spec;
  return Object.fromEntries(fields.map((f) => [f, spec[`queue_${f}`]]));
}

export interface AppHostAccess {
  /**
   * The host path of a deployment's own writable directory; with `preview`, that of the pull request's
   * preview instead (never the deployment's: a fork's code must not read or change it).
   */
  dataDirOf(deploymentId: string, preview?: number | null): string;
  /**
   * Makes the deployment's directories (once; on their own file system where the disk limit is hard)
   * and gives them to the app's user; the data directory's path (a preview's, empty at first, with `preview`).
   */
  prepareDataDir(deploymentId: string, preview?: number | null): Promise<string>;
  /** Removes the data of the deployment's previews but those of `keep` (pull request numbers). */
  removePreviewData(deploymentId: string, keep: ReadonlySet<number>): Promise<void>;
  /** Opens a running revision's forwards; the database URL and API URL the app is given. */
  openForwards(
    owner: ForwardOwner,
    databaseUrl: string | null,
  ): Promise<{ forwards: HostForward[]; databaseUrl: string | null; apiUrl: string; otlpEndpoint: string | null }>;
  closeForwards(forwards: readonly HostForward[]): Promise<void>;
}

export function createAppHostAccess(deps: {
  config: Config;
  sandbox: Sandbox;
  logger: Pick<Logger, 'warn'>;
  disk: Pick<DiskLimiter, 'prepareDeploymentDir'>;
  /** The API of this process, when it serves one: apps' connections go to it directly. */
  apiConnections?: AppConnectionSink | undefined;
}): AppHostAccess {
  const { config, sandbox, logger, apiConnections, disk } = deps;
  const otlpRelay = config.tracing ? createOtlpRelay({ tracing: config.tracing, logger }) : null;
  const allAppsBudget: ConnectionBudget = { name: 'all apps together', max: DATABASE_FORWARD_BUDGET, open: 0 };
  /** Each workspace's apps together (SLIPWAY_APP_DATABASE_CONNECTIONS_PER_WORKSPACE): one tenant cannot take every app's. */
  const workspaceBudgets = new Map<string, ConnectionBudget>();
  const workspaceBudget = (workspaceId: string): ConnectionBudget => {
    let budget = workspaceBudgets.get(workspaceId);
    if (!budget) {
      budget = {
        name: "the apps of this app's workspace",
        max: Math.min(config.appDatabaseConnectionsPerWorkspace, DATABASE_FORWARD_BUDGET),
        open: 0,
      };
      workspaceBudgets.set(workspaceId, budget);
    }
    return budget;
  };

  const deploymentRoot = (deploymentId: string) => path.join(config.disk.appsDataDir, deploymentId);
  /** Where a deployment's previews keep their data, each in `pr-<number>` (service-owned, like the root). */
  const previewsRoot = (deploymentId: string) => path.join(deploymentRoot(deploymentId), 'previews');
  /**
   * The deployment's own writable directory, kept across its revisions (at /home/app/data inside); a
   * preview's is its own, beside the deployment's on the deployment's file system (its disk limit counts it).
   */
  const dataDirOf = (deploymentId: string, preview: number | null = null): string =>
    preview === null
      ? path.join(deploymentRoot(deploymentId), 'data')
      : path.join(previewsRoot(deploymentId), `pr-${preview}`, 'data');
  async function prepareDataDir(deploymentId: string, preview: number | null = null): Promise<string> {
    const data = dataDirOf(deploymentId, preview);
    const root = deploymentRoot(deploymentId);
    // Passable, never listable, by the app's user: it finds its own directory only. The deployment's
    // directory stays the service's, so that only the two directories in it are the app's to write.
    await fs.mkdir(path.dirname(root), { recursive: true, mode: 0o711 });
    // A plain directory, or the deployment's own file system mounted there (src/dataplane/disk-images.ts).
    await disk.prepareDeploymentDir(deploymentId, root);
    // A preview's directories are in service-owned ones of their own, passable only.
    if (preview !== null) await fs.mkdir(path.dirname(data), { recursive: true, mode: 0o711 });
    for (const dir of [data, path.join(path.dirname(data), 'home')]) {
      // Made once and given to the app's user; never walked, since the app writes what is inside.
      const made = await fs
        .mkdir(dir, { mode: 0o700 })
        .then(() => true)
        .catch((error: NodeJS.ErrnoException) => {
          if (error.code === 'EEXIST') return false;
          throw error;
        });
      if (made) await sandbox.ownDir(dir, deploymentId);
    }
    return data;
  }

  /**
   * An app's ways to the host when it has a network of its own: its database and the service's API, each
   * through a Unix socket that leads only there, in a directory of this running revision.
   */
  async function openForwards(
    owner: ForwardOwner,
    databaseUrl: string | null,
  ): Promise<{ forwards: HostForward[]; databaseUrl: string | null; apiUrl: string; otlpEndpoint: string | null }> {
    const otlpEndpoint = config.tracing?.endpoint ?? null;
    if (!sandbox.slirp) return { forwards: [], databaseUrl, apiUrl: config.publicUrl, otlpEndpoint };
    const dir = path.join(sandbox.slirp.socketDir, randomBytes(12).toString('hex'));
    await fs.mkdir(dir, { mode: 0o711 });
    const forwards: HostForward[] = [];
    const open = async (target: ForwardTarget) => {
      const forward = await openHostForward(dir, target, logger);
      forwards.push(forward);
      return forward;
    };
    try {
      let insideDatabaseUrl = databaseUrl;
      if (databaseUrl) {
        const url = new URL(databaseUrl);
        const port = Number(url.port || 5432);
        await open({
          name: 'database',
          host: url.hostname,
          port,
          insidePort: port,
          maxConnections: DATABASE_FORWARD_CONNECTIONS,
          budgets: [workspaceBudget(owner.workspaceId), allAppsBudget],
          postgresLogin: {
            user: decodeURIComponent(url.username),
            database: decodeURIComponent(url.pathname.slice(1)),
          },
        });
        url.hostname = '127.0.0.1';
        url.port = String(port);
        insideDatabaseUrl = url.toString();
      }
      const api = new URL(config.publicUrl);
      const apiOnLoopback = isLoopbackHost(api.hostname);
      if (apiConnections || apiOnLoopback) {
        // Inside, the public URL's own address when it names this machine's loopback; else the API's port.
        const port = apiOnLoopback ? Number(api.port || (api.protocol === 'https:' ? 443 : 80)) : config.port;
        const host = config.host === '0.0.0.0' || config.host === '::' ? '127.0.0.1' : config.host;
        const origin = { deploymentId: owner.deploymentId, workspaceId: owner.workspaceId };
        await open({
          name: 'api',
          // The API of this process takes the connection itself, knowing the deployment it came from.
          ...(apiConnections ? { deliver: (socket) => apiConnections(socket, origin) } : { host, port: config.port }),
          insidePort: port,
          maxConnections: API_FORWARD_CONNECTIONS,
        });
        if (!apiOnLoopback) {
          api.protocol = 'http:';
          api.pathname = '/';
        }
        api.hostname = '127.0.0.1';
        api.port = String(port);
      }
      // Exports go through the relay of this process, never to the collector directly.
      let insideOtlp = otlpEndpoint;
      if (otlpRelay) {
        const resource = {
          'slipway.deployment.id': owner.deploymentId,
          'slipway.revision.id': owner.revisionId,
          'slipway.workspace.id': owner.workspaceId,
        };
        const taken = new Set(forwards.map((f) => f.port));
        const port = taken.has(OTLP_INSIDE_PORT) ? OTLP_INSIDE_PORT + 1 : OTLP_INSIDE_PORT;
        await open({
          name: 'otlp',
          deliver: (socket) => otlpRelay.accept(socket, resource),
          insidePort: port,
          maxConnections: OTLP_FORWARD_CONNECTIONS,
        });
        insideOtlp = `http://127.0.0.1:${port}`;
      }
      return {
        forwards,
        databaseUrl: insideDatabaseUrl,
        apiUrl: api.toString().replace(/\/$/, ''),
        otlpEndpoint: insideOtlp,
      };
    } catch (error) {
      await closeForwards(forwards);
      throw error;
    }
  }

  async function closeForwards(forwards: readonly HostForward[]): Promise<void> {
    await Promise.all(forwards.map((f) => f.close()));
    const dirs = new Set(forwards.map((f) => path.dirname(f.socketPath)));
    for (const dir of dirs) await fs.rm(dir, { recursive: true, force: true });
  }

  async function removePreviewData(deploymentId: string, keep: ReadonlySet<number>): Promise<void> {
    const names = await fs.readdir(previewsRoot(deploymentId)).catch((error: NodeJS.ErrnoException) => {
      if (error.code === 'ENOENT') return [];
      throw error;
    });
    for (const name of names) {
      const number = /^pr-([1-9][0-9]*)$/.exec(name)?.[1];
      // rm walks without following links: what the app made inside goes, nothing outside it.
      if (number !== undefined && !keep.has(Number(number)))
        await fs.rm(path.join(previewsRoot(deploymentId), name), { recursive: true, force: true });
    }
  }

  return { dataDirOf, prepareDataDir, removePreviewData, openForwards, closeForwards };
}
