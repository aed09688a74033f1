/**
 * The pure reconcile step: from a desired state and what is observed to the actions, without a
 * cluster or a service. Each case is a situation the agent meets, and the actions it must take.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { DesiredDeployment, DesiredRevision, DesiredState, ReportedStatus } from '@slipway/listener/desired-state';
import type { ObservedObject } from '@slipway/listener/kube-objects';
import { reconcile } from '@slipway/listener/reconcile';
import {
  inPlaceInputs,
  type Action,
  type Memory,
  type ReconcileContext,
  type RefusedApply,
} from '@slipway/listener/reconcile-plan';

const LISTENER = '6f1c0000-0000-4000-8000-000000000001';
const ctx: ReconcileContext = {
  listenerId: LISTENER,
  appPort: 8080,
  progressDeadlineSeconds: 600,
  postgresImage: 'postgres:17-alpine',
  redisImage: 'redis:7-alpine',
  namespaces: ['agents'],
  entropy: 'e'.repeat(64),
  now: Date.parse('2026-01-01T00:00:00Z'),
};

function rev(fields: Partial<DesiredRevision> = {}): DesiredRevision {
  return {
    id: 'rev-1',
    number: 1,
    status: 'QUEUED',
    image_uri: 'ghcr.io/acme/app:1',
    secrets: [{ name: 'KEY', value: 'v' }],
    secret_references: null,
    resource_spec: null,
    ...fields,
  };
}
function dep(fields: Partial<DesiredDeployment> = {}): DesiredDeployment {
  return {
    deployment_id: 'dep-1',
    name: 'app',
    namespace: 'agents',
    delete: false,
    custom_url: null,
    revision: rev(),
    ...fields,
  };
}
const state = (...deployments: DesiredDeployment[]): DesiredState => ({
  protocol: 1,
  listener_id: LISTENER,
  deployments,
});
const memory = (
  fields: Partial<{
    reported: [string, ReportedStatus][];
    refused: [string, RefusedApply][];
    confirmed: string[];
  }> = {},
): Memory => ({
  reported: new Map(fields.reported ?? []),
  refused: new Map(fields.refused ?? []),
  confirmed: new Set(fields.confirmed ?? []),
});

/** What the cluster holds after the agent applied everything of `desired` (and nothing else happened). */
function applied(desired: DesiredState, extra: (o: ObservedObject) => ObservedObject = (o) => o): ObservedObject[] {
  const first = reconcile(desired, { objects: [], memory: memory() }, ctx);
  return first
    .flatMap((p) => p.actions)
    .flatMap((a) => (a.type === 'apply' ? [structuredClone(a.manifest) as unknown as ObservedObject] : []))
    .map((o) => extra({ ...o, metadata: { ...o.metadata, generation: 1 } }));
}
const available = (o: ObservedObject): ObservedObject =>
  o.kind === 'Deployment'
    ? {
        ...o,
        status: { observedGeneration: 1, replicas: 1, updatedReplicas: 1, availableReplicas: 1, readyReplicas: 1 },
      }
    : o.kind === 'StatefulSet'
      ? { ...o, status: { observedGeneration: 1, replicas: 1, updatedReplicas: 1, readyReplicas: 1 } }
      : o;
const observed = (o: ObservedObject): ObservedObject =>
  o.kind === 'Deployment'
    ? { ...o, status: { observedGeneration: 1, replicas: 1, updatedReplicas: 1, availableReplicas: 0 } }
    : o;

const summary = (actions: readonly Action[]) =>
  actions.map((a) =>
    a.type === 'report'
      ? `report ${a.status}${a.failureReason ? ` ${a.failureReason}` : ''}`
      : a.type === 'apply'
        ? `apply ${a.manifest.kind} ${a.manifest.metadata.name}`
        : a.type === 'delete'
          ? `delete ${a.target.kind} ${a.target.name}`
          : a.type,
  );

function pod(revisionId: string, reason: string): ObservedObject {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: `app-${revisionId}`,
      namespace: 'agents',
      labels: {
        'app.kubernetes.io/managed-by': 'slipway-listener',
        'slipway.dev/deployment-id': 'dep-1',
        'slipway.dev/component': 'web',
        'slipway.dev/revision-id': revisionId,
      },
    },
    status: {
      containerStatuses: [
        {
          name: 'app',
          ready: false,
          restartCount: 4,
          image: 'x',
          imageID: 'x',
          state: { waiting: { reason, message: 'it hurts' } },
        },
      ],
    },
  };
}

