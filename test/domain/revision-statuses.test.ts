/**
 * Revision statuses have one definition, the table of src/domain/states.ts. Modules of the service
 * derive their lists from it; the copies that cannot import it are held to it here, so a status added
 * to the table and not to them fails: the listener agent's (its image holds no service code), the SQL
 * index of the own worker's claim (a migration), and the properties the table's own lists rely on.
 * (The SDK's and the dashboard's final statuses: test/cli/sdk-final-status.test.ts; the statuses' CHECK
 * constraint: test/store/schema-drift.test.ts.)
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { REPORTED_RANK, SERVICE_RANK } from '@slipway/listener/reconcile-plan';
import {
  LISTENER_REPORTED_STATUSES,
  REVISION_STATES,
  REVISION_STATUSES,
  WORKING_REVISION_STATUSES,
  dataPlaneSteps,
  isFinalRevisionStatus,
} from '../../src/domain/states.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const sorted = (values: Iterable<string>) => [...values].sort();

test("the table's properties agree with each other", () => {
  for (const status of REVISION_STATUSES) {
    const state = REVISION_STATES[status];
    if (isFinalRevisionStatus(status)) {
      assert.deepEqual(state.stepOf, [], `${status}: a final status is no data plane's step`);
      assert.equal(state.deadline, null, `${status}: a final status has no deadline`);
    } else {
      assert.ok(state.deadline !== null && state.onDeadline !== null, `${status}: a deadline and where it leads`);
      assert.ok(state.next.includes(state.onDeadline), `${status}: its deadline's status is one of its next`);
      assert.ok(!state.failed, `${status}: a failure is final`);
    }
    if (state.stepOf.includes('listener')) assert.ok(state.listenerReports, `${status}: a listener reports its steps`);
  }
  for (const status of LISTENER_REPORTED_STATUSES)
    assert.ok(
      REVISION_STATES[status].stepOf.includes('listener') || isFinalRevisionStatus(status),
      `${status}: a listener reports its steps and its outcomes only`,
    );
});

test("the listener agent knows every status, and which are final, as the service's table says", () => {
  assert.deepEqual(sorted(Object.keys(SERVICE_RANK)), sorted(REVISION_STATUSES));
  const listenerSteps = dataPlaneSteps('listener');
  for (const status of REVISION_STATUSES) {
    const rank = SERVICE_RANK[status];
    if (isFinalRevisionStatus(status)) assert.equal(rank, null, `${status} is final: nothing more is reported`);
    else if (listenerSteps.includes(status))
      assert.equal(rank, listenerSteps.indexOf(status) + 1, `${status}: the listener's step ${status}`);
    else assert.equal(rank, 0, `${status} comes before the listener's steps`);
  }
  assert.deepEqual(sorted(Object.keys(REPORTED_RANK)), sorted(LISTENER_REPORTED_STATUSES));
});

test("the index of the own worker's claim covers QUEUED and the working statuses", () => {
  // The last migration that (re)creates the index holds its current predicate.
  const dir = path.join(ROOT, 'migrations');
  const definitions = readdirSync(dir)
    .filter((f) => f.endsWith('.sql'))
    .sort()
    .flatMap((f) => [...readFileSync(path.join(dir, f), 'utf8').matchAll(/create index revisions_work\b[^;]*;/g)]);
  const last = definitions.at(-1)?.[0];
  assert.ok(last, 'an index revisions_work is created');
  const predicate = /where status in \(([^)]*)\)/.exec(last)?.[1];
  assert.ok(predicate, `the index has a status predicate: ${last}`);
  const statuses = [...predicate.matchAll(/'([A-Z_]+)'/g)].map((m) => m[1]!);
  assert.deepEqual(
    sorted(statuses),
    sorted(['QUEUED', ...WORKING_REVISION_STATUSES]),
    'a new migration must recreate revisions_work with the working statuses of src/domain/states.ts',
  );
});
