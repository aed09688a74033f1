/**
 * The listener's decision, as a pure function: from the desired state (what the service wants run)
 * and what is observed (the agent's objects in the cluster, and what this process already reported)
 * to the actions that bring the two together. `listener-controller.ts` runs it whenever either side
 * changes and carries the actions out; everything here can be tested without a cluster.
 *
 * Reports follow the protocol's meaning: AWAITING_DEPLOY when the API server has accepted every
 * manifest, DEPLOYING when the workload controllers have taken the new generation up, then DEPLOYED
 * (every replica updated and available) or DEPLOY_FAILED with a reason. A revision whose manifests
 * cannot be applied is reported DEPLOY_FAILED straight away (the service walks the steps in between).
 *
 * Everything is derived again on every pass: whether a manifest is applied (its hash annotation),
 * where the rollout stands (the workloads' status and their pods), which status to report next (the
 * revision's status in the desired state, and the reports this process made). That is why an agent
 * restarted mid-rollout carries on where the previous one was: it reports only what is still missing.
 */
import { createHash, createHmac } from 'node:crypto';
import type { V1StatefulSet } from '@kubernetes/client-node';
import type { NamespaceWatch } from './cluster-cache.ts';
import type { DesiredDeployment, DesiredRevision, DesiredState, ReportedStatus } from './desired-state.ts';
import {
  MANAGED_KINDS,
  isStatefulSet,
  keyOf,
  refOf,
  type Manifest,
  type ObjectRef,
  type ObservedObject,
} from './kube-objects.ts';
import { applyActions } from './apply-actions.ts';
import { buildManifests, type BuildContext } from './manifest-builder.ts';
import type { GatewaySupport } from './endpoint-manifests.ts';
import { NO_GATEWAY, planEndpoints, type EndpointAction } from './endpoint-plan.ts';
import {
  DEPLOYMENT_ID_LABEL,
  ENDPOINT_LABEL,
  KEEP_UNTIL_DELETE_LABEL,
  SPEC_HASH_ANNOTATION,
  objectName,
} from './manifest-names.ts';
import { readResourceSpec } from './resource-spec.ts';
import { revisionRollout } from './revision-rollout.ts';
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
 * status of the protocol's schema (src/routes/listener-protocol-schemas.ts), so a status added to the
 * service fails the type check here; test/domain/revision-statuses.test.ts compares it with
 * src/domain/states.ts.
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
function serviceRank(status: string): number | null {
  return Object.hasOwn(SERVICE_RANK, status) ? SERVICE_RANK[status as DesiredRevision['status']] : 0;
}

const label = (o: ObservedObject, key: string): string | undefined => o.metadata.labels?.[key];
const terminating = (o: ObservedObject): boolean =>
  o.metadata.deletionTimestamp !== undefined && o.metadata.deletionTimestamp !== null;
const kindOrder = (kind: string): number => MANAGED_KINDS.findIndex((k) => k.kind === kind);

function decodeSecretValue(secret: ObservedObject | undefined, key: string): string | null {
  const data = secret?.data;
  if (data === null || typeof data !== 'object') return null;
  const value = (data as Record<string, unknown>)[key];
  return typeof value === 'string' && value !== '' ? Buffer.from(value, 'base64').toString('utf8') : null;
}

function deletePlan(deployment: DesiredDeployment, mine: readonly ObservedObject[], memory: Memory): Plan {
  const id = deployment.deployment_id;
  if (mine.length === 0) {
    return {
      deploymentId: id,
      actions: memory.confirmed.has(id) ? [] : [{ type: 'confirm-deletion' }],
      phase: 'deleted',
      summary: 'deleted: nothing of it is left in the cluster',
    };
  }
  // Pods go with their Deployment or StatefulSet (deleted in the foreground); only strays are deleted directly.
  const ownersLeft = mine.some((o) => o.kind === 'Deployment' || o.kind === 'StatefulSet');
  const targets = mine
    .filter((o) => !terminating(o) && (o.kind !== 'Pod' || !ownersLeft))
    .sort((a, b) => kindOrder(a.kind) - kindOrder(b.kind))
    .map((o): Action => ({ type: 'delete', target: refOf(o) }));
  return {
    deploymentId: id,
    actions: targets,
    phase: 'deleting',
    summary: `deleting: ${mine.length} object(s) left (${mine.map((o) => keyOf(refOf(o))).join(', ')})`,
  };
}