describe('reconcile', () => {
  test('a new revision and an empty cluster: apply the Secret, Service and Deployment, then AWAITING_DEPLOY', () => {
    const [plan] = reconcile(state(dep()), { objects: [], memory: memory() }, ctx);
    assert.deepEqual(summary(plan!.actions), [
      'apply Secret app-secrets',
      'apply Service app',
      'apply Deployment app',
      'report AWAITING_DEPLOY',
    ]);
  });

  test('applied, but the controller has not seen the generation: nothing more than AWAITING_DEPLOY', () => {
    const desired = state(dep());
    const [plan] = reconcile(desired, { objects: applied(desired), memory: memory() }, ctx);
    assert.deepEqual(summary(plan!.actions), ['report AWAITING_DEPLOY']);
  });

  test('the controller took the generation up: DEPLOYING', () => {
    const desired = state(dep());
    const [plan] = reconcile(
      desired,
      { objects: applied(desired, observed), memory: memory({ reported: [['rev-1', 'AWAITING_DEPLOY']] }) },
      ctx,
    );
    assert.deepEqual(summary(plan!.actions), ['report DEPLOYING']);
  });

  test('everything applied and the rollout complete: DEPLOYED, and nothing applied again', () => {
    const desired = state(dep({ revision: rev({ status: 'DEPLOYING' }) }));
    const [plan] = reconcile(desired, { objects: applied(desired, available), memory: memory() }, ctx);
    assert.deepEqual(summary(plan!.actions), ['report DEPLOYED']);
  });

  test('an agent restarted mid-rollout reports only what the service has not seen', () => {
    const desired = state(dep({ revision: rev({ status: 'AWAITING_DEPLOY' }) }));
    const [plan] = reconcile(desired, { objects: applied(desired, observed), memory: memory() }, ctx);
    assert.deepEqual(summary(plan!.actions), ['report DEPLOYING']);
  });

  test('what this process reported is not reported again, even before the service says so', () => {
    const desired = state(dep());
    const [plan] = reconcile(
      desired,
      { objects: applied(desired, observed), memory: memory({ reported: [['rev-1', 'DEPLOYING']] }) },
      ctx,
    );
    assert.deepEqual(summary(plan!.actions), []);
  });

  test('a cache that has not caught up with an apply yet: apply again, report nothing twice', () => {
    const desired = state(dep());
    const stale = applied(desired).map((o) => ({
      ...o,
      metadata: { ...o.metadata, annotations: { ...o.metadata.annotations, 'slipway.dev/spec-hash': 'old' } },
    }));
    const [plan] = reconcile(desired, { objects: stale, memory: memory({ reported: [['rev-1', 'DEPLOYING']] }) }, ctx);
    assert.deepEqual(summary(plan!.actions), ['apply Secret app-secrets', 'apply Service app', 'apply Deployment app']);
  });

  test('a revision in a status this agent does not know (a newer service) is still rolled out and reported', () => {
    // A status added to the service after this agent was built: the agent cannot tell whether it is
    // final, so it reports, and the service (which knows) refuses a report that does not apply.
    const unknown = { status: 'VERIFYING' } as unknown as Partial<DesiredRevision>;
    const [first] = reconcile(state(dep({ revision: rev(unknown) })), { objects: [], memory: memory() }, ctx);
    assert.deepEqual(summary(first!.actions), [
      'apply Secret app-secrets',
      'apply Service app',
      'apply Deployment app',
      'report AWAITING_DEPLOY',
    ]);
    const desired = state(dep({ revision: rev(unknown) }));
    const [done] = reconcile(desired, { objects: applied(desired, available), memory: memory() }, ctx);
    assert.deepEqual(summary(done!.actions), ['report AWAITING_DEPLOY', 'report DEPLOYING', 'report DEPLOYED']);
  });

  test('a DEPLOYED revision in sync: nothing to do', () => {
    const desired = state(dep({ revision: rev({ status: 'DEPLOYED' }) }));
    const [plan] = reconcile(desired, { objects: applied(desired, available), memory: memory() }, ctx);
    assert.deepEqual(plan!.actions, []);
  });

  test('a DEPLOYED revision whose Deployment was deleted by hand is applied again, without a report', () => {
    const desired = state(dep({ revision: rev({ status: 'DEPLOYED' }) }));
    const objects = applied(desired, available).filter((o) => o.kind !== 'Deployment');
    const [plan] = reconcile(desired, { objects, memory: memory() }, ctx);
    assert.deepEqual(summary(plan!.actions), ['apply Deployment app']);
  });

  test('pods of the revision in ImagePullBackOff or CrashLoopBackOff fail it with the reason', () => {
    const desired = state(dep({ revision: rev({ status: 'DEPLOYING' }) }));
    for (const [reason, failure] of [
      ['ImagePullBackOff', 'image_pull_failed'],
      ['ErrImagePull', 'image_pull_failed'],
      ['CrashLoopBackOff', 'crash_loop'],
    ] as const) {
      const [plan] = reconcile(
        desired,
        { objects: [...applied(desired, observed), pod('rev-1', reason)], memory: memory() },
        ctx,
      );
      assert.deepEqual(summary(plan!.actions), [`report DEPLOY_FAILED ${failure}`], reason);
      const report = plan!.actions[0] as Extract<Action, { type: 'report' }>;
      assert.match(report.message ?? '', new RegExp(`container app of pod app-rev-1 is ${reason}: it hurts`));
    }
  });

  test('a pod waiting for a Secret that may yet come is not a failure, but the progress deadline says what it waited for', () => {
    const desired = state(dep({ revision: rev({ status: 'DEPLOYING' }) }));
    const waiting = pod('rev-1', 'CreateContainerConfigError');
    assert.deepEqual(
      summary(
        reconcile(desired, { objects: [...applied(desired, observed), waiting], memory: memory() }, ctx)[0]!.actions,
      ),
      [],
    );
    const stalled = (o: ObservedObject): ObservedObject =>
      o.kind === 'Deployment'
        ? {
            ...o,
            status: {
              observedGeneration: 1,
              updatedReplicas: 1,
              replicas: 1,
              conditions: [
                { type: 'Progressing', status: 'False', reason: 'ProgressDeadlineExceeded', message: 'timed out' },
              ],
            },
          }
        : o;
    const [plan] = reconcile(desired, { objects: [...applied(desired, stalled), waiting], memory: memory() }, ctx);
    const failed = plan!.actions[0] as Extract<Action, { type: 'report' }>;
    assert.equal(failed.failureReason, 'progress_deadline_exceeded');
    assert.match(
      failed.message ?? '',
      /timed out; container app of pod app-rev-1 is CreateContainerConfigError: it hurts/,
    );
  });

  test("an old revision's crashing pods do not fail the new one", () => {
    const desired = state(dep({ revision: rev({ status: 'DEPLOYING' }) }));
    const [plan] = reconcile(
      desired,
      { objects: [...applied(desired, observed), pod('rev-0', 'CrashLoopBackOff')], memory: memory() },
      ctx,
    );
    assert.deepEqual(summary(plan!.actions), []);
  });

  test('a progress deadline exceeded fails the revision', () => {
    const desired = state(dep({ revision: rev({ status: 'DEPLOYING' }) }));
    const stalled = (o: ObservedObject): ObservedObject =>
      o.kind === 'Deployment'
        ? {
            ...o,
            status: {
              observedGeneration: 1,
              updatedReplicas: 1,
              replicas: 1,
              conditions: [
                { type: 'Progressing', status: 'False', reason: 'ProgressDeadlineExceeded', message: 'timed out' },
              ],
            },
          }
        : o;
    const [plan] = reconcile(desired, { objects: applied(desired, stalled), memory: memory() }, ctx);
    assert.deepEqual(summary(plan!.actions), ['report DEPLOY_FAILED progress_deadline_exceeded']);
  });

  test('a status for an older generation is not taken for the new one', () => {
    const desired = state(dep({ revision: rev({ status: 'DEPLOYING' }) }));
    const behind = (o: ObservedObject): ObservedObject =>
      o.kind === 'Deployment' ? { ...available(o), metadata: { ...o.metadata, generation: 2 } } : o;
    const [plan] = reconcile(desired, { objects: applied(desired, behind), memory: memory() }, ctx);
    assert.deepEqual(summary(plan!.actions), []);
    assert.match(plan!.summary, /generation 2/);
  });

  test('a manifest the API server refused: the revision fails as invalid_manifest and nothing is applied', () => {
    const refused: RefusedApply = { message: 'Deployment "app" is invalid: bad', inputs: inPlaceInputs(dep()) };
    const [plan] = reconcile(state(dep()), { objects: [], memory: memory({ refused: [['rev-1', refused]] }) }, ctx);
    assert.deepEqual(summary(plan!.actions), ['report DEPLOY_FAILED invalid_manifest']);
  });

  test('a refused in-place change of a DEPLOYED revision reports nothing; the next change is applied again', () => {
    const deployed = (spec: Record<string, unknown>) =>
      dep({ revision: rev({ status: 'DEPLOYED', resource_spec: spec }) });
    const refused: RefusedApply = {
      message: 'Deployment "app" is invalid: bad',
      inputs: inPlaceInputs(deployed({ cpu: 64 })),
    };
    const running = applied(state(deployed({ min_scale: 1 })), available);

    const [stuck] = reconcile(
      state(deployed({ cpu: 64 })),
      { objects: running, memory: memory({ refused: [['rev-1', refused]] }) },
      ctx,
    );
    assert.deepEqual(summary(stuck!.actions), [], 'no report for a revision the service has as DEPLOYED');
    assert.equal(stuck!.phase, 'failed');
    assert.match(stuck!.summary, /invalid: bad/);

    const [fixed] = reconcile(
      state(deployed({ min_scale: 2 })),
      { objects: running, memory: memory({ refused: [['rev-1', refused]] }) },
      ctx,
    );
    assert.deepEqual(summary(fixed!.actions), ['apply Deployment app']);
  });

  test('a DEPLOYED revision whose resource_spec changed in place: its manifests are applied again, without reports', () => {
    const deployed = (minScale: number) =>
      state(dep({ revision: rev({ status: 'DEPLOYED', resource_spec: { min_scale: minScale } }) }));
    const [plan] = reconcile(deployed(3), { objects: applied(deployed(1), available), memory: memory() }, ctx);
    const applies = plan!.actions.filter((a): a is Extract<Action, { type: 'apply' }> => a.type === 'apply');
    assert.deepEqual(summary(plan!.actions), ['apply Deployment app']);
    assert.equal((applies[0]!.manifest.spec as { replicas?: number }).replicas, 3);
  });

  test('a resource spec of the wrong shape fails the revision naming the fields', () => {
    const [plan] = reconcile(
      state(
        dep({
          revision: rev({
            resource_spec: JSON.parse('{"min_scale": "two", "labels": {"a": 1}}') as DesiredRevision['resource_spec'],
          }),
        }),
      ),
      { objects: [], memory: memory() },
      ctx,
    );
    const failed = plan!.actions.find(
      (a): a is Extract<Action, { type: 'report' }> => a.type === 'report' && a.status === 'DEPLOY_FAILED',
    );
    assert.match(failed?.message ?? '', /resource_spec\.min_scale.*resource_spec\.labels\.a/);
  });

  test('no namespace given: the first watched one', () => {
    const [plan] = reconcile(state(dep({ namespace: null })), { objects: [], memory: memory() }, ctx);
    const apply = plan!.actions.find((a) => a.type === 'apply') as Extract<Action, { type: 'apply' }>;
    assert.equal(apply.manifest.metadata.namespace, 'agents');
  });

  test('delete: every object of the deployment goes (pods with their owners), then the deletion is confirmed once', () => {
    const desired = state(dep({ revision: rev({ status: 'DEPLOYED', resource_spec: { db_storage_gi: 1 } }) }));
    const objects = [
      ...applied(desired, available),
      pod('rev-1', 'Running'),
      {
        apiVersion: 'v1',
        kind: 'PersistentVolumeClaim',
        metadata: { name: 'data-app-db-0', namespace: 'agents', labels: { 'slipway.dev/deployment-id': 'dep-1' } },
      },
    ];
    const deleting = state(dep({ delete: true }));
    const [plan] = reconcile(deleting, { objects, memory: memory() }, ctx);
    assert.deepEqual(summary(plan!.actions), [
      'delete Deployment app',
      'delete StatefulSet app-db',
      'delete Service app',
      'delete Service app-db',
      'delete Secret app-secrets',
      'delete Secret app-db',
      'delete PersistentVolumeClaim data-app-db-0',
    ]);
    const going = objects.map((o) => ({ ...o, metadata: { ...o.metadata, deletionTimestamp: new Date() } }));
    assert.deepEqual(
      reconcile(deleting, { objects: going, memory: memory() }, ctx)[0]!.actions,
      [],
      'objects on their way out are waited for',
    );
    const strayPod = [pod('rev-1', 'Running')];
    assert.deepEqual(summary(reconcile(deleting, { objects: strayPod, memory: memory() }, ctx)[0]!.actions), [
      'delete Pod app-rev-1',
    ]);
    assert.deepEqual(summary(reconcile(deleting, { objects: [], memory: memory() }, ctx)[0]!.actions), [
      'confirm-deletion',
    ]);
    assert.deepEqual(
      reconcile(deleting, { objects: [], memory: memory({ confirmed: ['dep-1'] }) }, ctx)[0]!.actions,
      [],
    );
  });

  test('objects of another deployment are never touched', () => {
    const other = applied(state(dep({ deployment_id: 'dep-2', name: 'other' })), available);
    const [plan] = reconcile(state(dep({ delete: true })), { objects: other, memory: memory() }, ctx);
    assert.deepEqual(summary(plan!.actions), ['confirm-deletion']);
  });

  test('a name taken by a deployment being deleted waits; taken by a live one fails', () => {
    const old = applied(state(dep({ deployment_id: 'dep-old', name: 'app' })), available);
    const waiting = reconcile(
      state(dep(), dep({ deployment_id: 'dep-old', delete: true })),
      { objects: old, memory: memory() },
      ctx,
    );
    assert.deepEqual(summary(waiting[0]!.actions), []);
    assert.equal(waiting[0]!.phase, 'waiting');
    const clash = reconcile(
      state(dep(), dep({ deployment_id: 'dep-old', revision: rev({ id: 'rev-old', status: 'DEPLOYED' }) })),
      { objects: old, memory: memory() },
      ctx,
    );
    const failed = clash[0]!.actions.at(-1) as Extract<Action, { type: 'report' }>;
    assert.equal(failed.status, 'DEPLOY_FAILED');
    assert.match(failed.message ?? '', /already belongs to Slipway deployment dep-old/);
  });

  test('what a new revision no longer has is deleted, but not the database data', () => {
    const before = state(
      dep({
        revision: rev({ status: 'DEPLOYED', resource_spec: { max_scale: 4, queue_min_scale: 1, db_storage_gi: 1 } }),
      }),
    );
    const objects = applied(before, available);
    const after = state(dep({ revision: rev({ id: 'rev-2', resource_spec: {} }) }));
    const [plan] = reconcile(after, { objects, memory: memory() }, ctx);
    const deletes = summary(plan!.actions).filter((a) => a.startsWith('delete'));
    assert.deepEqual(deletes.sort(), [
      'delete Deployment app-queue',
      'delete HorizontalPodAutoscaler app',
      'delete Service app-db',
      'delete StatefulSet app-db',
    ]);
  });

  test('the database password in the cluster is kept; a new one is made only once', () => {
    const desired = state(dep({ revision: rev({ resource_spec: { db_storage_gi: 1 } }) }));
    const objects = applied(desired).map((o) =>
      o.kind === 'Secret' && o.metadata.name === 'app-db'
        ? { ...o, data: { ...(o.data as object), POSTGRES_PASSWORD: Buffer.from('kept').toString('base64') } }
        : o,
    );
    const [plan] = reconcile(desired, { objects, memory: memory() }, { ...ctx, entropy: 'another pass' });
    const secret = plan!.actions.find((a) => a.type === 'apply' && a.manifest.metadata.name === 'app-db') as Extract<
      Action,
      { type: 'apply' }
    >;
    assert.equal(
      Buffer.from((secret.manifest.data as Record<string, string>).POSTGRES_PASSWORD!, 'base64').toString(),
      'kept',
    );
  });

  test('an autoscaler added to an app whose replicas the listener holds: replicas are handed over first', () => {
    const before = state(dep({ revision: rev({ status: 'DEPLOYED', resource_spec: { min_scale: 3 } }) }));
    const held = (o: ObservedObject): ObservedObject =>
      available({
        ...o,
        metadata: {
          ...o.metadata,
          managedFields: [
            { manager: 'slipway-listener', operation: 'Apply', fieldsV1: { 'f:spec': { 'f:replicas': {} } } },
          ],
        },
      });
    const objects = applied(before, held);
    const after = state(dep({ revision: rev({ status: 'DEPLOYED', resource_spec: { min_scale: 2, max_scale: 5 } }) }));
    const [plan] = reconcile(after, { objects, memory: memory() }, ctx);
    assert.deepEqual(summary(plan!.actions), [
      'hand-over-replicas',
      'apply Deployment app',
      'apply HorizontalPodAutoscaler app',
    ]);
    const handover = plan!.actions[0] as Extract<Action, { type: 'hand-over-replicas' }>;
    assert.equal(handover.replicas, 3, 'at the value the Deployment has, not min_scale');

    // Held by the autoscaler already (or by nobody): nothing to hand over.
    const byAutoscaler = applied(before, (o) =>
      available({
        ...o,
        metadata: {
          ...o.metadata,
          managedFields: [
            { manager: 'kube-controller-manager', operation: 'Update', fieldsV1: { 'f:spec': { 'f:replicas': {} } } },
          ],
        },
      }),
    );
    const [again] = reconcile(after, { objects: byAutoscaler, memory: memory() }, ctx);
    assert.deepEqual(summary(again!.actions), ['apply Deployment app', 'apply HorizontalPodAutoscaler app']);
  });

  test('a new autoscaled app: the Deployment, then its replicas at min_scale, then the autoscaler', () => {
    const desired = state(dep({ revision: rev({ resource_spec: { min_scale: 2, max_scale: 5 } }) }));
    const [plan] = reconcile(desired, { objects: [], memory: memory() }, ctx);
    assert.deepEqual(summary(plan!.actions), [
      'apply Secret app-secrets',
      'apply Service app',
      'apply Deployment app',
      'hand-over-replicas',
      'apply HorizontalPodAutoscaler app',
      'report AWAITING_DEPLOY',
    ]);
    assert.equal((plan!.actions[3] as Extract<Action, { type: 'hand-over-replicas' }>).replicas, 2);
  });

  test('an autoscaled app with fewer replicas available than min_scale is still rolling out', () => {
    const desired = state(
      dep({ revision: rev({ status: 'DEPLOYING', resource_spec: { min_scale: 2, max_scale: 5 } }) }),
    );
    // One replica (the default before the autoscaler acts), updated and available.
    const objects = applied(desired, available);
    const [plan] = reconcile(desired, { objects, memory: memory() }, ctx);
    assert.equal(plan!.phase, 'rolling-out');
    assert.match(plan!.summary, /1 of 2 new replicas updated/);
  });

  test('applied but not seen by the watch yet: not applied again, and not judged on the old objects', () => {
    const desired = state(dep({ revision: rev({ status: 'QUEUED' }) }));
    const [first] = reconcile(desired, { objects: [], memory: memory() }, ctx);
    const hashes = new Map(
      first!.actions.flatMap((a) =>
        a.type === 'apply'
          ? [
              [
                `${a.manifest.kind} agents/${a.manifest.metadata.name}`,
                a.manifest.metadata.annotations!['slipway.dev/spec-hash']!,
              ] as const,
            ]
          : [],
      ),
    );
    const [next] = reconcile(desired, { objects: [], memory: { ...memory(), applied: hashes } }, ctx);
    assert.deepEqual(summary(next!.actions), ['report AWAITING_DEPLOY']);
    assert.equal(next!.phase, 'rolling-out');
    assert.match(next!.summary, /waiting to see/);

    // A change since (another hash): applied, memory or not.
    const changed = state(dep({ revision: rev({ status: 'QUEUED', resource_spec: { min_scale: 2 } }) }));
    const [third] = reconcile(changed, { objects: [], memory: { ...memory(), applied: hashes } }, ctx);
    assert.ok(summary(third!.actions).includes('apply Deployment app'));
  });
});
