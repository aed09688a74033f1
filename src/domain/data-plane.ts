/**
 * The contract between the lifecycle (src/service/lifecycle.ts, the one writer of revision and
 * deployment state) and the data planes that run deployments: the service's own (src/dataplane/, in
 * process) and a listener in a Kubernetes cluster (packages/listener/, over the listener protocol's HTTP). Both
 * report what happened through these operations, so the rules about which report may change what
 * (a stale, repeated or superseded report changes nothing; a final state is never left) are the same
 * for both. Types only: no I/O here, and neither side imports the other.
 *
 * Glossary
 * - report: a data plane saying a revision reached a status; applied only when it moves the revision
 *   forward through the state table (src/domain/states.ts).
 * - superseded: the revision is no longer the one this data plane was given to run (a listener: not
 *   the deployment's latest revision any more; the own data plane: its lease went to another worker).
 * - condition: a data plane saying how a deployment's serving revision is (crash-looping, healthy again,
 *   its database made), which moves the deployment's status by one table for both (src/domain/conditions.ts).
 * - fact: something the own data plane saw happen to a deployment's app (an instance exited, the app was
 *   scaled, its database made), recorded as the deployment's event with its registered type
 *   (src/domain/event-types.ts); it moves no status.
 */
import type { QueryExecutorProvider } from 'kysely';
import type { DeploymentConditionName } from './conditions.ts';
import type { DatabaseStorageState } from './database-storage.ts';
import type { EventType } from './event-types.ts';
import type { RevisionStatus } from './states.ts';

/** Why a report changed nothing (reports are idempotent, and stale ones never overwrite newer state). */
export type NotAppliedReason = 'duplicate' | 'behind' | 'superseded' | 'final';

export interface RevisionReport {
  revisionId: string;
  /** Where the revision is now; the lifecycle walks it there through the data plane's own steps. */
  status: RevisionStatus;
  /** With a failed status: why, machine-readable, and what a user should read. */
  failure?: { reason?: string; message?: string };
  /** DEPLOYED on the own data plane: the stable URL the deployment is now served at. */
  url?: string;
}

export interface ReportOutcome {
  applied: boolean;
  /** The revision's status after the report. */
  status: RevisionStatus;
  notAppliedReason: NotAppliedReason | null;
}

export interface DeploymentConditionReport {
  deploymentId: string;
  /**
   * Which condition: the status it moves the deployment to, and from which, are the one table's
   * (src/domain/conditions.ts), the same for both data planes.
   */
  condition: DeploymentConditionName;
  /** The event's data besides its reason (the condition's name): message, the revision concerned. */
  data: Record<string, unknown>;
}

/** The events a data plane reports as facts: each is in the one registry (src/domain/event-types.ts). */
export type DeploymentFactType = Extract<
  EventType,
  | 'deployment.app_exited'
  | 'deployment.disk_full'
  | 'deployment.scaled'
  | 'deployment.scale_failed'
  | 'deployment.database_created'
>;

export interface DeploymentFactReport {
  deploymentId: string;
  /** The deployment's workspace, which the event belongs to. */
  workspaceId: string;
  type: DeploymentFactType;
  /** The event's data, as the data plane saw it (docs/events.md says what each type carries). */
  data: Record<string, unknown>;
}

/** The events of a change of an app database's storage state (src/domain/database-storage.ts). */
export type DatabaseStorageEventType = Extract<
  EventType,
  'deployment.database_full' | 'deployment.database_cut_off' | 'deployment.database_writable'
>;

export interface DatabaseStorageReport {
  deploymentId: string;
  /** The deployment's workspace, which the event belongs to. */
  workspaceId: string;
  /** The state the data plane measured the database in: the change applies only while it still is. */
  from: DatabaseStorageState;
  to: DatabaseStorageState;
  /** The size the change was decided at. */
  sizeBytes: number;
  /** The change's event: its registered type and data. */
  event: { type: DatabaseStorageEventType; data: Record<string, unknown> };
}

