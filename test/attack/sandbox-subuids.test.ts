/**
 * Attacker's tests of a uid per deployment without root (issue 33, item 6): where the service's user
 * has a subordinate range (/etc/subuid and /etc/subgid, newuidmap), each deployment runs as a host uid
 * of its own from it, never the service's; where it has none (or runs with no_new_privs, as the
 * systemd unit's NoNewPrivileges= does), the start log says apps share the service's uid and why.
 *
 * What main did before: as an ordinary user every app ran as the service's own uid, so every tenant
 * shared its kernel counters (processes, inotify instances, message queues), and an app could signal
 * the processes the service runs in its sandbox (its forwarders), which are that uid too.
 *
 * The first part needs an ordinary user with a subordinate range and without no_new_privs (CI:
 * .ci/as-ordinary-user gives `slipway-ci` one and runs this file so); elsewhere it is skipped, saying so.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe } from 'node:test';
import { test } from '../support/limited-test.ts';
import { eventually } from '../support/wait.ts';
import { createAppUsers } from '../../src/dataplane/app-uids.ts';
import { removeTree, sealSnapshot } from '../../src/dataplane/build-snapshot.ts';
import { measureTrees } from '../../src/dataplane/disk-usage.ts';
import { startProcess, type RunningProcess } from '../../src/dataplane/process-runner.ts';
import { createResourceControl, type ResourceControl } from '../../src/dataplane/resource-limits.ts';
import { createSandbox, type Sandbox, type SandboxRun } from '../../src/dataplane/sandbox.ts';
import { probeSubordinateIds, type SubordinateIdsProbe } from '../../src/dataplane/subordinate-ids.ts';

const logger = { info: () => undefined, warn: () => undefined };
const PATH = '/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin';
const isRoot = process.getuid?.() === 0;

let scratch: string;
let limits: ResourceControl;
let probe: SubordinateIdsProbe;

before(async () => {
  scratch = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-subuids-'));
  await fs.chmod(scratch, 0o711);
  limits = await createResourceControl({ root: path.join(scratch, 'no-cgroups'), logger });
  probe = await probeSubordinateIds();
});

after(async () => {
  await limits?.dispose();
  // What a deployment's uid left is removed as the service removes it.
  if (probe?.ids) await removeTree(scratch, probe.ids).catch(() => undefined);
  await fs.rm(scratch, { recursive: true, force: true });
});

/** Starts `command` in `sandbox`; its output so far, and the process. */
function start(
  sandbox: Sandbox,
  purpose: SandboxRun['purpose'],
  command: string,
  dirs: { appDir: string; dataDir?: string },
) {
  const out = { text: '' };
  const running = startProcess({
    sandbox,
    run: { purpose, command, ...dirs, forwards: [], limits: null, name: `subuids-${process.pid}-${Math.random()}` },
    env: { PATH, HOME: '/home/app/home' },
    output: {
      write: (_stream, chunk) => void (out.text += String(chunk)),
      system: (line) => void (out.text += `${line}\n`),
    },
  });
  return { out, running };
}

/** Runs `command` to its end; its `key=value` lines. */
async function runTo(
  sandbox: Sandbox,
  command: string,
  dirs: { appDir: string; dataDir?: string },
  purpose: SandboxRun['purpose'] = 'app',
) {
  const { out, running } = start(sandbox, purpose, command, dirs);
  const exit = await running.exited;
  assert.equal(exit.code, 0, out.text);
  return new Map(
    out.text
      .split('\n')
      .filter((line) => line.includes('='))
      .map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)] as const),
  );
}

