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

interface RevisionState {
  readonly next: readonly RevisionStatus[];
  /** Seconds a revision may stay here; null for final states. */
  readonly deadline: number | null;
  /** Where a revision goes when the deadline passes. */
  readonly onDeadline: RevisionStatus | null;
}

const MINUTE = 60;

/** Every allowed revision transition. Container sources go QUEUED -> AWAITING_DEPLOY (no build). */
export const REVISION_STATES: Readonly<Record<RevisionStatus, RevisionState>> = {
  CREATING: { next: ['QUEUED', 'CREATE_FAILED'], deadline: 5 * MINUTE, onDeadline: 'CREATE_FAILED' },
  QUEUED: {
    next: ['AWAITING_BUILD', 'AWAITING_DEPLOY', 'SKIPPED', 'INTERRUPTED', 'UNKNOWN'],
    // A queue nobody serves for a day has lost track of the revision.
    deadline: 24 * 60 * MINUTE,
    onDeadline: 'UNKNOWN',
  },
  AWAITING_BUILD: {
    next: ['BUILDING', 'BUILD_FAILED', 'INTERRUPTED', 'UNKNOWN'],
    deadline: 30 * MINUTE,
    onDeadline: 'BUILD_FAILED',
  },
  BUILDING: {
    next: ['AWAITING_DEPLOY', 'BUILD_FAILED', 'INTERRUPTED', 'UNKNOWN'],
    deadline: 60 * MINUTE,
    onDeadline: 'BUILD_FAILED',
  },
  AWAITING_DEPLOY: {
    next: ['DEPLOYING', 'DEPLOY_FAILED', 'INTERRUPTED', 'UNKNOWN'],
    deadline: 30 * MINUTE,
    onDeadline: 'DEPLOY_FAILED',
  },
  DEPLOYING: {
    next: ['DEPLOYED', 'DEPLOY_FAILED', 'INTERRUPTED', 'UNKNOWN'],
    deadline: 30 * MINUTE,
    onDeadline: 'DEPLOY_FAILED',
  },
  CREATE_FAILED: { next: [], deadline: null, onDeadline: null },
  BUILD_FAILED: { next: [], deadline: null, onDeadline: null },
  DEPLOY_FAILED: { next: [], deadline: null, onDeadline: null },
  DEPLOYED: { next: [], deadline: null, onDeadline: null },
  SKIPPED: { next: [], deadline: null, onDeadline: null },
  INTERRUPTED: { next: [], deadline: null, onDeadline: null },
  UNKNOWN: { next: [], deadline: null, onDeadline: null },
};

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
