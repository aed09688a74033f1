/**
 * The desired-state rule (src/domain/desired-state.ts) for every status of the latest revision, with and
 * without an active revision, on both data planes, being deleted or not.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { desiredDeploymentState, nextWorkRevisionId, targetRevisionId } from '../../src/domain/desired-state.ts';
import { REVISION_STATUSES, WORKING_REVISION_STATUSES, type RevisionStatus } from '../../src/domain/states.ts';

const ENDED_WITHOUT_RUNNING: RevisionStatus[] = [
  'CREATE_FAILED',
  'BUILD_FAILED',
  'DEPLOY_FAILED',
  'SKIPPED',
  'INTERRUPTED',
  'UNKNOWN',
];

test('the target is the latest revision unless it ended without running, else the active one', () => {
  for (const status of REVISION_STATUSES) {
    for (const active of [null, 'active']) {
      const target = targetRevisionId({ latest_revision_id: 'latest', active_revision_id: active }, () => status);
      const expected = ENDED_WITHOUT_RUNNING.includes(status) ? active : 'latest';
      assert.equal(target, expected, `latest ${status}, active ${active}`);
    }
  }
  // A latest revision not read (or none) is not the target.
  assert.equal(
    targetRevisionId({ latest_revision_id: 'latest', active_revision_id: 'a' }, () => undefined),
    'a',
  );
  assert.equal(
    targetRevisionId({ latest_revision_id: null, active_revision_id: null }, () => 'QUEUED'),
    null,
  );
});

test("a pull request's preview is never the target, whatever its status: the active revision stays it", () => {
  for (const status of REVISION_STATUSES) {
    for (const active of [null, 'active']) {
      const deployment = { latest_revision_id: 'preview', active_revision_id: active };
      assert.equal(
        targetRevisionId(
          deployment,
          () => status,
          (id) => id === 'preview',
        ),
        active,
        `preview ${status}, active ${active}`,
      );
    }
  }
});

test("a deployment being deleted is to be torn down and serves nothing; the spec is the deployment's own", () => {
  for (const listener_id of [null, 'listener-1']) {
    const row = {
      listener_id,
      latest_revision_id: 'latest',
      active_revision_id: 'active',
      source_config: { resource_spec: { replicas: 2 } },
      secret_references: [{ name: 'A', secret_name: 's', key: 'k' }],
    };
    const ready = desiredDeploymentState({ ...row, status: 'READY' }, () => 'DEPLOYED');
    assert.equal(ready.dataPlane, listener_id === null ? 'local' : 'listener');
    assert.equal(ready.delete, false);
    assert.equal(ready.servingRevisionId, 'active');
    assert.deepEqual(ready.resourceSpec, { replicas: 2 });
    assert.deepEqual(ready.secretReferences, row.secret_references);
    const deleting = desiredDeploymentState({ ...row, status: 'AWAITING_DELETE' }, () => 'DEPLOYED');
    assert.equal(deleting.delete, true);
    assert.equal(deleting.servingRevisionId, null);
    const bad = desiredDeploymentState(
      { ...row, status: 'READY', source_config: { resource_spec: [1] }, secret_references: {} },
      () => 'QUEUED',
    );
    assert.equal(bad.resourceSpec, null);
    assert.equal(bad.secretReferences, null);
  }
});

test("the own worker's next work: the target while it is on its way, never an older revision, none on a listener", () => {
  const statuses = new Map<string, RevisionStatus>();
  const statusOf = (id: string) => statuses.get(id);
  const local = {
    status: 'READY' as const,
    listener_id: null,
    latest_revision_id: 'latest',
    active_revision_id: 'active',
  };
  statuses.set('active', 'DEPLOYED');
  // An older revision in a step is no work of its own: the latest is.
  statuses.set('older', WORKING_REVISION_STATUSES[0]!);
  for (const status of REVISION_STATUSES) {
    statuses.set('latest', status);
    const onItsWay = status === 'QUEUED' || WORKING_REVISION_STATUSES.includes(status);
    assert.equal(nextWorkRevisionId(local, statusOf), onItsWay ? 'latest' : null, `latest ${status}`);
    assert.equal(nextWorkRevisionId({ ...local, listener_id: 'l' }, statusOf), null);
    assert.equal(nextWorkRevisionId({ ...local, status: 'AWAITING_DELETE' }, statusOf), null);
  }
  assert.equal(nextWorkRevisionId({ ...local, latest_revision_id: null }, statusOf), null);
});
