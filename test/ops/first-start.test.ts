/**
 * The first start (docs/operations.md): killed during initdb, it leaves a half-made cluster that
 * the next start removes and makes again (initdb writes PG_VERSION first of all, so only a marker
 * written once initdb finished tells a complete cluster); and on a terminal the first admin key is
 * printed there, with no file written (elsewhere it goes to a 0600 file: test/ops/service-process.test.ts).
 */
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs/promises';
import path from 'node:path';
import { after } from 'node:test';
import { CLUSTER_COMPLETE, freePort } from '../../src/db/embedded-postgres.ts';
import {
  ROOT,
  cleanUp,
  logLines,
  makeDataDir,
  serviceEnv,
  spawnService,
  startService,
  stop,
  withDeadline,
} from '../support/service-harness.ts';
import { test } from '../support/limited-test.ts';
import { eventually } from '../support/wait.ts';

after(cleanUp);

const exists = (file: string) =>
  fs.access(file).then(
    () => true,
    () => false,
  );

test(
  'a first start killed during initdb: the next start removes the half-made cluster and starts',
  { timeout: 120_000 },
  async () => {
    const dataDir = await makeDataDir();
    const cluster = path.join(dataDir, 'postgres');
    // Its own process group, so that kill -9 takes initdb (and what it runs) along, as a killed terminal would.
    const starting = spawnService({ SLIPWAY_DATA_DIR: dataDir, PORT: String(await freePort()) }, { group: true });
    await eventually(
      'initdb to begin (PG_VERSION in the new cluster)',
      async () => {
        assert.equal(starting.child.exitCode, null, `the service exited before initdb began: ${starting.stderr()}`);
        return exists(path.join(cluster, 'PG_VERSION'));
      },
      { seconds: 60, everyMs: 5, describe: () => starting.stderr() },
    );
    process.kill(-starting.child.pid!, 'SIGKILL');
    await starting.exited;
    assert.ok(await exists(path.join(cluster, 'PG_VERSION')), 'initdb had begun');
    assert.ok(!(await exists(path.join(cluster, CLUSTER_COMPLETE))), 'and had not finished');

    const service = await startService(dataDir, { LOG_LEVEL: 'info' });
    assert.ok(await exists(path.join(cluster, CLUSTER_COMPLETE)), 'the new cluster is marked complete');
    assert.ok(
      logLines(service.stdout()).some(
        (l) => l.level === 40 && /interrupted first start left half-made/.test(String(l.msg)),
      ),
      service.stdout(),
    );
    assert.deepEqual(await stop(service), { code: 0, signal: null }, service.stderr());

    // And a cluster that was complete is used again as it is, not made anew.
    const again = await startService(dataDir, { LOG_LEVEL: 'info' });
    assert.ok(!again.stdout().includes('initialising the embedded PostgreSQL cluster'), again.stdout());
    assert.deepEqual(await stop(again), { code: 0, signal: null });
  },
);

const hasScript = (() => {
  try {
    execFileSync('script', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
})();

test(
  'on a terminal the first admin key is printed there, and no key file is written',
  { timeout: 120_000, skip: hasScript ? false : 'needs script(1) for a pseudo-terminal' },
  async () => {
    const dataDir = await makeDataDir();
    const port = await freePort();
    // script(1) runs the service on a pseudo-terminal, as `npm start` in a shell does.
    const command = `exec ${JSON.stringify(process.execPath)} --import tsx src/main.ts`;
    const child = spawn('script', ['-qefc', command, '/dev/null'], {
      cwd: ROOT,
      env: serviceEnv({ SLIPWAY_DATA_DIR: dataDir, PORT: String(port), SLIPWAY_APPS_PORT: '0', LOG_LEVEL: 'warn' }),
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const exited = new Promise((resolve) => child.once('exit', resolve));
    try {
      await eventually(
        'the first admin key on the terminal ("Keep it now")',
        () => {
          assert.equal(child.exitCode, null, `the service exited without showing a key: ${output}`);
          return /Keep it now/.test(output);
        },
        { seconds: 60, describe: () => output },
      );
      assert.match(output, /admin API key:\s+slw_[A-Za-z0-9_-]{20,}\s/);
      assert.ok(
        !(await exists(path.join(dataDir, 'first-admin-key'))),
        'shown on the terminal, so not written to a file',
      );
    } finally {
      // The service's own pid is in its data directory lock: stop it as an operator would.
      const lock = JSON.parse(await fs.readFile(path.join(dataDir, 'slipway.lock'), 'utf8').catch(() => '{}')) as {
        pid?: number;
      };
      if (lock.pid) process.kill(lock.pid, 'SIGTERM');
      await withDeadline('exit', exited, 30_000);
    }
  },
);