/** The host uids (real, effective) of the process whose command line holds `marker`, read from outside. */
async function hostUidsOf(marker: string): Promise<number[] | null> {
  for (const pid of await fs.readdir('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    const cmdline = await fs.readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
    if (!cmdline.split('\0').includes(marker)) continue;
    const status = await fs.readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
    const uids = /^Uid:\s+(\d+)\s+(\d+)/m.exec(status);
    if (uids) return [Number(uids[1]), Number(uids[2])];
  }
  return null;
}

/** What `what` finds, once it finds it; fails at once when the app exited (`said` ends with "exited"). */
function until<T>(what: () => Promise<T | null>, said: () => string): Promise<T> {
  return eventually<T>(
    "the app's process, by its marker",
    async () => {
      assert.ok(!said().includes('exited'), said());
      return what();
    },
    { everyMs: 50, describe: said },
  );
}

describe('as an ordinary user with a subordinate range', () => {
  let sandbox: Sandbox;
  let base: string;
  const given = new Map<string, number>();
  const deployments = ['a', 'b'].map((name) => ({ name, id: `deployment-${name}` }));
  const dirsOf = (name: string) => ({
    appDir: path.join(base, `${name}-app`),
    dataDir: path.join(base, `${name}-data`, 'data'),
  });
  const skip = () =>
    isRoot ? 'the service is root: SLIPWAY_APP_UIDS serves (test/attack/sandbox-3.test.ts)' : probe.problem;

  before(async () => {
    if (skip()) return;
    const ids = probe.ids!;
    base = await fs.mkdtemp(path.join(scratch, 'deployments-'));
    await fs.chmod(base, 0o711);
    const users = createAppUsers({
      range: ids.deployments,
      uidOf: async (id) => {
        if (!given.has(id)) given.set(id, ids.deployments.first + given.size);
        return given.get(id)!;
      },
      subordinate: probe,
    });
    sandbox = await createSandbox({
      mode: 'bwrap',
      dataDir: path.join(scratch, 'service-data'),
      limits,
      logger,
      users,
    });
    for (const { name, id } of deployments) {
      const { appDir, dataDir } = dirsOf(name);
      await fs.mkdir(path.join(appDir, 'src'), { recursive: true });
      await sandbox.ownTree(appDir, id);
      await fs.mkdir(path.dirname(dataDir), { mode: 0o711 });
      await fs.mkdir(dataDir, { mode: 0o700 });
      await sandbox.ownDir(dataDir, id);
    }
  });
  after(async () => {
    await sandbox?.dispose();
  });

  test('the start log says each deployment runs as a uid of the range', (t) => {
    if (skip()) return t.skip(skip()!);
    assert.match(
      sandbox.description,
      /a host uid of its own per deployment, from the service user's subordinate range/,
    );
    assert.ok(sandbox.networkIsolated, `no network of its own: ${sandbox.description}`);
  });

  test("two deployments' processes are two host uids of the range, neither the service's", async (t) => {
    if (skip()) return t.skip(skip()!);
    const running: RunningProcess[] = [];
    try {
      const seen: number[][] = [];
      for (const { name } of deployments) {
        const marker = `${name}-${process.pid}-marker`;
        const { out, running: app } = start(
          sandbox,
          'app',
          `exec sh -c 'while :; do sleep 1; done' ${marker}`,
          dirsOf(name),
        );
        running.push(app);
        void app.exited.then(() => (out.text += '\nexited'));
        seen.push(
          await until(
            () => hostUidsOf(marker),
            () => out.text,
          ),
        );
      }
      const [a, b] = seen as [number[], number[]];
      const service = process.getuid!();
      assert.equal(a[0], a[1]);
      assert.notEqual(a[0], b[0], 'both deployments ran as one host uid');
      for (const [uid] of [a, b]) {
        assert.notEqual(uid, service, "a deployment ran as the service's own uid");
        assert.ok(uid! >= probe.ids!.deployments.first && uid! < probe.ids!.range.first + probe.ids!.range.count);
      }
    } finally {
      for (const app of running) await app.stop(2_000);
    }
  });

  test("an app cannot signal the service's processes in its sandbox, nor make a user namespace", async (t) => {
    if (skip()) return t.skip(skip()!);
    const seen = await runTo(
      sandbox,
      [
        'echo uid=$(id -u)',
        // Its sandbox's init and shell are the service's user (root of the sandbox's namespace).
        'kill -0 1 2>/dev/null && echo init=signalled || echo init=refused',
        'kill -0 $PPID 2>/dev/null && echo shell=signalled || echo shell=refused',
        'unshare -U true 2>/dev/null && echo userns=made || echo userns=refused',
        'echo caps=$(grep "^CapEff:" /proc/self/status | cut -f2)',
        'touch /tmp/x && touch "$HOME/x" && echo writes=yes',
      ].join('\n'),
      dirsOf('a'),
    );
    assert.equal(seen.get('uid'), String(given.get('deployment-a')));
    assert.equal(seen.get('init'), 'refused', "the app signalled its sandbox's init");
    assert.equal(seen.get('shell'), 'refused', "the app signalled its sandbox's shell");
    assert.equal(seen.get('userns'), 'refused');
    assert.equal(seen.get('caps'), '0000000000000000');
    assert.equal(seen.get('writes'), 'yes', 'its /tmp and HOME are not its own');
  });

  test("a build runs as its deployment's uid, and is sealed as the service's", async (t) => {
    if (skip()) return t.skip(skip()!);
    const { appDir } = dirsOf('b');
    const seen = await runTo(
      sandbox,
      'echo uid=$(id -u); mkdir -p out && echo built > out/file && chmod 000 out',
      { appDir },
      'build',
    );
    assert.equal(seen.get('uid'), String(given.get('deployment-b')));
    await sealSnapshot(appDir, sandbox.ids);
    const stat = await fs.stat(path.join(appDir, 'src', 'out', 'file'));
    assert.equal(stat.uid, process.getuid!());
    assert.equal(stat.mode & 0o222, 0);
  });

  test('its data survives a redeploy; teardown removes it and follows no link swapped in meanwhile', async (t) => {
    if (skip()) return t.skip(skip()!);
    const { appDir, dataDir } = dirsOf('a');
    await runTo(sandbox, 'echo kept > /home/app/data/state && mkdir -p /home/app/data/tree/sub', { appDir, dataDir });
    // A new revision's instance: the same data directory.
    const again = await runTo(sandbox, 'echo state=$(cat /home/app/data/state)', { appDir, dataDir });
    assert.equal(again.get('state'), 'kept');
    // The service's own files, which a followed link would have it delete.
    const canary = path.join(scratch, 'canary');
    await fs.mkdir(canary);
    for (let i = 0; i < 50; i += 1) await fs.writeFile(path.join(canary, `f${i}`), 'x');
    // The app swaps a directory of its data for a link to the canary, as fast as it can, while the
    // service removes the tree (against the rule that nothing of the app runs then: removal must be safe anyway).
    const swap = [
      'cd /home/app/data/tree',
      `while :; do mkdir -p d && touch d/x; mv d moved 2>/dev/null; ln -sfn '${canary}' d; rm -rf moved; rm -f d; done`,
    ].join('\n');
    const { running } = start(sandbox, 'app', swap, { appDir, dataDir });
    try {
      for (let round = 0; round < 20; round += 1)
        await removeTree(path.join(dataDir, 'tree'), sandbox.ids).catch(() => undefined);
    } finally {
      await running.stop(2_000);
    }
    await removeTree(path.dirname(dataDir), sandbox.ids);
    assert.equal((await fs.readdir(canary)).length, 50, 'the removal followed a link into the canary');
    await assert.rejects(fs.stat(path.dirname(dataDir)), { code: 'ENOENT' });
  });

  test("the disk limit measures a deployment's data, even what it made unreadable", async (t) => {
    if (skip()) return t.skip(skip()!);
    const { appDir, dataDir } = dirsOf('b');
    await runTo(
      sandbox,
      'mkdir -p /home/app/data/hidden && head -c 300000 /dev/zero > /home/app/data/hidden/blob && chmod 000 /home/app/data/hidden',
      { appDir, dataDir },
    );
    // The control: the service's user alone cannot read the deployment's uid's 0700 directory.
    assert.equal((await measureTrees([dataDir])).unreadable, true);
    const usage = await measureTrees([dataDir], sandbox.ids);
    assert.equal(usage.unreadable, false);
    assert.ok(usage.bytes >= 300_000, `measured ${usage.bytes} bytes`);
  });

  test("without the mapped namespace the service could not remove a deployment's data", async (t) => {
    if (skip()) return t.skip(skip()!);
    const { appDir, dataDir } = dirsOf('b');
    await runTo(sandbox, 'mkdir -p /home/app/data/x && echo y > /home/app/data/x/y', { appDir, dataDir });
    // The control: removal as the service's user alone is refused (the files are the deployment's uid's).
    await assert.rejects(removeTree(path.dirname(dataDir)));
    await removeTree(path.dirname(dataDir), sandbox.ids);
    await assert.rejects(fs.stat(path.dirname(dataDir)), { code: 'ENOENT' });
  });
});

describe('without a subordinate range', () => {
  test('the start log says apps share the service’s uid, and why', async (t) => {
    if (isRoot) return t.skip('the service is root: SLIPWAY_APP_UIDS serves');
    const empty = path.join(scratch, 'empty');
    await fs.writeFile(empty, '');
    // Without no_new_privs (CI runs this file with it too: the next test).
    const none = await probeSubordinateIds({ subuid: empty, subgid: empty, status: empty });
    assert.equal(none.ids, null);
    const users = createAppUsers({
      range: { first: 1_900_000_000, count: 16 },
      uidOf: async () => 1_900_000_000,
      subordinate: none,
    });
    const sandbox = await createSandbox({
      mode: 'auto',
      dataDir: path.join(scratch, 'service-data'),
      limits,
      logger,
      users,
    });
    try {
      assert.match(
        sandbox.description,
        new RegExp(
          `as the service's own user: no uid per deployment \\(${os.userInfo().username} has no subordinate range`,
        ),
      );
      const dir = path.join(scratch, 'shared-app');
      await fs.mkdir(path.join(dir, 'src'), { recursive: true });
      const seen = await runTo(sandbox, 'echo uid=$(id -u)', { appDir: dir });
      assert.equal(seen.get('uid'), String(process.getuid!()));
    } finally {
      await sandbox.dispose();
    }
  });

  test('with no_new_privs, the start log says the setuid newuidmap cannot serve', async (t) => {
    if (isRoot) return t.skip('the service is root: SLIPWAY_APP_UIDS serves');
    const status = await fs.readFile('/proc/self/status', 'utf8');
    if (!/^NoNewPrivs:\s*1$/m.test(status)) return t.skip('this test process runs without no_new_privs');
    const seen = await probeSubordinateIds();
    assert.equal(seen.ids, null);
    if (/not installed/.test(seen.problem ?? '')) return t.skip(seen.problem);
    assert.match(seen.problem ?? '', /no_new_privs.*newuidmap/);
  });
});
