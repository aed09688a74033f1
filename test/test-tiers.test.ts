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
import { listedPaths, tierOf } from '../scripts/test-tiers.ts';

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

test("CI's list of the slowest files: the slowest first, each with its tier, then every failed file and test", async () => {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-times-'));
  try {
    const times = path.join(dir, 'times.jsonl');
    const lines = [
      { file: 'test/a.test.ts', seconds: 3.2, passed: true, tier: 'no-database' },
      { file: 'test/b.test.ts', seconds: 41.6, passed: false, tier: 'apps' },
      { file: 'test/c.test.ts', seconds: 12, passed: true, tier: 'database' },
      { file: 'test/d.test.ts', seconds: 1, passed: false, tier: 'database' },
      { failed: 'a key of another workspace is refused', at: 'test/support/limited-test.ts', reason: 'Error: 200' },
      { failed: 'the log is kept', at: 'test/d.test.ts', reason: 'AssertionError: absent' },
    ];
    await fs.writeFile(times, lines.map((line) => `${JSON.stringify(line)}\n`).join(''));
    const { stdout } = await run(process.execPath, ['scripts/slowest-files.mjs', times, '2']);
    assert.deepEqual(
      stdout
        .trimEnd()
        .split('\n')
        .map((line) => line.trim()),
      [
        '42 s  apps         test/b.test.ts  FAILED',
        '12 s  database     test/c.test.ts',
        '1 s  database     test/d.test.ts  FAILED',
        'failed: a key of another workspace is refused',
        'Error: 200',
        'failed: the log is kept (test/d.test.ts)',
        'AssertionError: absent',
      ],
    );
  } finally {
    await fs.rm(dir, { recursive: true, force: true });
  }
});

test('the times reporter: a line for the file, and one for each failed test with the first line of why, none for its suite', async () => {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-reporter-'));
  try {
    const file = path.join(dir, 'probe.test.mjs');
    await fs.writeFile(
      file,
      [
        "import { describe, test } from 'node:test';",
        "describe('a suite', () => {",
        "  test('keeps the log', () => { throw new Error('the log is gone\\nat a second line'); });",
        "  test('passes', () => {});",
        "  test('will keep the log', { todo: 'not yet' }, () => { throw new Error('todo'); });",
        '});',
      ].join('\n'),
    );
    // A runner started from a test file would report to its parent: NODE_TEST_CONTEXT says it is one.
    const { NODE_TEST_CONTEXT: _, ...env } = process.env;
    const { stdout } = await run(
      process.execPath,
      [
        '--test',
        `--test-reporter=${path.resolve('scripts/test-file-times.mjs')}`,
        '--test-reporter-destination=stdout',
        file,
      ],
      { env },
    ).catch((error: { stdout: string }) => error);
    const lines = stdout
      .trimEnd()
      .split('\n')
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    assert.deepEqual(
      lines.map(({ seconds: _, ...rest }) => rest),
      [
        { failed: 'keeps the log', at: file, reason: 'Error: the log is gone' },
        { file, passed: false },
      ],
    );
  } finally {
    await fs.rm(dir, { recursive: true, force: true });
  }
});

test('`npm test -- --except LIST` leaves out the files listed, and refuses a list that names no test file', async () => {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-except-'));
  // A runner started from a test file would report to its parent: NODE_TEST_CONTEXT says it is one.
  const { NODE_TEST_CONTEXT: _, ...env } = process.env;
  const npmTest = (args: string[]) =>
    run(process.execPath, ['--import', 'tsx', 'scripts/run-tests.ts', '--no-bundle', ...args], { env }).catch(
      (error: { stdout: string; stderr: string; code: number }) => error,
    );
  try {
    const list = path.join(dir, 'list');
    await fs.writeFile(list, '# run elsewhere\n\ntest/test-rules.test.ts  # a comment\n');
    const times = path.join(dir, 'times.jsonl');
    const ran = await npmTest([
      '--times',
      times,
      '--except',
      list,
      'test/support/wait.test.ts',
      'test/test-rules.test.ts',
    ]);
    assert.equal('code' in ran ? ran.code : 0, 0, ran.stderr);
    assert.match(ran.stdout, /== 1 files left out \(--except /);
    const filesRun = (await fs.readFile(times, 'utf8'))
      .trimEnd()
      .split('\n')
      .map((line) => (JSON.parse(line) as { file: string }).file);
    assert.deepEqual(filesRun, ['test/support/wait.test.ts']);

    // A renamed or mistyped file would otherwise run nowhere: the run refuses the list and runs nothing.
    await fs.writeFile(list, 'test/test-rules.test.ts\ntest/no-such.test.ts\n');
    const refused = await npmTest(['--except', list, 'test/support/wait.test.ts']);
    assert.ok('code' in refused && refused.code !== 0, 'the run failed');
    assert.match(refused.stderr, /--except .* names no test file at test\/no-such\.test\.ts/);
    assert.doesNotMatch(refused.stdout, /# Subtest/);
  } finally {
    await fs.rm(dir, { recursive: true, force: true });
  }
});

test("CI's files for the ordinary user only: test files of the tiers whose SQL the DATABASE_URL pass does not cover", async () => {
  // A database-tier file left out of the root run would be missing from its SQL record.
  const listed = listedPaths(await fs.readFile('.ci/ordinary-user-only', 'utf8'));
  assert.ok(listed.length > 0);
  for (const file of listed) {
    await fs.access(file);
    assert.notEqual(await tierOf(file), 'database', file);
  }
});
