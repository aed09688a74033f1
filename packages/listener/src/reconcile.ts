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
import { createHmac } from 'node:crypto';
import type { V1StatefulSet } from '@kubernetes/client-node';
import type { DesiredDeployment, DesiredRevision, DesiredState, ReportedStatus } from './desired-state.ts';
import { isStatefulSet, keyOf, refOf, type Manifest, type ObservedObject } from './kube-objects.ts';
import { applyActions } from './apply-actions.ts';
import { buildManifests } from './manifest-builder.ts';
import { NO_GATEWAY, planEndpoints } from './endpoint-plan.ts';
import {
  DEPLOYMENT_ID_LABEL,
  ENDPOINT_LABEL,
  KEEP_UNTIL_DELETE_LABEL,
  SPEC_HASH_ANNOTATION,
  objectName,
} from './manifest-names.ts';
import { readResourceSpec, type ReadSpec } from './resource-spec.ts';
import { revisionRollout, type RevisionRolloutInput } from './revision-rollout.ts';
import { deletePlan } from './delete-plan.ts';
import {
  REPORTED_RANK,
  inPlaceChangeId,
  inPlaceInputs,
  serviceRank,
  type Action,
  type Observed,
  type Phase,
  type Plan,
  type ReconcileContext,
  type ServingCondition,
} from './reconcile-plan.ts';
import type { FailureReason } from './rollout-status.ts';

const label = (o: ObservedObject, key: string): string | undefined => o.metadata.labels?.[key];
const terminating = (o: ObservedObject): boolean =>
  o.metadata.deletionTimestamp !== undefined && o.metadata.deletionTimestamp !== null;

function decodeSecretValue(secret: ObservedObject | undefined, key: string): string | null {
  const data = secret?.data;
  if (data === null || typeof data !== 'object') return null;
  const value = (data as Record<string, unknown>)[key];
  return typeof value === 'string' && value !== '' ? Buffer.from(value, 'base64').toString('utf8') : null;
}

function namespaceOf(deployment: DesiredDeployment, ctx: ReconcileContext): string {
  return deployment.namespace ?? ctx.namespaces[0] ?? 'default';
}

/** A deployment's revision being planned: what its plans, reports and refusals are made of. */
interface RevisionRun {
  readonly deployment: DesiredDeployment;
  readonly revision: DesiredRevision;
  /**
   * How far the revision is, by the service's status or this process's reports, whichever is further;
   * null in a final state at the service: nothing is reported for it any more.
   */
  readonly done: number | null;
}

function revisionRun(
  deployment: DesiredDeployment,
  revision: DesiredRevision,
  memory: Observed['memory'],
): RevisionRun {
  const service = serviceRank(revision.status);
  const reported = memory.reported.get(revision.id);
  const done = service === null ? null : Math.max(service, reported === undefined ? 0 : REPORTED_RANK[reported]);
  return { deployment, revision, done };
}

/** The reports still missing on the way to the last status of `path`. */
function reports(
  { revision, done }: RevisionRun,
  path: readonly ReportedStatus[],
  failure?: { reason: FailureReason; message: string },
): Action[] {
  return done === null
    ? []
    : path
        .filter((status) => REPORTED_RANK[status] > done)
        .map((status) => ({
          type: 'report' as const,
          revisionId: revision.id,
          status,
          ...(status === 'DEPLOY_FAILED' && failure ? { failureReason: failure.reason, message: failure.message } : {}),
        }));
}

/** The deployment's plan; a condition of what serves is told only for a revision the service has as DEPLOYED. */
function revisionPlan(
  { deployment, revision }: RevisionRun,
  actions: Action[],
  phase: Phase,
  summary: string,
  condition?: Omit<ServingCondition, 'revisionId'>,
): Plan {
  return {
    deploymentId: deployment.deployment_id,
    actions,
    phase,
    summary,
    ...(revision.status === 'DEPLOYED' && condition
      ? {
          condition: {
            revisionId: revision.id,
            ...condition,
            ...(condition.condition === 'update_failed' ? { change: inPlaceChangeId(deployment) } : {}),
          },
        }
      : {}),
  };
}