function namespaceOf(deployment: DesiredDeployment, ctx: ReconcileContext): string {
  return deployment.namespace ?? ctx.namespaces[0] ?? 'default';
}

function runPlan(
  deployment: DesiredDeployment,
  revision: DesiredRevision,
  desired: DesiredState,
  observed: Observed,
  ctx: ReconcileContext,
): Plan {
  const { objects, memory } = observed;
  const id = deployment.deployment_id;
  // The endpoints' objects are endpoint-plan.ts's: neither pruned nor rolled out here.
  const mine = objects.filter((o) => label(o, DEPLOYMENT_ID_LABEL) === id && label(o, ENDPOINT_LABEL) === undefined);
  const done = (() => {
    const service = serviceRank(revision.status);
    if (service === null) return null;
    const reported = memory.reported.get(revision.id);
    return Math.max(service, reported === undefined ? 0 : REPORTED_RANK[reported]);
  })();
  /** The reports still missing on the way to the last status of `path`. */
  const reports = (path: readonly ReportedStatus[], failure?: { reason: FailureReason; message: string }): Action[] =>
    done === null
      ? []
      : path
          .filter((status) => REPORTED_RANK[status] > done)
          .map((status) => ({
            type: 'report' as const,
            revisionId: revision.id,
            status,
            ...(status === 'DEPLOY_FAILED' && failure
              ? { failureReason: failure.reason, message: failure.message }
              : {}),
          }));
  const deployed = revision.status === 'DEPLOYED';
  const plan = (
    actions: Action[],
    phase: Phase,
    summary: string,
    condition?: Omit<ServingCondition, 'revisionId'>,
  ): Plan => ({
    deploymentId: id,
    actions,
    phase,
    summary,
    ...(deployed && condition
      ? {
          condition: {
            revisionId: revision.id,
            ...condition,
            ...(condition.condition === 'update_failed' ? { change: inPlaceChangeId(deployment) } : {}),
          },
        }
      : {}),
  });
  // Not accepted, so not AWAITING_DEPLOY: the service walks the revision through it to DEPLOY_FAILED.
  const refuse = (message: string, reason: FailureReason = 'invalid_manifest'): Plan =>
    plan(
      reports(['DEPLOY_FAILED'], { reason, message }),
      'failed',
      `revision ${revision.id} cannot be deployed: ${message}`,
      { condition: 'update_failed', reason, message },
    );

  const namespace = namespaceOf(deployment, ctx);
  const notWatched = (message: string): Plan =>
    plan(
      reports(['DEPLOY_FAILED'], { reason: 'namespace_not_watched', message }),
      'failed',
      `revision ${revision.id} cannot be deployed: ${message}`,
    );
  if (!ctx.namespaces.includes(namespace)) {
    return notWatched(
      `namespace ${namespace} is not watched by this listener (it watches ${ctx.namespaces.join(', ')}); add it to SLIPWAY_LISTENER_NAMESPACES and give the listener a Role there`,
    );
  }
  const watch = observed.namespaces?.get(namespace);
  if (watch?.state === 'refused') {
    return notWatched(
      `namespace ${namespace} is not watched by this listener: the Kubernetes API server forbids it (${watch.reason}); give the listener the Role of deploy/role.yaml there`,
    );
  }
  if (watch !== undefined && watch.state !== 'watched') {
    return plan(
      [],
      'waiting',
      `waiting for namespace ${namespace} to be listed${watch.state === 'failing' ? `: ${watch.reason}` : ''}`,
    );
  }
  if (revision.image_uri === null || revision.image_uri === '') return refuse('the revision has no image_uri');
  const read = readResourceSpec(revision.resource_spec);
  if (read.problems.length > 0) return refuse(read.problems.join('; '));
  const inputs = inPlaceInputs(deployment);
  const refused = memory.refused.get(revision.id);
  if (refused !== undefined && refused.inputs === inputs) return refuse(refused.message, refused.reason);

  const dbName = objectName(deployment.name, id, 'db');
  const dbSecret = mine.find(
    (o) => o.kind === 'Secret' && o.metadata.name === dbName && o.metadata.namespace === namespace,
  );
  const dbSet = mine.find(
    (o): o is ObservedObject & V1StatefulSet =>
      isStatefulSet(o) && o.metadata.name === dbName && o.metadata.namespace === namespace,
  );
  const manifests = buildManifests(
    {
      deployment,
      revision: { ...revision, image_uri: revision.image_uri },
      namespace,
      spec: read.spec,
      // The password in the cluster stays: the database was initialised with it.
      dbPassword:
        decodeSecretValue(dbSecret, 'POSTGRES_PASSWORD') ??
        createHmac('sha256', ctx.entropy).update(id).digest('base64url').slice(0, 32),
      existingDbStorage: dbSet?.spec?.volumeClaimTemplates?.[0]?.spec?.resources?.requests?.storage ?? null,
    },
    ctx,
  );

  const byKey = new Map(objects.map((o) => [keyOf(refOf(o)), o]));
  for (const manifest of manifests) {
    const other = byKey.get(keyOf(refOf(manifest)));
    const owner = other === undefined ? undefined : label(other, DEPLOYMENT_ID_LABEL);
    if (other === undefined || owner === id) continue;
    const what = keyOf(refOf(manifest));
    const leaving = desired.deployments.some((d) => d.deployment_id === owner && d.delete);
    // A deployment of the same name being deleted: its objects go first, then this one takes the name.
    if (leaving) return plan([], 'waiting', `waiting for ${what} of deleted deployment ${owner} to go`);
    return refuse(
      `${what} already belongs to Slipway deployment ${owner ?? 'unknown'}; names derive from the deployment name, so rename one of them`,
    );
  }

  const hashOf = (o: ObservedObject | undefined) => o?.metadata.annotations?.[SPEC_HASH_ANNOTATION];
  const hashOfManifest = (m: Manifest) => m.metadata.annotations?.[SPEC_HASH_ANNOTATION];
  const notInCluster = manifests.filter((m) => hashOf(byKey.get(keyOf(refOf(m)))) !== hashOfManifest(m));
  /** Applied by this process, and not seen by the list-watch yet: not to be applied again. */
  const unseen = notInCluster.filter((m) => memory.applied?.get(keyOf(refOf(m))) === hashOfManifest(m));
  const pending = notInCluster.filter((m) => !unseen.includes(m));
  const wanted = new Set(manifests.map((m) => keyOf(refOf(m))));
  const prune = mine
    .filter(
      (o) =>
        o.kind !== 'Pod' &&
        o.kind !== 'PersistentVolumeClaim' &&
        label(o, KEEP_UNTIL_DELETE_LABEL) !== 'true' &&
        !terminating(o) &&
        !wanted.has(keyOf(refOf(o))),
    )
    .map((o): Action => ({ type: 'delete', target: refOf(o) }));

  if (pending.length > 0) {
    const applies = applyActions(manifests, pending, byKey, revision.id, inputs);
    return plan(
      // AWAITING_DEPLOY once the API server accepted every manifest; DEPLOYING once the controllers took them up.
      [...applies, ...reports(['AWAITING_DEPLOY']), ...prune],
      'rolling-out',
      `applying revision ${revision.id}: ${pending.map((m) => keyOf(refOf(m))).join(', ')}`,
    );
  }
  if (unseen.length > 0) {
    // Accepted by the API server: the rollout is judged once the cluster's objects show this apply.
    return plan(
      reports(['AWAITING_DEPLOY']),
      'rolling-out',
      `revision ${revision.id} is applied, waiting to see ${unseen.map((m) => keyOf(refOf(m))).join(', ')} in the cluster`,
    );
  }

  const { rollout, condition } = revisionRollout({
    manifests,
    byKey,
    mine,
    namespace,
    revisionId: revision.id,
    deployed,
    now: ctx.now,
    progressDeadlineSeconds: ctx.progressDeadlineSeconds,
  });
  switch (rollout.state) {
    case 'complete':
      return plan(
        [...reports(['AWAITING_DEPLOY', 'DEPLOYING', 'DEPLOYED']), ...prune],
        'deployed',
        `revision ${revision.id} is deployed`,
      );
    case 'failed':
      return plan(
        [
          ...reports(['AWAITING_DEPLOY', 'DEPLOYING', 'DEPLOY_FAILED'], {
            reason: rollout.reason,
            message: rollout.message,
          }),
          ...prune,
        ],
        'failed',
        `revision ${revision.id} failed: ${rollout.reason}: ${rollout.message}`,
        condition,
      );
    case 'pending':
      return plan(
        [...reports(['AWAITING_DEPLOY']), ...prune],
        'rolling-out',
        `revision ${revision.id} is applied: ${rollout.detail}`,
        condition,
      );
    case 'progressing':
      return plan(
        [...reports(['AWAITING_DEPLOY', 'DEPLOYING']), ...prune],
        'rolling-out',
        `revision ${revision.id} is rolling out: ${rollout.detail}`,
        condition,
      );
  }
}