/**
 * What became of an endpoint's start on the own data plane (docs/app-urls.md, "Endpoints"): it serves
 * `revisionId` now (moved from `fromRevisionId`, null when it served nothing before, as after a restart
 * of the service), or the start failed and the revision it served before goes on serving.
 */
export type EndpointReport = {
  /** Of the endpoint's traffic split's revision (with its weight), not the endpoint's own. */
  split?: { weight: number };
  deploymentId: string;
  endpoint: string;
  revisionId: string;
  /** The revision the service last recorded as serving the endpoint when the worker read it. */
  recordedRevisionId: string | null;
} & ({ served: true; fromRevisionId: string | null } | { served: false; message: string });

/**
 * What became of an endpoint on a listener's cluster (docs/listener.md, "Endpoints"): its own Deployment
 * runs `revisionId` with every replica available (`served`), or cannot (`message` says why; what served
 * there before, if anything, goes on). The service knows what was served before: the listener need not.
 */
export type ListenerEndpointReport = {
  /**
   * The report is about the endpoint's traffic split: `revisionId` is the split's revision, served at
   * this weight (its route accepted by the cluster's Gateway, its Deployment rolled out) or not served
   * (`message`: why, in plain words).
   */
  split?: { weight: number };
  deploymentId: string;
  endpoint: string;
  revisionId: string;
} & ({ served: true } | { served: false; message: string });

/** An app database the own data plane is about to make, kept first so a retried provisioning finds it. */
export interface AppDatabaseRecord {
  databaseName: string;
  roleName: string;
  /** Its password, sealed by the data plane (src/crypto/secret-box.ts). */
  passwordSealed: string;
}

/** The agent credential the own data plane made for a deployment's app. */
export interface AgentCredentialRecord {
  /** What the credential store keeps to check it (src/auth/credentials.ts). */
  hash: Buffer;
  prefix: string;
  /** The credential itself, sealed, for the app's later starts. */
  sealed: string;
}

/** Which log of a revision: its build's output, or its app's (docs/logs.md). */
export type RevisionLogKind = 'build' | 'deploy';

/** One stored line of a revision's log, as the own data plane's log writer made it (cleaned, redacted, cut). */
export interface RevisionLogLine {
  stream: 'stdout' | 'stderr' | 'system';
  line: string;
  at: Date;
}

export interface DeletionOutcome {
  /** False when the deployment was already gone (a retried confirmation). */
  deleted: boolean;
  /** Paths of uploads that only the deleted deployment used, removed with it. */
  orphanedUploads: string[];
}

/**
 * What both data planes report. A listener reaches these through the listener protocol
 * (src/service/listener-protocol.ts); the own data plane's worker calls them in process, with its own
 * besides (`OwnPlaneReports`).
 */
export interface DataPlaneReports {
  /**
   * Moves the revision to the reported status through every step in between, each with its event; a
   * DEPLOYED revision becomes the deployment's active one and the deployment READY. Throws not_found
   * when the revision (or its deployment) is gone or is not this data plane's.
   */
  reportRevision(report: RevisionReport): Promise<ReportOutcome>;
  /** Everything of a deployment awaiting delete is removed: the deletion ends (conflict when it is not being deleted). */
  confirmDeletion(deploymentId: string): Promise<DeletionOutcome>;
  /** A condition of a deployment's serving revision: its status moves as the conditions' table says, or not at all. */
  reportCondition(report: DeploymentConditionReport): Promise<void>;
}

/**
 * What a listener reports besides both planes' reports: its endpoints (the own data plane reports its
 * own with the lease they rest on, `OwnPlaneReports.reportEndpoint`). Applied only for a deployment of
 * that listener and while the endpoint still asks for the revision; `applied` false otherwise, or when
 * it changes nothing (a repeat).
 */
export interface ListenerPlaneReports extends DataPlaneReports {
  reportEndpoint(report: ListenerEndpointReport): Promise<{ applied: boolean }>;
}

