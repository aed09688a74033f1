/**
 * Attacker's review of the teardown fix (issue 33, item 0): ways the service could still remove what an
 * app can write while something of the app runs.
 *
 * 1. A deletion that comes while a scale-down is stopping an instance: the supervisor takes the leaving
 *    instance out of its list before it has stopped, so a teardown's stop of the supervisor did not wait
 *    for it, and the data directory went while that instance (ignoring SIGTERM for the whole drain
 *    time) still ran and wrote it.
 * 2. Without a sandbox and without cgroups (an ordinary user's host without delegated cgroups), every
 *    command still gets a "group" (the do-nothing one), so the runner took its exit for the end of
 *    every process and never looked at the process group: what a build or app left behind in its group
 *    ran on while its tree was removed.
 * 3. (Known, not fixed here) Without a sandbox and without cgroups a process that leaves the group with
 *    setsid cannot be followed at all.
 * 4. A deploy's pruning of old revisions removed an interrupted revision's build directory while its
 *    build was still being stopped (the worker's job for it had not ended).
 * 5. As an ordinary user (service and apps one user to the kernel) a directory the app made unreadable
 *    made every removal of its tree fail, and so its deletion, on every pass.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe } from 'node:test';
import { startProcess } from '../../src/dataplane/process-runner.ts';
import { createResourceControl, type ResourceControl } from '../../src/dataplane/resource-limits.ts';
import { createSandbox } from '../../src/dataplane/sandbox.ts';
import {
  makeCanary,
  pathExists,
  processesMarked,
  revisionLog,
  startTestService,
  uploadApp,
  waitForRevision,
  watchRemovalRace,
  type Canary,
  type TestService,
} from '../dataplane/data-plane-harness.ts';
import { eventually } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';

const logger = { info: () => undefined, warn: () => undefined };
const PATH = '/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin';
const CANARY_FILES = 51;

/**
 * A worker that ignores SIGTERM (noting it in `termed`) and keeps writing its tree, swapping its
 * directories for links to a canary directory of the host, until SIGKILL.
 */
const STUBBORN = String.raw`
const fs = require('node:fs');
const path = require('node:path');
const [base, target] = process.argv.slice(2);
const names = Array.from({ length: 20 }, (_, i) => 'd' + i);
for (const name of names) {
  fs.mkdirSync(path.join(base, name, 'inner'), { recursive: true });
  for (let f = 0; f < 3; f++) fs.writeFileSync(path.join(base, name, 'inner', 'f' + f), 'x');
}
fs.writeFileSync(path.join(base, 'started'), String(process.pid));
process.on('SIGTERM', () => {
  try { fs.writeFileSync(path.join(base, 'termed'), '1'); } catch {}
});
let n = 0;
setInterval(() => {
  for (const name of names) {
    const dir = path.join(base, name);
    try {
      fs.renameSync(dir, dir + '.away');
      fs.symlinkSync(target, dir);
      fs.unlinkSync(dir);
      fs.renameSync(dir + '.away', dir);
    } catch {}
  }
  try { fs.writeFileSync(path.join(base, 'w' + (n++ % 50)), 'x'); } catch {}
}, 2);
`;

