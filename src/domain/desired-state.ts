/**
 * The desired state of a deployment: which revision should run, which one serves until then, which
 * one the own worker works on next, and with which resource spec and secret references. The one rule,
 * which the listener protocol serves (src/service/listener-protocol.ts `desiredState`) and the own
 * worker's claims follow (src/store/work-leases.ts `claimRevision` and `claimRunnableDeployments`, SQL
 * checked against this module by test/store/desired-state-claims.test.ts). Pure: no I/O.
 *
 * Glossary
 * - target: the revision that should end up running: the latest one, unless it ended without running.
 * - serving: the revision that runs now, the deployment's active one (the last one reported DEPLOYED).
 * - next work: the own worker's next step of a revision (build or deploy): the target while it is on
 *   its way (QUEUED or in a working status). A listener builds nothing of ours: none.
 * - preview work: beside it, each open pull request's preview revision while it is on its way (own
 *   plane only); previews and the deployment's own revisions never end one another.
 */
import { DELETING_STATUS, dataPlaneOf, pendingDeletionFinisher } from './deletion.ts';
import type { ResourceSpec } from './resource-spec.ts';
import type { SecretReference } from './deployment-plan.ts';
import {
  REVISION_STATES,
  WORKING_REVISION_STATUSES,
  isFinalRevisionStatus,
  type DataPlaneKind,
  type DeploymentStatus,
  type RevisionStatus,
} from './states.ts';

/**
 * Final states in which a revision must not run: the deployment keeps (or goes back to) its active
 * revision instead. DEPLOYED is final too, but it is what runs.
 */
export const NOT_TO_RUN: ReadonlySet<RevisionStatus> = new Set(
  (Object.keys(REVISION_STATES) as RevisionStatus[]).filter((s) => isFinalRevisionStatus(s) && s !== 'DEPLOYED'),
);

const WORKING: ReadonlySet<RevisionStatus> = new Set(WORKING_REVISION_STATUSES);

/**
 * What should run: the latest revision unless it failed, was skipped or interrupted; else the active one.
 * A pull request's preview (revisions.preview_pull_request, `isPreview`) is never the target: it is served
 * at its own endpoint, never as the deployment (docs/codehost.md, "Pull-request previews").
 */
export function targetRevisionId(
  deployment: { latest_revision_id: string | null; active_revision_id: string | null },
  statusOf: (id: string) => RevisionStatus | undefined,
  isPreview: (id: string) => boolean = () => false,
): string | null {
  const latest = deployment.latest_revision_id;
  const status = latest === null ? undefined : statusOf(latest);
  if (latest !== null && status !== undefined && !NOT_TO_RUN.has(status) && !isPreview(latest)) return latest;
  return deployment.active_revision_id;
}

/**
 * What serves now and is to be kept running: the active revision, unless the deployment is being
 * deleted (then nothing is started; its data plane tears it down).
 */
export function servingRevisionId(deployment: {
  status: DeploymentStatus;
  active_revision_id: string | null;
}): string | null {
  return deployment.status === DELETING_STATUS ? null : deployment.active_revision_id;
}

/**
 * The own worker's next work on a deployment: the target revision while it is QUEUED or in one of the
 * worker's steps (to start, continue or take over); none once it is final, on a listener's deployment
 * or on one being deleted. Like a listener, the worker works toward the target only: an older revision
 * still on its way is not worked on any more, and the target's first step ends it (the lifecycle's
 * `reportRevision`), so both planes end on the revision `targetRevisionId` names
 * (test/dataplane/planes-agree.test.ts).
 */
export function nextWorkRevisionId(
  deployment: {
    status: DeploymentStatus;
    listener_id: string | null;
    latest_revision_id: string | null;
  },
  statusOf: (id: string) => RevisionStatus | undefined,
  isPreview: (id: string) => boolean = () => false,
): string | null {
  if (dataPlaneOf(deployment) !== 'local' || deployment.status === DELETING_STATUS) return null;
  // The latest revision on its way is the target; once it is final the target (it, or the active
  // revision) has nothing left to do. A preview is never the deployment's target (`targetRevisionId`).
  const latest = deployment.latest_revision_id;
  if (latest === null || isPreview(latest)) return null;
  return onItsWay(statusOf(latest)) ? latest : null;
}

