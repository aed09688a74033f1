/**
 * The suite's tiers (scripts/test-tiers.ts): a file's tier follows from what it and the test/ modules it
 * imports call, so the DATABASE_URL pass of CI (the database tier) never starts apps, and a file that
 * starts them only through a helper is still in the apps tier.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { tierOf } from '../scripts/test-tiers.ts';

test('a file is in the tier of the most it needs, its helpers included', async () => {
  // Pure checks of the source tree.
  assert.equal(await tierOf('test/layering.test.ts'), 'no-database');
  // The test app of test/support/harness.ts: a database, no apps (the harness defines the data plane's
  // starter without calling it).
  assert.equal(await tierOf('test/routes/tags.test.ts'), 'database');
  // Starts a deployment's LangGraph server itself, as the data plane would.
  assert.equal(await tierOf('test/langgraph/protocols.test.ts'), 'apps');
  // Calls startDataPlane itself.
  assert.equal(await tierOf('test/dataplane/app-metrics.test.ts'), 'apps');
  // Starts apps only through test/dataplane/data-plane-harness.ts.
  assert.equal(await tierOf('test/telemetry/revision-traces.test.ts'), 'apps');
  // Spawns the service through test/support/service-harness.ts.
  assert.equal(await tierOf('test/ops/first-start.test.ts'), 'apps');
});
