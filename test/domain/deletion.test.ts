/**
 * Who ends a deletion is one rule (src/domain/deletion.ts): the delete itself when the deployment's data
 * plane holds nothing of it, else that data plane; a data plane confirms only its own deployments' and
 * only while they are being deleted.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  deletionConfirmation,
  deletionFinisher,
  pendingDeletionFinisher,
  type DeletionConfirmer,
} from '../../src/domain/deletion.ts';
import { DEPLOYMENT_STATUSES } from '../../src/domain/states.ts';

const LISTENER = 'listener-a';

test('the delete ends a deletion at once only when the data plane holds nothing of the deployment', () => {
  assert.equal(deletionFinisher({ listener_id: null, dataPlaneMayHoldIt: false }), 'delete');
  assert.equal(deletionFinisher({ listener_id: LISTENER, dataPlaneMayHoldIt: false }), 'delete');
  assert.equal(deletionFinisher({ listener_id: null, dataPlaneMayHoldIt: true }), 'local');
  assert.equal(deletionFinisher({ listener_id: LISTENER, dataPlaneMayHoldIt: true }), 'listener');
});

test('a deployment still there is ended by its data plane while it is being deleted, by nobody otherwise', () => {
  for (const status of DEPLOYMENT_STATUSES) {
    const deleting = status === 'AWAITING_DELETE';
    assert.equal(pendingDeletionFinisher({ status, listener_id: null }), deleting ? 'local' : null, status);
    assert.equal(pendingDeletionFinisher({ status, listener_id: LISTENER }), deleting ? 'listener' : null, status);
  }
});

test("a data plane's confirmation ends only its own deployment's deletion, and only while it is being deleted", () => {
  const local: DeletionConfirmer = { kind: 'local' };
  const listener: DeletionConfirmer = { kind: 'listener', listenerId: LISTENER };
  const other: DeletionConfirmer = { kind: 'listener', listenerId: 'listener-b' };
  for (const status of DEPLOYMENT_STATUSES) {
    const deleting = status === 'AWAITING_DELETE';
    const own = { status, listener_id: null };
    const ofListener = { status, listener_id: LISTENER };
    assert.equal(deletionConfirmation(own, local), deleting ? 'finish' : 'not_deleting', status);
    assert.equal(deletionConfirmation(ofListener, listener), deleting ? 'finish' : 'not_deleting', status);
    assert.equal(deletionConfirmation(own, listener), 'not_theirs', `${status}: a listener, the own plane's`);
    assert.equal(deletionConfirmation(ofListener, local), 'not_theirs', `${status}: the own worker, a listener's`);
    assert.equal(deletionConfirmation(ofListener, other), 'not_theirs', `${status}: another listener's`);
  }
});
