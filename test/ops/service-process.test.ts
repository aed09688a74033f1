/**
 * The real service as a user runs it (`npm start`): its own embedded PostgreSQL under the data
 * directory, the first-start key (in a 0600 file, since stdout here is not a terminal but a log
 * collector), graceful SIGTERM, data kept across restarts, recovery after a crash that left the
 * database server running, and a clear refusal of bad configuration.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe } from 'node:test';
import {
  STOP_DEADLINE_MS,
  alive,
  call,
  cleanUp,
  makeDataDir,
  postgresPid as postgresPidIn,
  spawnService,
  startService as startServiceOn,
  stop,
  withDeadline,
  type Service,
} from '../support/service-harness.ts';
import { eventually } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';

const BOOTSTRAP_KEY = 'slw_process_test_bootstrap_key_0123456789';
const KEY_LINE = /^\s+(slw_[A-Za-z0-9_-]{20,})\s*$/gm;

let dataDir: string;

/** Starts the service on the shared data directory and waits until /readyz answers 200. */
function startService(): Promise<Service> {
  return startServiceOn(dataDir, { SLIPWAY_BOOTSTRAP_API_KEY: BOOTSTRAP_KEY });
}

const postgresPid = () => postgresPidIn(dataDir);

before(async () => {
  dataDir = await makeDataDir();
});

// Stragglers: every service this file started, then a database server one of them may have left.
after(cleanUp);

