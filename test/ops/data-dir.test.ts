/**
 * One data directory, one process (docs/operations.md), and what an operator sees at start: a second `npm start` on a data directory in use refuses and names the first, which keeps serving;
 * the embedded server dying under the service makes it exit non-zero; a port in use is one line naming
 * PORT; HOST=0.0.0.0 without SLIPWAY_PUBLIC_URL and running as root are said at start; a changed
 * SLIPWAY_BOOTSTRAP_API_KEY revokes the previous one.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, describe } from 'node:test';
import { DataDirInUseError, LOCK_FILE, lockDataDir } from '../../src/db/data-dir-lock.ts';
import { freePort } from '../../src/db/embedded-postgres.ts';
import {
  alive,
  call,
  cleanUp,
  logLines,
  makeDataDir,
  postgresPid,
  runToExit,
  startService,
  stop,
  withDeadline,
  type Service,
} from '../support/service-harness.ts';
import { eventually } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';

const KEY_A = 'slw_ops_bootstrap_key_a_0123456789';
const KEY_B = 'slw_ops_bootstrap_key_b_0123456789';
const quiet = { warn: () => undefined };

after(cleanUp);

/** A pid that surely belonged to a process that is gone now. */
async function deadPid(): Promise<number> {
  const child = spawn(process.execPath, ['-e', '']);
  await new Promise((resolve) => child.once('exit', resolve));
  return child.pid!;
}

describe('the data directory lock', () => {
  test('a second lock in a live process is refused, naming the process', async () => {
    const dir = await makeDataDir();
    const lock = await lockDataDir(dir, { logger: quiet, command: 'service' });
    await assert.rejects(lockDataDir(dir, { logger: quiet, command: 'service' }), (error: unknown) => {
      assert.ok(error instanceof DataDirInUseError);
      assert.match(error.message, new RegExp(`^SLIPWAY_DATA_DIR: .*pid ${process.pid}\\b`));
      return true;
    });
    await lock.release();
    await assert.rejects(fs.access(path.join(dir, LOCK_FILE)), 'released: the file is gone');
    const again = await lockDataDir(dir, { logger: quiet, command: 'service' });
    await again.release();
  });

  test('a lock whose process is gone, or whose pid now names another process, is taken over', async () => {
    const dir = await makeDataDir();
    const file = path.join(dir, LOCK_FILE);
    const stale = [
      { pid: await deadPid(), started: 1, boot: null, host: os.hostname(), command: 'service', since: 'earlier' },
      // The pid is alive (this very process) but started at another time: a reused pid.
      { pid: process.pid, started: 1, boot: null, host: os.hostname(), command: 'service', since: 'earlier' },
    ];
    for (const owner of stale) {
      await fs.writeFile(file, JSON.stringify(owner));
      const warnings: string[] = [];
      const lock = await lockDataDir(dir, {
        logger: { warn: (_: unknown, message?: string) => void warnings.push(String(message)) },
        command: 'service',
      });
      assert.equal(
        JSON.parse(await fs.readFile(file, 'utf8')).since !== 'earlier',
        true,
        'the lock names this process now',
      );
      assert.match(warnings.join('\n'), /gone; taking it over/);
      await lock.release();
    }
    await fs.writeFile(file, 'not json');
    const lock = await lockDataDir(dir, { logger: quiet, command: 'service' });
    await lock.release();
  });

  test('of many takers at once exactly one gets it', async () => {
    const dir = await makeDataDir();
    await fs.writeFile(
      path.join(dir, LOCK_FILE),
      JSON.stringify({
        pid: await deadPid(),
        started: 1,
        boot: null,
        host: os.hostname(),
        command: 'service',
        since: 'earlier',
      }),
    );
    // In-process takers look alike (same pid): each but the winner must find the lock taken.
    const results = await Promise.allSettled(
      Array.from({ length: 8 }, () => lockDataDir(dir, { logger: quiet, command: 'service' })),
    );
    assert.equal(
      results.filter((r) => r.status === 'fulfilled').length,
      1,
      JSON.stringify(results.map((r) => r.status)),
    );
    for (const r of results)
      if (r.status === 'rejected') assert.ok(r.reason instanceof DataDirInUseError, String(r.reason));
    for (const r of results) if (r.status === 'fulfilled') await r.value.release();
  });
});

