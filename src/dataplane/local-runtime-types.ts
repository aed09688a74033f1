/**
 * What the local data plane's runtime (src/dataplane/local-runtime.ts) is given and what it offers:
 * a revision's job, the runtime's dependencies, and its interface to the worker and the metrics.
 */
import type { Kysely } from 'kysely';
import type pg from 'pg';
import type { Logger } from 'pino';
import type { Config } from '../config.ts';
import type { SecretBox } from '../crypto/secret-box.ts';
import type { OwnPlaneReports } from '../domain/data-plane.ts';
import type { SourceConfig } from '../domain/sources.ts';
import type { AppConnectionSink } from '../http/app-connections.ts';
import type { Database, RevisionSnapshot, StoredSecret } from '../store/schema.ts';
import type { AppEdge } from './app-edge.ts';
import type { InstanceStats } from './app-supervisor.ts';
import type { DiskLimiter } from './disk-limits.ts';
import type { BuildHooks, BuildInput, BuildRecord, SourceFetcher } from './revision-build.ts';
import type { Sandbox } from './sandbox.ts';

export interface RevisionJob {
  revisionId: string;
  source: BuildInput['source'];
  config: BuildInput['config'];
  snapshot: RevisionSnapshot;
  secrets: StoredSecret[];
  deployment: {
    id: string;
    workspace_id: string;
    name: string;
    /** The DNS label of its stable URL, kept with the deployment (migrations/017_app_slugs.sql). */
    app_slug: string;
    source_config: SourceConfig;
    tracing_project_id: string;
  };
}

/** An endpoint the data plane should serve, with the job of its revision. */
export interface WantedEndpoint {
  name: string;
  job: RevisionJob;
  /** A traffic split: `weight` percent of the endpoint's clients to this revision (docs/app-urls.md). */
  split?: { job: RevisionJob; weight: number } | null;
}

/**
 * What became of an endpoint's start: served (from the revision served before, if any) or failed. With
 * `split`, of its traffic split's revision (served with its weight, or failed: the endpoint's revision
 * keeps all the traffic).
 */
export type EndpointOutcome = { split?: { weight: number } } & (
  | { endpoint: string; revisionId: string; fromRevisionId: string | null; served: true }
  | { endpoint: string; revisionId: string; served: false; message: string }
);

export interface LocalRuntimeDeps {
  config: Config;
  db: Kysely<Database>;
  /** The service's pool: makes and drops app databases. */
  pool: pg.Pool;
  /** The service's own connection string: apps get its host and port with their own role. */
  databaseUrl: string;
  secretBox: SecretBox;
  /** Where the conditions of deployments are reported (the lifecycle's reports of this data plane). */
  reports: OwnPlaneReports;
  sandbox: Sandbox;
  edge: AppEdge;
  fetcher: SourceFetcher;
  logger: Logger;
  /** Supervisor back-off; tests shorten it. */
  backoff?: { initialMs: number; maxMs: number };
  /** The disk limits of apps and builds (src/dataplane/disk-limits.ts). */
  disk: DiskLimiter;
  /** The API of this process, when it serves one: apps' connections to the API go to it (src/http/app-connections.ts). */
  apiConnections?: AppConnectionSink;
}

export interface AppRuntimeStats {
  deploymentId: string;
  /** The app's host label, as the edge counts it: `<slug>--<endpoint>` for an endpoint's instances. */
  slug: string;
  /** The endpoint's name when these are an endpoint's instances; absent for the deployment's own. */
  endpoint?: string;
  /** The revision these instances run. */
  revisionId: string;
  instances: InstanceStats[];
}

export interface LocalRuntime {
  readonly isolation: string;
  build(job: RevisionJob, hooks: BuildHooks, signal: AbortSignal): Promise<BuildRecord>;
  /**
   * Starts the revision beside the one serving, waits for its health check, then calls `commit`
   * (which records DEPLOYED) and only then switches the stable URL to it and drains the old one.
   */
  deploy(job: RevisionJob, signal: AbortSignal, commit: (customUrl: string) => Promise<void>): Promise<void>;
  /** Starts a deployment's active revision again (after a service restart), from its build output. */
  resume(job: RevisionJob): Promise<void>;
  /**
   * Brings the deployment's endpoints to `wanted` (each endpoint's revision): starts what is new or
   * moved beside what serves there, switches each route once healthy, drains and stops the old
   * instances, and stops endpoints no longer wanted. `report` hears each endpoint served or failed. A
   * call while one for the same deployment is under way is run after it, with the latest `wanted`.
   */
  serveEndpoints(
    deploymentId: string,
    wanted: WantedEndpoint[],
    report: (outcome: EndpointOutcome) => Promise<void>,
  ): Promise<void>;
  /** Deployments whose apps run here. */
  running(): string[];
  /** Each running app's instances: restarts and resource usage (per-deployment metrics). */
  appStats(): Promise<AppRuntimeStats[]>;
  /**
   * Brings the deployment's running app to the instance counts of its current resource spec, in place
   * (no new revision), and records `deployment.scaled` (or `deployment.scale_failed`). Does nothing
   * unless `revisionId` is what serves here, and while a change of the same app is under way.
   */
  rescale(deploymentId: string, revisionId: string, resourceSpec: Record<string, unknown> | null): Promise<void>;
  /** Re-checks running apps: a deployment reported UNKNOWN whose app is healthy again is READY. */
  check(): Promise<void>;
  /** Stops a deployment's processes and its route. */
  stop(deploymentId: string): Promise<void>;
  /** Everything a deleted deployment leaves here: processes, database, app directories. */
  teardown(deployment: { id: string }, revisionIds: string[]): Promise<void>;
  /** Removes app directories of revisions that are no longer needed. */
  removeRevisionFiles(revisionId: string): Promise<void>;
  /**
   * Removes the file of an upload made before uploads were stored in the database, if this replica
   * received it (its row, and so its chunks, are already gone).
   */
  removeUpload(relativePath: string): Promise<void>;
  close(): Promise<void>;
}
