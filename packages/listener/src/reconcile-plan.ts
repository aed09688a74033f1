/**
 * The vocabulary of the listener's decision (reconcile.ts): what this process remembers and observes,
 * what it may do (actions), what it decides per deployment (plans, phases, a serving revision's
 * condition), and how far along a revision's statuses are, for the agent and for the service. No I/O.
 */
import { createHash } from 'node:crypto';
import type { NamespaceWatch } from './cluster-cache.ts';
import type { DesiredDeployment, DesiredRevision, ReportedStatus } from './desired-state.ts';
import type { GatewaySupport } from './endpoint-manifests.ts';
import type { EndpointAction } from './endpoint-plan.ts';
import type { Manifest, ObjectRef, ObservedObject } from './kube-objects.ts';
import type { BuildContext } from './manifest-builder.ts';
import type { FailureReason } from './rollout-status.ts';

/** What this process has done that the cluster does not show. Lost on restart, on purpose: see above. */
export interface Memory {
  /** Revision id to the furthest status this process reported for it. */
  readonly reported: ReadonlyMap<string, ReportedStatus>;
  /**
   * Revision id to the apply the API server refused (422): applying the same again cannot help, but
   * an in-place change of the deployment (other `inputs`) makes other manifests, worth a try.
   */
  readonly refused: ReadonlyMap<string, RefusedApply>;
  /** Deployments whose deletion this process confirmed. */
  readonly confirmed: ReadonlySet<string>;
  /**
   * Object key (`keyOf`) to the spec hash this process applied lately, while the list-watch has not
   * shown it yet: such a manifest is not applied again (issue 25: the next pass came before the
   * watch's event, and applied everything a second time). The controller forgets an entry once the
   * cluster shows the hash, or after a while (someone else may have changed the object since).
   */
  readonly applied?: ReadonlyMap<string, string>;
  /** The endpoint reports this process made (endpoint-plan.ts). */
  readonly endpointReports?: ReadonlySet<string>;
}

export interface RefusedApply {
  readonly message: string;
  /** The failure reason to report: `invalid_manifest` unless said (`namespace_not_found`). */
  readonly reason?: FailureReason;
  /** `inPlaceInputs` of the deployment when it was refused. */
  readonly inputs: string;
}

/**
 * What of a deployment may change in place, for the same revision (the service sends the
 * deployment's current values): a refusal holds only as long as these stay the same.
 */
export function inPlaceInputs(deployment: DesiredDeployment): string {
  const { custom_url } = deployment;
  const revision = deployment.revision;
  return JSON.stringify([custom_url, revision?.resource_spec ?? null, revision?.secret_references ?? null]);
}

export interface Observed {
  /** Every object labelled managed-by the listener in the watched namespaces, as last listed or watched. */
  readonly objects: readonly ObservedObject[];
  readonly memory: Memory;
  /**
   * Where the list-watch of each namespace stands; a namespace missing here is taken as watched. The
   * objects of a namespace that is not watched are unknown: its deployments wait, or fail when the
   * API server forbids the agent the namespace.
   */
  readonly namespaces?: ReadonlyMap<string, NamespaceWatch>;
}

export interface ReconcileContext extends BuildContext {
  readonly namespaces: readonly string[];
  /** Random bytes of this pass: the source of a new database password (one per deployment, derived). */
  readonly entropy: string;
  /** The time of this pass (ms since the epoch): how long a database pod has waited to be ready. */
  readonly now: number;
  /** Where the cluster's Gateway API stands (endpoints' HTTPRoutes); none when absent. */
  readonly gateway?: GatewaySupport;
}