/** The deployment's plan, then its endpoints' (endpoint-plan.ts), where its namespace is watched. */
function withEndpoints(plan: Plan, deployment: DesiredDeployment, observed: Observed, ctx: ReconcileContext): Plan {
  const namespace = namespaceOf(deployment, ctx);
  const watch = observed.namespaces?.get(namespace);
  if (!ctx.namespaces.includes(namespace) || (watch !== undefined && watch.state !== 'watched')) return plan;
  const endpoints = planEndpoints({
    deployment,
    namespace,
    spec: readResourceSpec(deployment.revision?.resource_spec ?? null),
    objects: observed.objects,
    memory: observed.memory,
    gateway: ctx.gateway ?? NO_GATEWAY,
    build: ctx,
  });
  if (endpoints.actions.length === 0 && endpoints.summary.length === 0) return plan;
  return {
    ...plan,
    actions: [...plan.actions, ...endpoints.actions],
    summary: [plan.summary, ...endpoints.summary].join('; '),
    ...(endpoints.notices.length > 0 ? { notices: endpoints.notices } : {}),
  };
}

export function reconcile(desired: DesiredState, observed: Observed, ctx: ReconcileContext): Plan[] {
  const plans: Plan[] = [];
  for (const deployment of desired.deployments) {
    const id = deployment.deployment_id;
    if (deployment.delete) {
      const watch = observed.namespaces?.get(namespaceOf(deployment, ctx));
      // What is left there is unknown: confirming now could leave objects behind for good.
      if (watch !== undefined && watch.state !== 'watched') {
        plans.push({
          deploymentId: id,
          actions: [],
          phase: 'waiting',
          summary: `deleting: waiting for namespace ${namespaceOf(deployment, ctx)} to be watched`,
        });
      } else {
        plans.push(
          deletePlan(
            deployment,
            observed.objects.filter((o) => label(o, DEPLOYMENT_ID_LABEL) === id),
            observed.memory,
          ),
        );
      }
    } else if (deployment.revision !== null) {
      plans.push(
        withEndpoints(runPlan(deployment, deployment.revision, desired, observed, ctx), deployment, observed, ctx),
      );
    } else {
      // No revision to run yet (or none left to run): what is there stays as it is.
      plans.push({ deploymentId: id, actions: [], phase: 'idle', summary: 'no revision to run' });
    }
  }
  return plans;
}