/** Not accepted, so not AWAITING_DEPLOY: the service walks the revision through it to DEPLOY_FAILED. */
function refuse(run: RevisionRun, message: string, reason: FailureReason = 'invalid_manifest'): Plan {
  return revisionPlan(
    run,
    reports(run, ['DEPLOY_FAILED'], { reason, message }),
    'failed',
    `revision ${run.revision.id} cannot be deployed: ${message}`,
    { condition: 'update_failed', reason, message },
  );
}

/** The plan when the revision's namespace is not watched (it fails) or not listed yet (it waits); null when it is watched. */
function unwatchedPlan(run: RevisionRun, namespace: string, observed: Observed, ctx: ReconcileContext): Plan | null {
  const notWatched = (message: string): Plan =>
    revisionPlan(
      run,
      reports(run, ['DEPLOY_FAILED'], { reason: 'namespace_not_watched', message }),
      'failed',
      `revision ${run.revision.id} cannot be deployed: ${message}`,
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
    return revisionPlan(
      run,
      [],
      'waiting',
      `waiting for namespace ${namespace} to be listed${watch.state === 'failing' ? `: ${watch.reason}` : ''}`,
    );
  }
  return null;
}

/** The revision's manifests, keeping what the cluster's database already has (its password, its volume's size). */
function revisionManifests(
  { deployment, revision }: RevisionRun,
  image: string,
  namespace: string,
  spec: ReadSpec['spec'],
  mine: readonly ObservedObject[],
  ctx: ReconcileContext,
): Manifest[] {
  const id = deployment.deployment_id;
  const dbName = objectName(deployment.name, id, 'db');
  const dbSecret = mine.find(
    (o) => o.kind === 'Secret' && o.metadata.name === dbName && o.metadata.namespace === namespace,
  );
  const dbSet = mine.find(
    (o): o is ObservedObject & V1StatefulSet =>
      isStatefulSet(o) && o.metadata.name === dbName && o.metadata.namespace === namespace,
  );
  return buildManifests(
    {
      deployment,
      revision: { ...revision, image_uri: image },
      namespace,
      spec,
      // The password in the cluster stays: the database was initialised with it.
      dbPassword:
        decodeSecretValue(dbSecret, 'POSTGRES_PASSWORD') ??
        createHmac('sha256', ctx.entropy).update(id).digest('base64url').slice(0, 32),
      existingDbStorage: dbSet?.spec?.volumeClaimTemplates?.[0]?.spec?.resources?.requests?.storage ?? null,
    },
    ctx,
  );
}

/** The plan when a name of the revision's objects is taken by another Slipway deployment; null when none is. */
function nameTakenPlan(
  run: RevisionRun,
  manifests: readonly Manifest[],
  byKey: ReadonlyMap<string, ObservedObject>,
  desired: DesiredState,
): Plan | null {
  const id = run.deployment.deployment_id;
  for (const manifest of manifests) {
    const other = byKey.get(keyOf(refOf(manifest)));
    const owner = other === undefined ? undefined : label(other, DEPLOYMENT_ID_LABEL);
    if (other === undefined || owner === id) continue;
    const what = keyOf(refOf(manifest));
    const leaving = desired.deployments.some((d) => d.deployment_id === owner && d.delete);
    // A deployment of the same name being deleted: its objects go first, then this one takes the name.
    if (leaving) return revisionPlan(run, [], 'waiting', `waiting for ${what} of deleted deployment ${owner} to go`);
    return refuse(
      run,
      `${what} already belongs to Slipway deployment ${owner ?? 'unknown'}; names derive from the deployment name, so rename one of them`,
    );
  }
  return null;
}

/** The deployment's objects no manifest of the revision wants any more (pods, volumes and kept objects aside). */
function pruneActions(mine: readonly ObservedObject[], manifests: readonly Manifest[]): Action[] {
  const wanted = new Set(manifests.map((m) => keyOf(refOf(m))));
  return mine
    .filter(
      (o) =>
        o.kind !== 'Pod' &&
        o.kind !== 'PersistentVolumeClaim' &&
        label(o, KEEP_UNTIL_DELETE_LABEL) !== 'true' &&
        !terminating(o) &&
        !wanted.has(keyOf(refOf(o))),
    )
    .map((o): Action => ({ type: 'delete', target: refOf(o) }));
}

