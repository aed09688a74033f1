/**
 * The SDK stops following a revision at a final status; it keeps its own list of them (it does not
 * import the service's state machine, being its own package), so this holds the two to each other:
 * `slipway deploy` and `waitForRevision` must end exactly where the service says a revision ends.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { isFinalRevisionStatus } from '@slipway/sdk/revision-follow';
import { REVISION_STATUSES, isFinalRevisionStatus as serviceIsFinal } from '../../src/domain/states.ts';

test("the SDK's final revision statuses are the service's", () => {
  for (const status of REVISION_STATUSES)
    assert.equal(isFinalRevisionStatus(status), serviceIsFinal(status), `${status}`);
});
