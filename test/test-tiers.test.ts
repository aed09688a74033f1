/**
 * The suite's tiers (scripts/test-tiers.ts): a file's tier follows from what it and the test/ modules it
 * imports call, so the DATABASE_URL pass of CI (the database tier) never starts apps, and a file that
 * starts them only through a helper is still in the apps tier.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { tierOf } from '../scripts/test-tiers.ts';

const run = promisify(execFile);

test('a file is in the tier of the most it needs, its helpers included', async () => {
  // Pure checks of the source tree.
  assert.equal(await tierOf('test/layering.test.ts'), 'no-database');
  // The test app of test/support/harness.ts: a database, no apps (the harness defines the data plane's
  // starter without calling it).
  assert.equal(await tierOf('test/routes/tags.test.ts'), 'database');
  // Imports the harness for its admin key only, and asks a port where no database listens: no database.
  // (The harness defines the starters; importing it is not calling them.)
  assert.equal(await tierOf('test/db/database-outage.test.ts'), 'no-database');
  // A bare Fastify, with the harness's request helper.
  assert.equal(await tierOf('test/http/openapi-conformance.test.ts'), 'no-database');
  // Starts a deployment's LangGraph server itself, as the data plane would.
  assert.equal(await tierOf('test/langgraph/protocols.test.ts'), 'apps');
  // Calls startDataPlane itself.
  assert.equal(await tierOf('test/dataplane/app-metrics.test.ts'), 'apps');
  // Starts apps only through test/dataplane/data-plane-harness.ts.
  assert.equal(await tierOf('test/telemetry/revision-traces.test.ts'), 'apps');
  // Spawns the service through test/support/service-harness.ts.
  assert.equal(await tierOf('test/ops/first-start.test.ts'), 'apps');
});

test("CI's list of the slowest files: the slowest first, each with its tier, a failed one said so", async () => {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-times-'));
  try {
    const times = path.join(dir, 'times.jsonl');
    const lines = [
      { file: 'test/a.test.ts', seconds: 3.2, passed: true, tier: 'no-database' },
      { file: 'test/b.test.ts', seconds: 41.6, passed: false, tier: 'apps' },
      { file: 'test/c.test.ts', seconds: 12, passed: true, tier: 'database' },
    ];
    await fs.writeFile(times, lines.map((line) => `${JSON.stringify(line)}\n`).join(''));
    const { stdout } = await run(process.execPath, ['scripts/slowest-files.mjs', times, '2']);
    assert.deepEqual(
      stdout
        .trimEnd()
        .split('\n')
        .map((line) => line.trim().split(/\s+/)),
      [
        ['42', 's', 'apps', 'test/b.test.ts', 'FAILED'],
        ['12', 's', 'database', 'test/c.test.ts'],
      ],
    );
  } finally {
    await fs.rm(dir, { recursive: true, force: true });
  }
});