/**
 * What only the own data plane reports: what it saw happen to the apps it runs and what it made or needs
 * kept for them. A listener's reports have none of these (its cluster keeps its own), so the compiler
 * refuses a listener's call of one. Those about a deployment or a revision (`reportFact`,
 * `reportEndpoint`, `reportCommit`, and of both planes' `reportRevision`, `reportCondition` and
 * `confirmDeletion`) change nothing, and are logged, when the reporting worker no longer holds the
 * lease they rest on (the deployment's runner lease or a lease on one of its revisions; the revision's).
 */
export interface OwnPlaneReports extends DataPlaneReports {
  /** A fact about a deployment's app: recorded as the deployment's event, in a transaction of its own. */
  reportFact(report: DeploymentFactReport): Promise<void>;
  /**
   * An endpoint's start (the own data plane): a served revision is recorded as the endpoint's, with
   * `deployment.endpoint_served` unless it is the one recorded already and nothing moved (a restart);
   * a failure is `deployment.endpoint_failed`. Nothing when the deployment is gone.
   */
  reportEndpoint(report: EndpointReport): Promise<void>;
  /** The app database the own data plane is about to make for a deployment, on its runtime row. */
  keepAppDatabase(deploymentId: string, workspaceId: string, database: AppDatabaseRecord): Promise<void>;
  /** The agent credential the own data plane made for a deployment's app: stored, and kept on its runtime row. */
  keepAgentCredential(deploymentId: string, workspaceId: string, credential: AgentCredentialRecord): Promise<void>;
  /** The size an app database was measured at (the own data plane), shown in the workspace's usage. */
  reportDatabaseSize(deploymentId: string, sizeBytes: number, at: Date): Promise<void>;
  /**
   * An app database's storage state changed (the own data plane): the state, what the data plane does to
   * enforce it (`enforce`, its ALTERs of the app's database and role, run in the report's transaction)
   * and the event commit together or not at all. False, with nothing changed, when the state is no
   * longer `from` (another measure changed it, or the deployment's runtime row is gone).
   */
  reportDatabaseStorage(
    report: DatabaseStorageReport,
    enforce: (tx: QueryExecutorProvider) => Promise<void>,
  ): Promise<boolean>;
  /**
   * The commit a code-host revision's `repo_ref` resolved to when the own data plane fetched its source,
   * kept on the revision (`repo_commit_sha`). It moves no status.
   */
  reportCommit(revisionId: string, sha: string): Promise<void>;
  /**
   * Where the own data plane's app edge serves an app now: `<prefix><app_slug><suffix>`. The stable URL
   * (`custom_url`) of every deployment of the own data plane that names another address moves there (a
   * restore on another apps port or domain); a listener's deployment keeps its own. Resolves to how many
   * moved.
   */
  reportAppEdge(edge: { prefix: string; suffix: string }): Promise<number>;
  /**
   * A batch of a revision's log lines, as the own data plane's log writer gathered them
   * (src/dataplane/log-writer.ts): stored in one statement with the change feed's notice that wakes a
   * follower, as the writer did itself. The hot path of every app's output: no transaction, lease check
   * or event of its own, and a log line moves no status.
   */
  appendLogLines(revisionId: string, type: RevisionLogKind, lines: readonly RevisionLogLine[]): Promise<void>;
  /** All but the newest `keep` lines of a revision's log of `type` are deleted (an app's output runs forever). */
  trimLog(revisionId: string, type: RevisionLogKind, keep: number): Promise<void>;
  /**
   * The host uid a deployment's processes run as on the own data plane: the one it holds, else the lowest
   * free one of `range`, kept while the deployment exists (src/store/app-uids.ts). Throws when every uid
   * of the range is held.
   */
  claimAppUid(deploymentId: string, range: { first: number; count: number }): Promise<number>;
}

/** A running role that stops cleanly (the own data plane's worker). */
export interface Worker {
  /** Stops claiming, interrupts running work (its leases are released for another worker) and stops the apps. */
  stop(): Promise<void>;
}
