/**
 * `slipway server` is the service as `npm start` runs it, Ctrl-C included: SIGINT goes through the
 * service's graceful shutdown (requests finished, the embedded PostgreSQL stopped, exit code 0), not
 * the CLI's exit-at-once 130 of the other commands.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import path from 'node:path';
import { after } from 'node:test';
import {
  alive,
  call,
  cleanUp,
  logLines,
  makeDataDir,
  postgresPid,
  startService,
  stop,
} from '../support/service-harness.ts';
import { eventually } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';

const BOOTSTRAP_KEY = 'slw_cli_server_test_bootstrap_key_012345';

after(cleanUp);

test(
  'slipway server serves, and stops on Ctrl-C (SIGINT) as gracefully as npm start',
  { timeout: 180_000 },
  async () => {
    const dataDir = await makeDataDir();
    const service = await startService(
      dataDir,
      { SLIPWAY_BOOTSTRAP_API_KEY: BOOTSTRAP_KEY, LOG_LEVEL: 'info' },
      { script: 'bin/slipway.mjs', args: ['server'] },
    );
    assert.equal((await call(service, 'GET', '/v2/deployments', BOOTSTRAP_KEY)).status, 200);
    const pgPid = await postgresPid(dataDir);
    assert.ok(pgPid !== null && alive(pgPid), 'the embedded PostgreSQL runs under the data directory');

    const exit = await stop(service, 'SIGINT');
    assert.deepEqual(exit, { code: 0, signal: null }, service.stderr());
    assert.doesNotMatch(service.stderr(), /Interrupted/, "the CLI's own Ctrl-C message is not shown for the service");
    const messages = logLines(service.stdout()).map((line) => line.msg);
    assert.ok(messages.includes('shutting down'), `the shutdown was logged, stdout was:\n${service.stdout()}`);
    assert.equal(messages.at(-1), 'stopped', 'the graceful shutdown ran to its end');
    await eventually('the embedded PostgreSQL to be stopped', () => !alive(pgPid));
    await assert.rejects(
      fs.stat(path.join(dataDir, 'postgres', 'postmaster.pid')),
      /ENOENT/,
      'PostgreSQL shut down cleanly',
    );
  },
);
