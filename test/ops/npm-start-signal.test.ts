/**
 * `kill <pid of npm start>` stops the whole service (issue 23, defect 9): npm forwards the SIGTERM to
 * its script, and the script is the server itself (exec), not a shell that dies and leaves the server,
 * its PostgreSQL and its apps re-parented and running, holding the data directory.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs/promises';
import { after } from 'node:test';
import { freePort } from '../../src/db/embedded-postgres.ts';
import {
  ROOT,
  START_DEADLINE_MS,
  STOP_DEADLINE_MS,
  alive,
  cleanUp,
  makeDataDir,
  postgresPid,
  serviceEnv,
  withDeadline,
} from '../support/service-harness.ts';
import { eventually } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';

/** The processes of a process group, from /proc (Linux). */
async function processGroup(pgid: number): Promise<number[]> {
  const pids: number[] = [];
  for (const entry of await fs.readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = await fs.readFile(`/proc/${entry}/stat`, 'utf8').catch(() => null);
    if (stat === null) continue;
    // pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses, so read after its last ')'.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (Number(fields[2]) === pgid) pids.push(Number(entry));
  }
  return pids;
}

let group: number | undefined;
after(async () => {
  if (group !== undefined) {
    try {
      process.kill(-group, 'SIGKILL');
    } catch {
      // Already gone, as it should be.
    }
  }
  await cleanUp();
});

test(
  'SIGTERM to the npm start process stops the server and its PostgreSQL; nothing is left',
  { timeout: 180_000 },
  async () => {
    const dataDir = await makeDataDir();
    const port = await freePort();
    // Its own process group, so that whatever it leaves behind can be found (and killed after the test).
    const npm = spawn('npm', ['start'], {
      cwd: ROOT,
      env: serviceEnv({ SLIPWAY_DATA_DIR: dataDir, PORT: String(port), LOG_LEVEL: 'warn', SLIPWAY_ROLES: 'api' }),
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    group = npm.pid!;
    let output = '';
    npm.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    npm.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const exited = new Promise<void>((resolve) => npm.once('exit', () => resolve()));

    await eventually(
      'npm start to be ready',
      async () => {
        if (npm.exitCode !== null) assert.fail(`npm start exited: ${output}`);
        return fetch(`http://127.0.0.1:${port}/readyz`, { signal: AbortSignal.timeout(2_000) }).then(
          (res) => res.status === 200,
          () => false,
        );
      },
      { seconds: START_DEADLINE_MS / 1000, everyMs: 200, describe: () => output },
    );
    const postgres = await postgresPid(dataDir);
    assert.ok(postgres !== null && alive(postgres), 'the embedded PostgreSQL runs');
    const server: number = postgres;
    const running = await processGroup(group);
    assert.ok(running.length >= 2, `npm and the server run: ${running.join(' ')}`);

    process.kill(npm.pid!, 'SIGTERM'); // the npm process only, as `kill <pid>` does
    await withDeadline('npm exits after SIGTERM', exited, STOP_DEADLINE_MS);
    const pgid = group;
    let left = await processGroup(pgid);
    await eventually(
      'every process of npm start, its PostgreSQL too, to end',
      async () => {
        left = await processGroup(pgid);
        return left.length === 0 && !alive(server);
      },
      {
        seconds: STOP_DEADLINE_MS / 1000,
        everyMs: 200,
        describe: () => `left running: ${left.join(' ')}; PostgreSQL alive: ${alive(server)}\n${output}`,
      },
    );
    const answered = await fetch(`http://127.0.0.1:${port}/readyz`, { signal: AbortSignal.timeout(2_000) }).then(
      () => true,
      () => false,
    );
    assert.equal(answered, false, 'nothing answers on its port');
  },
);
