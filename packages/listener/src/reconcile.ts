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
import { readResourceSpec } from './resource-spec.ts';
import { revisionRollout } from './revision-rollout.ts';
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