const onItsWay = (status: RevisionStatus | undefined) =>
  status !== undefined && (status === 'QUEUED' || WORKING.has(status));

/**
 * The own worker's work on a deployment's pull-request previews (docs/codehost.md, "Pull-request
 * previews"), beside `nextWorkRevisionId`: the revision each open preview names now
 * (pull_request_previews.revision_id) while it is QUEUED or in a working status. A preview's work never
 * waits for, ends or is ended by the deployment's own: only a newer commit of the same pull request (its
 * preview then names the newer revision) or the pull request's close ends it.
 */
export function previewWorkRevisionIds(
  deployment: { status: DeploymentStatus; listener_id: string | null },
  previewRevisionIds: readonly string[],
  statusOf: (id: string) => RevisionStatus | undefined,
): string[] {
  if (dataPlaneOf(deployment) !== 'local' || deployment.status === DELETING_STATUS) return [];
  return previewRevisionIds.filter((id) => onItsWay(statusOf(id)));
}

/**
 * Whether a data plane's report about `revision` is about what it works toward, so that it may apply
 * (the lifecycle's `reportRevision`; otherwise it is superseded): the deployment's latest revision, or, for
 * a pull request's preview, the revision that pull request's open preview names now (`previewRevisionId`;
 * null when it names none, the pull request closed).
 */
export function isWorkedToward(
  deployment: { latest_revision_id: string | null },
  revision: { id: string; preview_pull_request: number | null },
  previewRevisionId: string | null,
): boolean {
  if (revision.preview_pull_request !== null) return previewRevisionId === revision.id;
  return deployment.latest_revision_id === revision.id;
}

export interface DesiredDeploymentState {
  /** The data plane that runs the deployment. */
  dataPlane: DataPlaneKind;
  /** Its data plane is to tear it down (src/domain/deletion.ts). */
  delete: boolean;
  /** The revision that should end up running (its image and secrets), or null. */
  targetRevisionId: string | null;
  /** The revision that serves until the target is deployed, or null. */
  servingRevisionId: string | null;
  /** The deployment's current resource spec: it applies to whichever revision runs, without a new revision. */
  resourceSpec: ResourceSpec | null;
  /** The deployment's current secret references, like the resource spec. */
  secretReferences: SecretReference[] | null;
}

const objectOrNull = (value: unknown): Record<string, unknown> | null =>
  value !== null && typeof value === 'object' && !Array.isArray(value) ? (value as Record<string, unknown>) : null;

/** The resource spec a deployment runs with: its current one (an in-place field), whichever revision runs. */
export function desiredResourceSpec(deployment: { source_config: { resource_spec?: unknown } }): ResourceSpec | null {
  // Validated by the schema when stored; an object is all that is trusted here.
  return objectOrNull(deployment.source_config.resource_spec);
}

/** The desired state of one deployment, from its row and the statuses of its revisions. */
export function desiredDeploymentState(
  deployment: {
    status: DeploymentStatus;
    listener_id: string | null;
    latest_revision_id: string | null;
    active_revision_id: string | null;
    source_config: { resource_spec?: unknown };
    secret_references: unknown;
  },
  statusOf: (id: string) => RevisionStatus | undefined,
  isPreview: (id: string) => boolean = () => false,
): DesiredDeploymentState {
  return {
    dataPlane: dataPlaneOf(deployment),
    delete: pendingDeletionFinisher(deployment) !== null,
    targetRevisionId: targetRevisionId(deployment, statusOf, isPreview),
    servingRevisionId: servingRevisionId(deployment),
    resourceSpec: desiredResourceSpec(deployment),
    // Stored by the deployment service from validated input.
    secretReferences: Array.isArray(deployment.secret_references)
      ? (deployment.secret_references as SecretReference[])
      : null,
  };
}
