/**
 * slirp4netns that ends before it is ready (src/dataplane/sandbox-network.ts): as an ordinary user it
 * now and then exits 1 right after its child sent the tap device. The attach tries again, says each
 * retry, and gives up with slirp4netns's own words after its last try. The namespace is a real one
 * (`unshare --net`, its loopback up); the slirp4netns that ends early is a wrapper that exits as it does
 * for its first N starts, then runs the real one.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before } from 'node:test';
import { attachNetwork } from '../../src/dataplane/sandbox-network.ts';
import { findExecutable } from '../../src/dataplane/executables.ts';
import { test } from '../support/limited-test.ts';
import { eventually } from '../support/wait.ts';

const root = process.getuid?.() === 0;
const slirp = await findExecutable('slirp4netns');
const unshare = await findExecutable('unshare');
const skip = !root ? 'needs root to make a network namespace here' : slirp === null ? 'no slirp4netns' : false;

let dir: string;
let holder: ChildProcess | null = null;

before(async () => {
  dir = await fs.mkdtemp(path.join(os.tmpdir(), 'slirp-retry-'));
});

after(async () => {
  holder?.kill('SIGKILL');
  await fs.rm(dir, { recursive: true, force: true });
});

/** A slirp4netns that exits 1 (as the real one does) for its first `failures` starts, then is the real one. */
async function flakySlirp(failures: number): Promise<string> {
  const counter = path.join(dir, `count-${failures}`);
  const wrapper = path.join(dir, `slirp-${failures}.sh`);
  await fs.writeFile(
    wrapper,
    `#!/bin/sh\nn=$(cat ${counter} 2>/dev/null || echo 0)\necho $((n + 1)) > ${counter}\n` +
      `if [ "$n" -lt ${failures} ]; then echo 'sent tapfd=7 for tap0' >&2; exit 1; fi\nexec ${slirp} "$@"\n`,
    { mode: 0o755 },
  );
  return wrapper;
}

/** A process in a network namespace of its own, its loopback up. */
async function namespace(): Promise<number> {
  holder = spawn(unshare!, ['--net', 'sh', '-c', 'ip link set lo up && exec sleep 300'], { stdio: 'ignore' });
  const pid = holder.pid!;
  await eventually('the namespace has its loopback', async () =>
    (await fs.readFile(`/proc/${pid}/net/fib_trie`, 'utf8').catch(() => '')).includes('127.0.0.1') ? true : null,
  );
  return pid;
}

test('an early exit of slirp4netns is tried again, and each retry is said', { skip }, async () => {
  const pid = await namespace();
  const retries: string[] = [];
  const attached = await attachNetwork({ binary: await flakySlirp(1), socketDir: dir }, pid, null, (r) =>
    retries.push(r),
  );
  try {
    assert.equal(retries.length, 1);
    assert.match(retries[0]!, /exited \(code 1\) before it was ready: sent tapfd=7 for tap0; trying again \(2 of 3\)/);
    // The real one attached: the namespace has its tap device.
    const links = await fs.readFile(`/proc/${pid}/net/dev`, 'utf8');
    assert.match(links, /tap0/);
  } finally {
    await attached.close();
  }
});

test('slirp4netns that keeps ending early fails the attach after its last try', { skip }, async () => {
  const pid = await namespace();
  const retries: string[] = [];
  await assert.rejects(
    attachNetwork({ binary: await flakySlirp(5), socketDir: dir }, pid, null, (r) => retries.push(r)),
    /slirp4netns exited \(code 1\) before it was ready: sent tapfd=7 for tap0/,
  );
  assert.equal(retries.length, 2);
});
