/**
 * The revision and deployment state machines, as data. docs/lifecycle.md draws them.
 *
 * Glossary
 * - revision: one immutable build-and-run unit of a deployment (source revision config, secrets and
 *   resource spec as they were when it was made).
 * - final state: a state a revision never leaves.
 * - deadline: how long a revision may stay in a non-final state before the pipeline moves it to that
 *   state's failure (see `REVISION_STATES[...].deadline`).
 */
import { InvariantError } from '../errors.ts';

export const REVISION_STATUSES = [
  'CREATING',
  'QUEUED',
  'AWAITING_BUILD',
  'BUILDING',
  'AWAITING_DEPLOY',
  'DEPLOYING',
  'CREATE_FAILED',
  'BUILD_FAILED',
  'DEPLOY_FAILED',
  'DEPLOYED',
  'SKIPPED',
  'INTERRUPTED',
  'UNKNOWN',
] as const;
export type RevisionStatus = (typeof REVISION_STATUSES)[number];

export const DEPLOYMENT_STATUSES = ['AWAITING_DATABASE', 'READY', 'UNUSED', 'AWAITING_DELETE', 'UNKNOWN'] as const;
export type DeploymentStatus = (typeof DEPLOYMENT_STATUSES)[number];

/** Who moves revisions through their states: the service's own worker, or a listener agent. */
export type DataPlaneKind = 'local' | 'listener';

interface RevisionState {
  readonly next: readonly RevisionStatus[];
  /** Seconds a revision may stay here; null for final states. */
  readonly deadline: number | null;
  /** Where a revision goes when the deadline passes. */
  readonly onDeadline: RevisionStatus | null;
  /**
   * The data planes whose steps this status is: they move a revision through it on the way to its
   * outcome. The own worker holds a lease on a revision in one of its steps (its working statuses);
   * a listener reports its steps.
   */
  readonly stepOf: readonly DataPlaneKind[];
  /** A listener may report this status: its steps and the outcomes of a rollout. */
  readonly listenerReports: boolean;
  /** A failure: the revision carries a machine-readable reason and a message (docs/lifecycle.md). */
  readonly failed: boolean;
}

const MINUTE = 60;
const FINAL = {
  next: [],
  deadline: null,
  onDeadline: null,
  stepOf: [],
  listenerReports: false,
  failed: false,
} as const;
const FAILED = { ...FINAL, failed: true } as const;

/**
 * Every revision status and its properties: the one table every other list of statuses is derived
 * from (or, where it cannot import this module, checked against by a test: docs/lifecycle.md lists
 * them). Container sources go QUEUED -> AWAITING_DEPLOY (no build).
 */
const REVISION_TABLE = {
  CREATING: {
    next: ['QUEUED', 'CREATE_FAILED'],
    deadline: 5 * MINUTE,
    onDeadline: 'CREATE_FAILED',
    stepOf: [],
    listenerReports: false,
    failed: false,
  },
  QUEUED: {
    next: ['AWAITING_BUILD', 'AWAITING_DEPLOY', 'SKIPPED', 'INTERRUPTED', 'UNKNOWN'],
    // A queue nobody serves for a day has lost track of the revision.
    deadline: 24 * 60 * MINUTE,
    onDeadline: 'UNKNOWN',
    stepOf: [],
    listenerReports: false,
    failed: false,
  },
  AWAITING_BUILD: {
    next: ['BUILDING', 'BUILD_FAILED', 'INTERRUPTED', 'UNKNOWN'],
    deadline: 30 * MINUTE,
    onDeadline: 'BUILD_FAILED',
    stepOf: ['local'],
    listenerReports: false,
    failed: false,
  },
  BUILDING: {
    next: ['AWAITING_DEPLOY', 'BUILD_FAILED', 'INTERRUPTED', 'UNKNOWN'],
    deadline: 60 * MINUTE,
    onDeadline: 'BUILD_FAILED',
    stepOf: ['local'],
    listenerReports: false,
    failed: false,
  },
  AWAITING_DEPLOY: {
    next: ['DEPLOYING', 'DEPLOY_FAILED', 'INTERRUPTED', 'UNKNOWN'],
    deadline: 30 * MINUTE,
    onDeadline: 'DEPLOY_FAILED',
    stepOf: ['local', 'listener'],
    listenerReports: true,
    failed: false,
  },
  DEPLOYING: {
    next: ['DEPLOYED', 'DEPLOY_FAILED', 'INTERRUPTED', 'UNKNOWN'],
    deadline: 30 * MINUTE,
    onDeadline: 'DEPLOY_FAILED',
    stepOf: ['local', 'listener'],
    listenerReports: true,
    failed: false,
  },
  CREATE_FAILED: FAILED,
  BUILD_FAILED: FAILED,
  DEPLOY_FAILED: { ...FAILED, listenerReports: true },
  DEPLOYED: { ...FINAL, listenerReports: true },
  SKIPPED: FINAL,
  INTERRUPTED: FINAL,
  UNKNOWN: FINAL,
} as const satisfies Record<RevisionStatus, RevisionState>;