/** Where the rollout of the applied manifests stands, and the reports that say so. */
function rolloutPlan(
  run: RevisionRun,
  input: Omit<RevisionRolloutInput, 'revisionId' | 'deployed'>,
  prune: Action[],
): Plan {
  const { revision } = run;
  const { rollout, condition } = revisionRollout({
    ...input,
    revisionId: revision.id,
    deployed: revision.status === 'DEPLOYED',
  });
  switch (rollout.state) {
    case 'complete':
      return revisionPlan(
        run,
        [...reports(run, ['AWAITING_DEPLOY', 'DEPLOYING', 'DEPLOYED']), ...prune],
        'deployed',
        `revision ${revision.id} is deployed`,
      );
    case 'failed':
      return revisionPlan(
        run,
        [
          ...reports(run, ['AWAITING_DEPLOY', 'DEPLOYING', 'DEPLOY_FAILED'], {
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
      return revisionPlan(
        run,
        [...reports(run, ['AWAITING_DEPLOY']), ...prune],
        'rolling-out',
        `revision ${revision.id} is applied: ${rollout.detail}`,
        condition,
      );
    case 'progressing':
      return revisionPlan(
        run,
        [...reports(run, ['AWAITING_DEPLOY', 'DEPLOYING']), ...prune],
        'rolling-out',
        `revision ${revision.id} is rolling out: ${rollout.detail}`,
        condition,
      );
  }
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
  const run = revisionRun(deployment, revision, memory);

  const namespace = namespaceOf(deployment, ctx);
  const unwatched = unwatchedPlan(run, namespace, observed, ctx);
  if (unwatched !== null) return unwatched;
  if (revision.image_uri === null || revision.image_uri === '') return refuse(run, 'the revision has no image_uri');
  const read = readResourceSpec(revision.resource_spec);
  if (read.problems.length > 0) return refuse(run, read.problems.join('; '));
  const inputs = inPlaceInputs(deployment);
  const refused = memory.refused.get(revision.id);
  if (refused !== undefined && refused.inputs === inputs) return refuse(run, refused.message, refused.reason);

  const manifests = revisionManifests(run, revision.image_uri, namespace, read.spec, mine, ctx);
  const byKey = new Map(objects.map((o) => [keyOf(refOf(o)), o]));
  const taken = nameTakenPlan(run, manifests, byKey, desired);
  if (taken !== null) return taken;

  const hashOf = (o: ObservedObject | undefined) => o?.metadata.annotations?.[SPEC_HASH_ANNOTATION];
  const hashOfManifest = (m: Manifest) => m.metadata.annotations?.[SPEC_HASH_ANNOTATION];
  const notInCluster = manifests.filter((m) => hashOf(byKey.get(keyOf(refOf(m)))) !== hashOfManifest(m));
  /** Applied by this process, and not seen by the list-watch yet: not to be applied again. */
  const unseen = notInCluster.filter((m) => memory.applied?.get(keyOf(refOf(m))) === hashOfManifest(m));
  const pending = notInCluster.filter((m) => !unseen.includes(m));
  const prune = pruneActions(mine, manifests);

  if (pending.length > 0) {
    const applies = applyActions(manifests, pending, byKey, revision.id, inputs);
    return revisionPlan(
      run,
      // AWAITING_DEPLOY once the API server accepted every manifest; DEPLOYING once the controllers took them up.
      [...applies, ...reports(run, ['AWAITING_DEPLOY']), ...prune],
      'rolling-out',
      `applying revision ${revision.id}: ${pending.map((m) => keyOf(refOf(m))).join(', ')}`,
    );
  }
  if (unseen.length > 0) {
    // Accepted by the API server: the rollout is judged once the cluster's objects show this apply.
    return revisionPlan(
      run,
      reports(run, ['AWAITING_DEPLOY']),
      'rolling-out',
      `revision ${revision.id} is applied, waiting to see ${unseen.map((m) => keyOf(refOf(m))).join(', ')} in the cluster`,
    );
  }
  return rolloutPlan(
    run,
    { manifests, byKey, mine, namespace, now: ctx.now, progressDeadlineSeconds: ctx.progressDeadlineSeconds },
    prune,
  );
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