describe('a deletion during a scale-down', () => {
  let service: TestService;
  let canary: Canary;

  before(async () => {
    // A long drain: a leaving instance that ignores SIGTERM runs this long before its SIGKILL. Without
    // bubblewrap, whose outer process dies of the SIGTERM and takes its whole sandbox with it at once
    // (--die-with-parent), so that there the window is only the time the kernel takes to end it.
    service = await startTestService({ SLIPWAY_DRAIN_SECONDS: '20', SLIPWAY_SANDBOX: 'none' });
    canary = await makeCanary(CANARY_FILES);
  });
  after(async () => {
    await service?.close();
    await canary?.remove();
  });

  test('removes the data directory only after the instance being scaled away is gone', async () => {
    const marker = `stubborn-${randomBytes(6).toString('hex')}`;
    const tarball = await uploadApp(service, {
      'package.json': JSON.stringify({ name: 'scaled-away', private: true }),
      'stubborn.cjs': STUBBORN,
      'slipway.json': JSON.stringify({
        install: null,
        build: null,
        health_check_path: '/healthz',
        start: `node -e "require('node:http').createServer((q, s) => s.end('ok')).listen(process.env.PORT, process.env.HOST)"`,
        worker: `exec node stubborn.cjs "$SLIPWAY_DATA_DIR/tree" "$TARGET_DIR" ${marker}`,
      }),
    });
    const created = await service.api('POST', '/v2/deployments', {
      name: 'scaled-away',
      source: 'internal_source',
      source_config: { resource_spec: { queue_min_scale: 1 } },
      source_revision_config: { source_tarball_path: tarball, framework_config_path: 'slipway.json' },
      secrets: [{ name: 'TARGET_DIR', value: canary.dir }],
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id: string = created.body.id;
    const revision = await waitForRevision(service, id, created.body.latest_revision_id);
    assert.equal(revision.status, 'DEPLOYED', JSON.stringify(revision));
    const tree = path.join(service.dataDir, 'deployments', id, 'data', 'tree');
    await eventually('the worker to start', () => pathExists(path.join(tree, 'started')));

    // The worker is scaled away: it gets SIGTERM, ignores it, and has the drain time before its SIGKILL.
    const down = await service.api('PATCH', `/v2/deployments/${id}`, {
      source_config: { resource_spec: { queue_min_scale: 0 } },
    });
    assert.equal(down.status, 200, JSON.stringify(down.body));
    await eventually('the worker to be told to stop', () => pathExists(path.join(tree, 'termed'))).catch(
      async (error) => {
        const lines = await revisionLog(service, id, revision.id, 'deploy');
        const events = await service.api('GET', `/v2/deployments/${id}/events?limit=100`);
        throw new Error(`${String(error)}\n${lines.slice(-20).join('\n')}\n${JSON.stringify(events.body)}`);
      },
    );

    const removed = await service.api('DELETE', `/v2/deployments/${id}`);
    assert.equal(removed.status, 204);
    const watch = watchRemovalRace(marker, path.join(tree, 'started'));
    await eventually(
      'the deletion to be confirmed',
      async () => (await service.api('GET', `/v2/deployments/${id}`)).status === 404,
    );
    assert.deepEqual((await watch.stop()).slice(0, 3), [], 'the removal raced the instance being scaled away');
    assert.deepEqual(await processesMarked(marker), [], 'the scaled-away instance still runs after the deletion');
    await canary.assertIntact('after the deletion');
  });

  test("a revision deployed while an interrupted one's build is being stopped prunes its files only after", async () => {
    const marker = `stubborn-${randomBytes(6).toString('hex')}`;
    const quick = {
      'package.json': JSON.stringify({ name: 'pruned', private: true }),
      'slipway.json': JSON.stringify({
        install: null,
        build: null,
        health_check_path: '/',
        start: `node -e "require('node:http').createServer((q, s) => s.end('ok')).listen(process.env.PORT, process.env.HOST)"`,
      }),
    };
    // The build's shell ignores SIGTERM and leaves a writer in a session of its own that holds the
    // output open: its stop takes the grace time, then the wait for the output, then the cgroup's end.
    const slow = await uploadApp(service, {
      ...quick,
      'stubborn.cjs': STUBBORN,
      'slipway.json': JSON.stringify({
        install: null,
        build: `trap '' TERM; setsid node stubborn.cjs tree "$TARGET_DIR" ${marker} & while :; do sleep 1; done`,
        start: 'node -e 0',
      }),
    });
    const second = await uploadApp(service, quick);
    const created = await service.api('POST', '/v2/deployments', {
      name: 'pruned',
      source: 'internal_source',
      source_revision_config: { source_tarball_path: slow, framework_config_path: 'slipway.json' },
      secrets: [{ name: 'TARGET_DIR', value: canary.dir }],
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id: string = created.body.id;
    const first: string = created.body.latest_revision_id;
    const dir = path.join(service.dataDir, 'revisions', first);
    const started = path.join(dir, 'app', 'src', 'tree', 'started');
    await eventually('the build to start writing', () => pathExists(started));
    const watch = watchRemovalRace(marker, started);
    const interrupted = await service.api('POST', `/v2/deployments/${id}/revisions/${first}/interrupt`);
    assert.equal(interrupted.status, 200, JSON.stringify(interrupted.body));
    const patched = await service.api('PATCH', `/v2/deployments/${id}`, {
      source_revision_config: { source_tarball_path: second },
    });
    assert.equal(patched.status, 200, JSON.stringify(patched.body));
    const next = await waitForRevision(service, id, patched.body.latest_revision_id);
    assert.equal(next.status, 'DEPLOYED', JSON.stringify(next));
    await eventually('the interrupted revision files to be removed', async () => !(await pathExists(dir)));
    assert.deepEqual((await watch.stop()).slice(0, 3), [], "the pruning raced the interrupted revision's build");
    assert.deepEqual(await processesMarked(marker), []);
    await canary.assertIntact('after the pruning');
  });
});

describe('without a sandbox and without cgroups', () => {
  let scratch: string;
  let control: ResourceControl;

  before(async () => {
    scratch = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-teardown-2-bare-'));
    await fs.chmod(scratch, 0o711);
    // No cgroups (an empty directory as their root), as on a host without delegated cgroups.
    control = await createResourceControl({ root: path.join(scratch, 'no-cgroups'), logger });
    assert.equal(control.kind, 'none');
  });
  after(async () => {
    await control.dispose();
    await fs.rm(scratch, { recursive: true, force: true });
  });

  /** Runs `command` with limits, as every build and app instance is run, to its own end. */
  async function exitOf(command: (marker: string) => string): Promise<{ marker: string; alive: number[] }> {
    const sandbox = await createSandbox({ mode: 'none', dataDir: path.join(scratch, 'data'), limits: control, logger });
    const appDir = await fs.mkdtemp(path.join(scratch, 'app-'));
    await fs.mkdir(path.join(appDir, 'src'));
    await sandbox.ownTree(appDir);
    const marker = `left-${randomBytes(6).toString('hex')}`;
    const output: string[] = [];
    const running = startProcess({
      sandbox,
      run: {
        purpose: 'build',
        command: command(marker),
        appDir,
        limits: { memoryBytes: 256 * 1024 ** 2, cpu: 1, pids: 256 },
        name: `bare-${marker}`,
      },
      env: { PATH, HOME: '/tmp' },
      output: { write: (_stream, chunk) => output.push(String(chunk)), system: (line) => output.push(line) },
    });
    const exit = await running.exited;
    // The moment its exit counts, what it could write may be removed: nothing of it may run now.
    const alive = await processesMarked(marker);
    return { marker, alive: exit.leftover ? [] : alive };
  }

  const child = (marker: string) =>
    `node -e "process.on('SIGTERM', () => {}); setInterval(() => {}, 1000)" ${marker} </dev/null >/dev/null 2>&1`;

  test('a command that exits leaving a child in its process group has it gone when its exit counts', async () => {
    const { marker, alive } = await exitOf(
      (m) => `${child(m)} & while [ -z "$(pgrep -f ${m})" ]; do sleep 0.05; done; exit 3`,
    );
    try {
      assert.deepEqual(alive, [], 'its child still ran when the exit counted (and said nothing was left)');
    } finally {
      for (const pid of await processesMarked(marker)) process.kill(pid, 'SIGKILL');
    }
  });

  test(
    'a child that left the process group with setsid is gone (or reported left) when the exit counts',
    { todo: 'nothing can follow it without a PID namespace or a cgroup: see the report of this review' },
    async () => {
      const { marker, alive } = await exitOf(
        (m) => `setsid ${child(m)} & while [ -z "$(pgrep -f ${m})" ]; do sleep 0.05; done; exit 3`,
      );
      try {
        assert.deepEqual(alive, [], 'the escaped child still ran when the exit counted');
      } finally {
        for (const pid of await processesMarked(marker)) process.kill(pid, 'SIGKILL');
      }
    },
  );
});

describe("a deployment's tree removed by a service that is not root", () => {
  let scratch: string;

  before(async () => {
    scratch = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-teardown-2-user-'));
    await fs.chmod(scratch, 0o755);
  });
  after(async () => {
    await fs.rm(scratch, { recursive: true, force: true });
  });

  test('goes even when the app left a directory in it unreadable', async (t) => {
    // As an ordinary user the service and its apps are one user to the kernel: the app's chmod 000 on a
    // directory of its data keeps that user out of it, and a removal that fails makes the deletion fail
    // on every pass (and with it the passes' other work) for as long as the service runs.
    const uid = process.getuid?.() === 0 ? 65534 : process.getuid?.();
    const gid = process.getuid?.() === 0 ? 65534 : process.getgid?.();
    if (uid === undefined || gid === undefined) return t.skip('no users here');
    const tree = path.join(scratch, 'data');
    const script = [
      `const fs = require('node:fs');`,
      `fs.mkdirSync(${JSON.stringify(path.join(tree, 'locked', 'inner'))}, { recursive: true });`,
      `fs.writeFileSync(${JSON.stringify(path.join(tree, 'locked', 'inner', 'f'))}, 'x');`,
      `fs.chmodSync(${JSON.stringify(path.join(tree, 'locked', 'inner'))}, 0o000);`,
      `fs.chmodSync(${JSON.stringify(path.join(tree, 'locked'))}, 0o000);`,
    ].join('\n');
    if (process.getuid?.() === 0) await fs.chown(scratch, uid, gid);
    const { execFile } = await import('node:child_process');
    const run = (file: string, args: string[], cwd = scratch) =>
      new Promise<{ code: number; output: string }>((resolve) => {
        execFile(file, args, { uid, gid, cwd }, (error, stdout, stderr) =>
          resolve({ code: error ? Number(error.code ?? 1) : 0, output: stdout + stderr }),
        );
      });
    const made = await run(process.execPath, ['-e', script]);
    assert.equal(made.code, 0, made.output);
    // The service's removal, as the service's user.
    const removal = path.resolve('src/dataplane/build-snapshot.ts');
    const removed = await run(
      process.execPath,
      [
        '--import',
        'tsx',
        '-e',
        `import(${JSON.stringify(removal)}).then((m) => m.removeTree(${JSON.stringify(tree)}))`,
      ],
      process.cwd(),
    );
    assert.equal(removed.code, 0, `the removal failed: ${removed.output}`);
    assert.equal(await pathExists(tree), false, 'the tree is gone');
  });
});