/** Every allowed revision transition, with each status's properties. */
export const REVISION_STATES: Readonly<Record<RevisionStatus, RevisionState>> = REVISION_TABLE;

/** The statuses a listener may report, as a type: those of the table with `listenerReports: true`. */
export type ListenerReportedStatus = {
  [S in RevisionStatus]: (typeof REVISION_TABLE)[S]['listenerReports'] extends true ? S : never;
}[RevisionStatus];

const isListenerReported = (status: RevisionStatus): status is ListenerReportedStatus =>
  REVISION_STATES[status].listenerReports;

/** The statuses a listener may report (the listener protocol's report body), in the table's order. */
export const LISTENER_REPORTED_STATUSES: readonly ListenerReportedStatus[] =
  REVISION_STATUSES.filter(isListenerReported);

/** The steps of a data plane: the statuses it moves a revision through (see `stepOf`). */
export function dataPlaneSteps(kind: DataPlaneKind): readonly RevisionStatus[] {
  return REVISION_STATUSES.filter((status) => REVISION_STATES[status].stepOf.includes(kind));
}

/** The failures: statuses whose revision carries a reason and a message. */
export const FAILED_REVISION_STATUSES: readonly RevisionStatus[] = REVISION_STATUSES.filter(
  (status) => REVISION_STATES[status].failed,
);

/** The own worker's steps: a revision in one of them is leased by a worker (src/store/work-leases.ts). */
export const WORKING_REVISION_STATUSES: readonly RevisionStatus[] = dataPlaneSteps('local');

/** Every allowed deployment transition. AWAITING_DELETE ends with the row's removal. */
const DEPLOYMENT_STATES: Readonly<Record<DeploymentStatus, readonly DeploymentStatus[]>> = {
  AWAITING_DATABASE: ['READY', 'UNUSED', 'AWAITING_DELETE', 'UNKNOWN'],
  READY: ['UNUSED', 'AWAITING_DELETE', 'UNKNOWN'],
  UNUSED: ['READY', 'AWAITING_DELETE', 'UNKNOWN'],
  UNKNOWN: ['READY', 'UNUSED', 'AWAITING_DELETE'],
  AWAITING_DELETE: [],
};

export const isFinalRevisionStatus = (status: RevisionStatus): boolean => REVISION_STATES[status].next.length === 0;

/** Every non-final status: what a deleted deployment's revisions are interrupted from. */
export const UNFINISHED_REVISION_STATUSES: readonly RevisionStatus[] = REVISION_STATUSES.filter(
  (status) => !isFinalRevisionStatus(status),
);

/** Statuses that a newer queued revision supersedes (it has not started yet). */
export const SUPERSEDABLE_REVISION_STATUSES: readonly RevisionStatus[] = ['QUEUED'];

/**
 * The one function that checks a revision transition; the store writes it with its event. Callers
 * check what a user may ask for first (src/service/deployments.ts refuses to interrupt a final
 * revision with a conflict), so a forbidden transition here is a bug, answered 500.
 */
export function assertRevisionTransition(from: RevisionStatus, to: RevisionStatus): void {
  if (!REVISION_STATES[from].next.includes(to)) {
    throw new InvariantError(`A revision in status ${from} cannot move to ${to}.`);
  }
}

export function assertDeploymentTransition(from: DeploymentStatus, to: DeploymentStatus): void {
  if (!DEPLOYMENT_STATES[from].includes(to)) {
    throw new InvariantError(`A deployment in status ${from} cannot move to ${to}.`);
  }
}