describe('the service process', { timeout: 300_000 }, () => {
  let adminKey: string;
  let listenerId: string;
  let deploymentId: string;

  test('first start: ready, hands an admin key over in a 0600 file (not in the logs), serves real HTTP, stops cleanly on SIGTERM', async () => {
    const service = await startService();
    assert.deepEqual(
      [...service.stdout().matchAll(KEY_LINE)],
      [],
      `stdout is not a terminal: no key among the logs, stdout was:\n${service.stdout()}`,
    );
    const keyFile = path.join(dataDir, 'first-admin-key');
    assert.equal((await fs.stat(keyFile)).mode & 0o777, 0o600, "only the service's user can read the key file");
    adminKey = (await fs.readFile(keyFile, 'utf8')).trim();
    assert.match(adminKey, /^slw_[A-Za-z0-9_-]{20,}$/);
    assert.ok(!service.stdout().includes(adminKey), 'the key itself never reaches the log');
    const told = service
      .stdout()
      .split('\n')
      .filter((line) => line.includes(keyFile));
    assert.equal(told.length, 1, `one log line names the key file, stdout was:\n${service.stdout()}`);
    assert.equal(JSON.parse(told[0]!).level, 40, 'at warn, so that LOG_LEVEL=warn still shows it');
    assert.notEqual(adminKey, BOOTSTRAP_KEY);

    assert.equal((await fetch(`${service.base}/healthz`)).status, 200);
    assert.equal((await call(service, 'GET', '/v2/deployments', 'slw_wrong_key_000000000000000000')).status, 401);
    assert.equal((await call(service, 'GET', '/v2/deployments', adminKey)).status, 200, 'the printed key works');
    assert.equal(
      (await call(service, 'GET', '/v2/deployments', BOOTSTRAP_KEY)).status,
      200,
      'the configured key works',
    );

    const listener = await call(service, 'POST', '/v2/listeners', adminKey, {
      compute_type: 'k8s',
      compute_id: 'prod-eu-1',
      compute_config: { k8s_namespaces: ['agents'] },
    });
    assert.equal(listener.status, 201, JSON.stringify(listener.body));
    listenerId = listener.body.id;
    const deployment = await call(service, 'POST', '/v2/deployments', adminKey, {
      name: 'survivor',
      source: 'external_container',
      source_config: { listener_id: listenerId },
      source_revision_config: { image_uri: 'registry.example.com/survivor:1.0.0' },
      secrets: [{ name: 'TOKEN', value: 'kept-across-restarts' }],
    });
    assert.equal(deployment.status, 201, JSON.stringify(deployment.body));
    deploymentId = deployment.body.id;

    const pgPid = await postgresPid();
    assert.ok(pgPid !== null && alive(pgPid), 'the embedded PostgreSQL runs under the data directory');
    const exit = await stop(service, 'SIGTERM');
    assert.deepEqual(exit, { code: 0, signal: null }, service.stderr());
    await eventually('SIGTERM to stop the embedded PostgreSQL too', () => !alive(pgPid));
  });

  test('second start: the data is still there and no new key is printed', async () => {
    assert.ok(adminKey && deploymentId, 'needs the first start');
    const keyFile = path.join(dataDir, 'first-admin-key');
    const before = (await fs.stat(keyFile)).mtimeMs;
    const service = await startService();
    assert.deepEqual([...service.stdout().matchAll(KEY_LINE)], [], `no key printed, stdout was:\n${service.stdout()}`);
    assert.equal((await fs.stat(keyFile)).mtimeMs, before, 'no new key was made');
    const deployment = await call(service, 'GET', `/v2/deployments/${deploymentId}`, adminKey);
    assert.equal(deployment.status, 200);
    assert.equal(deployment.body.name, 'survivor');
    assert.deepEqual(deployment.body.secrets, [{ name: 'TOKEN', value: '********' }]);
    assert.equal((await call(service, 'GET', `/v2/listeners/${listenerId}`, adminKey)).body.compute_id, 'prod-eu-1');
    const revisions = await call(service, 'GET', `/v2/deployments/${deploymentId}/revisions`, BOOTSTRAP_KEY);
    assert.equal(revisions.body.resources.length, 1);
    // A write after the restart works too.
    const patched = await call(service, 'PATCH', `/v2/deployments/${deploymentId}`, adminKey, {
      source_revision_config: { image_uri: 'registry.example.com/survivor:1.1.0' },
    });
    assert.equal(patched.status, 200, JSON.stringify(patched.body));
    const exit = await stop(service, 'SIGTERM');
    assert.deepEqual(exit, { code: 0, signal: null }, service.stderr());
  });

  test('after a SIGKILL that leaves PostgreSQL running, the next start stops it and keeps the data', async () => {
    assert.ok(adminKey && deploymentId, 'needs the first start');
    const crashed = await startService();
    const leftover = await postgresPid();
    assert.ok(leftover !== null);
    const exit = await stop(crashed, 'SIGKILL');
    assert.equal(exit.signal, 'SIGKILL');
    assert.ok(alive(leftover), 'the crash left the database server running, holding the data directory');
    const lock = JSON.parse(await fs.readFile(path.join(dataDir, 'slipway.lock'), 'utf8'));
    assert.equal(lock.pid, crashed.child.pid, 'and its data directory lock, naming a process that is gone');

    const service = await startService();
    await eventually('the leftover server to be stopped', () => !alive(leftover));
    const warned = service
      .stdout()
      .split('\n')
      .filter((line) => line.includes('left running by an earlier crash'));
    assert.equal(warned.length, 1, service.stdout());
    assert.equal(warned[0]!.match(/"pid":/g)?.length, 1, `one pid key per line (the logger's own): ${warned[0]}`);
    assert.equal(JSON.parse(warned[0]!).postgresPid, leftover);
    const now = await postgresPid();
    assert.ok(now !== null && now !== leftover && alive(now), 'a new server holds the data directory');
    assert.deepEqual([...service.stdout().matchAll(KEY_LINE)], [], 'still no new key');
    const deployment = await call(service, 'GET', `/v2/deployments/${deploymentId}`, adminKey);
    assert.equal(deployment.status, 200);
    assert.equal(
      deployment.body.source_revision_config.image_uri,
      'registry.example.com/survivor:1.1.0',
      'the write made before the crash is kept',
    );
    assert.equal(
      (await call(service, 'GET', `/v2/deployments/${deploymentId}/revisions`, adminKey)).body.resources.length,
      2,
    );

    const stopped = await stop(service, 'SIGTERM');
    assert.deepEqual(stopped, { code: 0, signal: null }, service.stderr());
    await eventually('the database server to be gone', () => !alive(now));
  });

  test('an invalid configuration exits non-zero with a message naming the variable', async () => {
    for (const [name, value] of [
      ['PORT', 'abc'],
      ['LOG_LEVEL', 'loud'],
      ['DATABASE_URL', 'mysql://localhost/x'],
    ] as const) {
      const service = spawnService({ SLIPWAY_DATA_DIR: dataDir, LOG_LEVEL: 'warn', [name]: value });
      const exit = await withDeadline(`exit with ${name}=${value}`, service.exited, STOP_DEADLINE_MS);
      assert.notEqual(exit.code, 0, `${name}=${value} must not start`);
      assert.equal(exit.signal, null);
      assert.match(service.stderr(), new RegExp(`\\b${name}\\b`), `${name}=${value}: stderr was ${service.stderr()}`);
      assert.ok(!/\n\s+at /.test(service.stderr()), 'a message, not a stack trace');
    }
    // Replicas on one database must share the key: each generating its own would corrupt the others'.
    const keyless = spawnService({
      SLIPWAY_DATA_DIR: dataDir,
      LOG_LEVEL: 'warn',
      DATABASE_URL: 'postgres://slipway@127.0.0.1:1/slipway',
    });
    const exit = await withDeadline('exit with DATABASE_URL and no key', keyless.exited, STOP_DEADLINE_MS);
    assert.deepEqual(exit, { code: 2, signal: null });
    assert.match(
      keyless.stderr(),
      /^slipway: invalid configuration: SLIPWAY_ENCRYPTION_KEY: is required with DATABASE_URL/,
    );
  });
});