export type Action =
  | {
      readonly type: 'report';
      readonly revisionId: string;
      readonly status: ReportedStatus;
      readonly failureReason?: FailureReason;
      readonly message?: string;
    }
  | {
      readonly type: 'apply';
      readonly revisionId: string;
      readonly manifest: Manifest;
      /** `inPlaceInputs` of the deployment: what a refusal of this apply holds for. */
      readonly inputs: string;
    }
  | {
      /**
       * Server-side apply of an autoscaled Deployment's `spec.replicas` alone, by the hand-over field
       * manager and without force: a conflict means the autoscaler holds the field already, which is
       * the point, and is not a failure.
       */
      readonly type: 'hand-over-replicas';
      readonly target: ObjectRef;
      readonly replicas: number;
    }
  | { readonly type: 'delete'; readonly target: ObjectRef }
  | { readonly type: 'confirm-deletion' }
  | Extract<EndpointAction, { type: 'report-endpoint' }>;

/**
 * What is wrong with a revision the service has as DEPLOYED (nothing can be reported for it any more),
 * for the heartbeat: `update_failed` when an in-place change of it was refused or does not roll out
 * while the pods of before keep serving, `crash_loop` when the pods that serve keep failing.
 */
export interface ServingCondition {
  readonly revisionId: string;
  readonly condition: 'update_failed' | 'crash_loop';
  readonly reason: FailureReason;
  readonly message: string;
  /**
   * For `update_failed`: which in-place change it is about (a digest of `inPlaceInputs`), so the service
   * tells a second refused change as a new failure even when its reason is the same (issue 34, item 3).
   */
  readonly change?: string;
}

/** The id of the in-place change a deployment's current values make (the heartbeat's `change`). */
export function inPlaceChangeId(deployment: DesiredDeployment): string {
  return createHash('sha256').update(inPlaceInputs(deployment)).digest('hex').slice(0, 32);
}

/** One deployment's actions, in order: the runner stops at the first that fails and tries later. */
export interface Plan {
  readonly deploymentId: string;
  readonly actions: readonly Action[];
  readonly phase: Phase;
  /** Where the deployment stands, for the log. */
  readonly summary: string;
  /** Only for a DEPLOYED revision that is not healthy. */
  readonly condition?: ServingCondition;
  /** What the heartbeat should say about the deployment (an endpoint's split this cluster cannot serve). */
  readonly notices?: readonly string[];
}

/** Where a deployment stands: `rolling-out` covers applying and waiting for the rollout. */
export type Phase = 'idle' | 'waiting' | 'rolling-out' | 'deployed' | 'failed' | 'deleting' | 'deleted';

/** How far each status the agent reports is along the rollout (the controller keeps the furthest told). */
export const REPORTED_RANK: Readonly<Record<ReportedStatus, number>> = {
  AWAITING_DEPLOY: 1,
  DEPLOYING: 2,
  DEPLOYED: 3,
  DEPLOY_FAILED: 3,
};

/**
 * How far the service has a revision, by its status: 0 before the listener's steps, null in a final
 * state (DEPLOYED, or failed, skipped, interrupted): nothing is reported for it any more. Keyed by every
 * status of the protocol's schema (src/routes/listener-protocol-schemas.ts, through the SDK's types
 * generated from it), so a status added to the service fails the type check here once the types are
 * regenerated (test/cli/client-types.test.ts fails until they are); test/domain/revision-statuses.test.ts
 * compares it with src/domain/states.ts.
 */
export const SERVICE_RANK: Readonly<Record<DesiredRevision['status'], number | null>> = {
  CREATING: 0,
  QUEUED: 0,
  AWAITING_BUILD: 0,
  BUILDING: 0,
  AWAITING_DEPLOY: 1,
  DEPLOYING: 2,
  CREATE_FAILED: null,
  BUILD_FAILED: null,
  DEPLOY_FAILED: null,
  DEPLOYED: null,
  SKIPPED: null,
  INTERRUPTED: null,
  UNKNOWN: null,
};

/**
 * A status this agent does not know (a service newer than the agent) is not known to be final: the
 * agent goes on reporting, and the service, which knows, answers a report that does not apply with
 * `applied: false`. Taking it for final would silently stop the agent reporting.
 */
export function serviceRank(status: string): number | null {
  return Object.hasOwn(SERVICE_RANK, status) ? SERVICE_RANK[status as DesiredRevision['status']] : 0;
}