describe('the service on one data directory', { timeout: 240_000 }, () => {
  let dataDir: string;
  let first: Service;

  test('a second start on a data directory in use refuses, naming the first; the first keeps serving', async () => {
    dataDir = await makeDataDir();
    first = await startService(dataDir, { SLIPWAY_BOOTSTRAP_API_KEY: KEY_A, HOST: '0.0.0.0' });
    const server = await postgresPid(dataDir);
    assert.ok(server !== null && alive(server));

    const second = await runToExit({
      SLIPWAY_DATA_DIR: dataDir,
      PORT: String(await freePort()),
      SLIPWAY_BOOTSTRAP_API_KEY: KEY_A,
    });
    assert.equal(second.code, 1, second.stderr);
    assert.match(
      second.stderr,
      new RegExp(`SLIPWAY_DATA_DIR: ${dataDir} is in use by another Slipway process \\(pid ${first.child.pid},`),
    );
    assert.equal(second.stderr.trim().split('\n').length, 1, `one line: ${second.stderr}`);

    assert.ok(alive(server), "the first instance's database server was left alone");
    assert.equal(await postgresPid(dataDir), server);
    const listener = await call(first, 'POST', '/v2/listeners', KEY_A, {
      compute_type: 'k8s',
      compute_id: 'still-serving',
      compute_config: { k8s_namespaces: ['agents'] },
    });
    assert.equal(listener.status, 201, JSON.stringify(listener.body));
    assert.equal((await call(first, 'GET', `/v2/listeners/${listener.body.id}`, KEY_A)).status, 200);
  });

  test('HOST=0.0.0.0 without SLIPWAY_PUBLIC_URL and running as root are said at start', () => {
    const warnings = logLines(first.stdout())
      .filter((l) => l.level === 40)
      .map((l) => String(l.msg));
    assert.ok(
      warnings.some((m) => /HOST is 0\.0\.0\.0 and SLIPWAY_PUBLIC_URL is not set.*http:\/\/0\.0\.0\.0:\d+/.test(m)),
      warnings.join('\n'),
    );
    if (process.getuid?.() === 0)
      assert.ok(
        warnings.some((m) => /running as root.*'postgres'/.test(m)),
        warnings.join('\n'),
      );
  });

  test('the embedded server dying under the service makes it exit non-zero', async () => {
    const server = (await postgresPid(dataDir))!;
    process.kill(server, 'SIGKILL');
    const exit = await withDeadline('exit after the database died', first.exited, 40_000);
    assert.deepEqual(exit, { code: 1, signal: null }, first.stdout());
    assert.ok(
      logLines(first.stdout()).some(
        (l) => l.level === 60 && /embedded PostgreSQL exited under the running service/.test(String(l.msg)),
      ),
    );
    await eventually('the killed database server to be gone', () => !alive(server));
  });

  test('a port in use: one line naming PORT, no stack trace, and the data directory is free again', async () => {
    const blocker = net.createServer();
    const port = await new Promise<number>((resolve) =>
      blocker.listen(0, '127.0.0.1', () => resolve((blocker.address() as net.AddressInfo).port)),
    );
    try {
      const refused = await runToExit({
        SLIPWAY_DATA_DIR: dataDir,
        PORT: String(port),
        SLIPWAY_BOOTSTRAP_API_KEY: KEY_A,
      });
      assert.equal(refused.code, 1, refused.stderr);
      assert.equal(
        refused.stderr,
        `slipway: cannot start: PORT: ${port} is already in use on 127.0.0.1 (another process listens there): stop it, or set PORT to a free port\n`,
      );
    } finally {
      blocker.close();
    }
    await assert.rejects(fs.access(path.join(dataDir, LOCK_FILE)), 'the refused start let the data directory go');
  });

  test('an apps port in use: one line naming SLIPWAY_APPS_PORT, and nothing of the service is left', async () => {
    const blocker = net.createServer();
    const appsPort = await new Promise<number>((resolve) =>
      blocker.listen(0, '127.0.0.1', () => resolve((blocker.address() as net.AddressInfo).port)),
    );
    try {
      const refused = await runToExit({
        SLIPWAY_DATA_DIR: dataDir,
        PORT: String(await freePort()),
        SLIPWAY_APPS_PORT: String(appsPort),
        SLIPWAY_BOOTSTRAP_API_KEY: KEY_A,
      });
      assert.equal(refused.code, 1, refused.stderr);
      assert.equal(
        refused.stderr,
        `slipway: cannot start: SLIPWAY_APPS_PORT: ${appsPort} is already in use on 127.0.0.1 (another process listens there): stop it, or set SLIPWAY_APPS_PORT to a free port\n`,
      );
    } finally {
      blocker.close();
    }
    await assert.rejects(fs.access(path.join(dataDir, LOCK_FILE)), 'the refused start let the data directory go');
  });

  test('a changed SLIPWAY_BOOTSTRAP_API_KEY revokes the previous one, and says so', async () => {
    const service = await startService(dataDir, { SLIPWAY_BOOTSTRAP_API_KEY: KEY_B, LOG_LEVEL: 'warn' });
    assert.equal((await call(service, 'GET', '/v2/deployments', KEY_B)).status, 200, 'the new key works');
    assert.equal((await call(service, 'GET', '/v2/deployments', KEY_A)).status, 401, 'the previous key no longer does');
    const revoked = logLines(service.stdout()).find((l) =>
      /SLIPWAY_BOOTSTRAP_API_KEY changed: revoked the previous bootstrap key/.test(String(l.msg)),
    );
    assert.ok(revoked, service.stdout());
    assert.deepEqual(
      revoked.revoked,
      [KEY_A.slice(0, (revoked.revoked as string[])[0]!.length)],
      'the log names the revoked key by its prefix only',
    );
    assert.deepEqual(await stop(service), { code: 0, signal: null }, service.stderr());
  });
});
