/**
 * The sandbox's start-up probe (src/dataplane/sandbox-probe.ts) and what it promises: a sandbox that
 * says it gives apps a network of their own does, for whoever runs the service (root, or an ordinary
 * user: CI runs this file both ways, .ci/run), and where slirp4netns cannot attach the service says so
 * at start instead of failing every app later. Also the attacker's side of running the sandbox's user
 * as root of its own user namespace (as it must for slirp4netns without root): the command is not root
 * there, has no capabilities, and cannot undo the mounts that hide the service's data.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { startProcess, type Exit } from '../../src/dataplane/process-runner.ts';
import { createResourceControl, type ResourceControl } from '../../src/dataplane/resource-limits.ts';
import { openHostForward } from '../../src/dataplane/host-forwards.ts';
import { createSandbox, type Sandbox, type SandboxRun } from '../../src/dataplane/sandbox.ts';

const isRoot = process.getuid?.() === 0;
/** The uid a sandboxed command runs as, as it sees itself: nobody under a root service, else the service's own. */
const appUid = isRoot ? 65534 : process.getuid!();
const logger = { info: () => undefined, warn: () => undefined };
const PATH = '/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin';

let scratch: string;
let limits: ResourceControl;

before(async () => {
  scratch = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-probe-test-'));
  await fs.chmod(scratch, 0o711);
  // No cgroups here (an empty directory as their root): the limits are another file's subject.
  limits = await createResourceControl({ root: path.join(scratch, 'no-cgroups'), logger });
});

after(async () => {
  await limits.dispose();
  await fs.rm(scratch, { recursive: true, force: true });
});

/**
 * A data directory of the service with a secret in it that anyone could read but for the sandbox's
 * mounts, and an app directory.
 */
async function serviceDirs(name: string): Promise<{ dataDir: string; appDir: string }> {
  const dataDir = path.join(scratch, `${name}-data`);
  await fs.mkdir(dataDir, { mode: 0o755 });
  await fs.writeFile(path.join(dataDir, 'encryption.key'), 'the-service-secret\n', { mode: 0o644 });
  const appDir = path.join(scratch, `${name}-app`);
  await fs.mkdir(path.join(appDir, 'src'), { recursive: true });
  return { dataDir, appDir };
}

/** Runs a command in the sandbox to its end; its output (stdout and the runner's lines) and exit. */
async function runIn(
  sandbox: Sandbox,
  run: Omit<SandboxRun, 'limits' | 'name'>,
  env: Record<string, string> = {},
): Promise<{ exit: Exit; output: string }> {
  let output = '';
  const running = startProcess({
    sandbox,
    run: { ...run, limits: null, name: `probe-test-${process.pid}` },
    env: { PATH, ...env },
    output: {
      write: (_stream, chunk) => void (output += String(chunk)),
      system: (line) => void (output += `${line}\n`),
    },
  });
  return { exit: await running.exited, output };
}

/** Reads what a server on the host's 127.0.0.1 answers, once something listens there. */
async function answerAt(port: number, running: Promise<unknown>): Promise<string> {
  let ended = false;
  void running.then(() => (ended = true));
  while (!ended) {
    const answer = await new Promise<string>((resolve) => {
      const socket = net.createConnection({ host: '127.0.0.1', port });
      let text = '';
      socket.on('data', (chunk: Buffer) => (text += chunk.toString('utf8')));
      socket.on('error', () => socket.destroy());
      socket.on('close', () => resolve(text));
    });
    if (answer) return answer;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return '';
}

async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

describe('a sandbox that says it has a network of its own', () => {
  let sandbox: Sandbox;
  let dirs: { dataDir: string; appDir: string };

  before(async () => {
    dirs = await serviceDirs('network');
    sandbox = await createSandbox({ mode: 'auto', dataDir: dirs.dataDir, limits, logger });
    await sandbox.ownTree(dirs.appDir);
  });
  after(() => sandbox.dispose());

  test('has one here: bubblewrap, slirp4netns and socat are installed and the host allows them', () => {
    assert.equal(sandbox.kind, 'bwrap', sandbox.description);
    assert.equal(sandbox.networkIsolated, true, sandbox.description);
  });

  test("gives an app its network: reached through its published port, the host through its forward only, as the app's user without capabilities", async () => {
    const host = net.createServer((socket) => socket.end('from-the-apps-database'));
    await new Promise<void>((resolve) => host.listen(0, '127.0.0.1', resolve));
    const hostPort = (host.address() as net.AddressInfo).port;
    const forwardDir = path.join(sandbox.slirp!.socketDir, 'test-forwards');
    await fs.mkdir(forwardDir, { mode: 0o711 });
    const forward = await openHostForward(
      forwardDir,
      { name: 'database', host: '127.0.0.1', port: hostPort, insidePort: 5432, maxConnections: 4 },
      logger,
    );
    const publishPort = await freePort();
    // The app: its database through the forward; the same host server directly (its loopback is its
    // own, and slirp4netns keeps the host's out of reach); who it is; then it serves what it saw.
    const command = [
      'db=$(socat -u TCP:127.0.0.1:5432 STDOUT 2>&1)',
      `direct=$(socat -u TCP:10.0.2.2:${hostPort},connect-timeout=5 STDOUT 2>/dev/null || echo refused)`,
      `loopback=$(socat -u TCP:127.0.0.1:${hostPort},connect-timeout=5 STDOUT 2>/dev/null || echo refused)`,
      'caps=$(grep "^CapEff:" /proc/self/status | tr -d "\\t" | cut -d: -f2)',
      'secret=$(cat "$SERVICE_DATA/encryption.key" 2>/dev/null || echo hidden)',
      'export ANSWER="uid=$(id -u)/caps=$caps/db=$db/direct=$direct/loopback=$loopback/secret=$secret"',
      'exec socat TCP-LISTEN:$PORT,bind=0.0.0.0,reuseaddr SYSTEM:\'printf %s "$ANSWER"\'',
    ].join('\n');
    let output = '';
    const running = startProcess({
      sandbox,
      run: {
        purpose: 'app',
        command,
        appDir: dirs.appDir,
        forwards: [forward],
        publishPort,
        limits: null,
        name: `probe-test-app-${process.pid}`,
      },
      env: { PATH, PORT: String(publishPort), SERVICE_DATA: dirs.dataDir },
      output: {
        write: (_stream, chunk) => void (output += String(chunk)),
        system: (line) => void (output += `${line}\n`),
      },
    });
    try {
      const answer = await answerAt(publishPort, running.exited);
      assert.equal(
        answer,
        `uid=${appUid}/caps=0000000000000000/db=from-the-apps-database/direct=refused/loopback=refused/secret=hidden`,
        `the app's output: ${output}`,
      );
    } finally {
      await running.stop(2_000);
      await forward.close();
      await new Promise<void>((resolve) => host.close(() => resolve()));
    }
  });

  test("a build runs as the app's user too, and what it writes is the service's to seal (nobody's under root)", async () => {
    const { exit, output } = await runIn(sandbox, {
      purpose: 'build',
      command: 'id -u > built-by && grep "^CapEff:" /proc/self/status > caps',
      appDir: dirs.appDir,
    });
    assert.equal(exit.code, 0, output);
    assert.equal((await fs.readFile(path.join(dirs.appDir, 'src', 'built-by'), 'utf8')).trim(), String(appUid));
    assert.match(await fs.readFile(path.join(dirs.appDir, 'src', 'caps'), 'utf8'), /^CapEff:\s+0+\n$/);
    const stat = await fs.stat(path.join(dirs.appDir, 'src', 'built-by'));
    assert.equal(stat.uid, isRoot ? 65534 : process.getuid!());
  });

  test('attacker: root of nothing, the app cannot undo the mounts that hide the service data directory', async () => {
    // Every way a process could try to take the tmpfs off the data directory: directly, and as root
    // of a fresh user and mount namespace of its own (where the mounts it inherits are locked).
    const command = [
      'umount -l "$SERVICE_DATA" 2>/dev/null && echo unmounted',
      'unshare --user --map-root-user --mount sh -c \'umount -l "$SERVICE_DATA" && cat "$SERVICE_DATA/encryption.key"\' 2>/dev/null',
      'mkdir -p /tmp/root',
      'unshare --user --map-root-user --mount sh -c \'mount --bind / /tmp/root && cat "/tmp/root$SERVICE_DATA/encryption.key"\' 2>/dev/null',
      'cat "$SERVICE_DATA/encryption.key" 2>/dev/null',
      'ls -A "$SERVICE_DATA"',
      'echo done',
    ].join('\n');
    const { exit, output } = await runIn(
      sandbox,
      { purpose: 'app', command, appDir: dirs.appDir },
      { SERVICE_DATA: dirs.dataDir },
    );
    assert.equal(exit.code, 0, output);
    assert.doesNotMatch(output, /the-service-secret|unmounted|encryption\.key/);
    assert.match(output, /done/);
  });
});

describe('where slirp4netns cannot attach a sandbox', () => {
  let failing: string;

  before(async () => {
    // As slirp4netns exited for an ordinary user before bubblewrap mapped it to root in the sandbox.
    failing = path.join(scratch, 'slirp4netns');
    await fs.writeFile(
      failing,
      '#!/bin/sh\necho "sent tapfd=7 for tap0" >&2\necho "received tapfd=7" >&2\necho "setegid(0)" >&2\necho "parent failed" >&2\nexit 1\n',
      { mode: 0o755 },
    );
  });

  test('the service says at start that apps are on the host network, and why', async () => {
    const { dataDir } = await serviceDirs('failing-auto');
    const sandbox = await createSandbox({ mode: 'auto', dataDir, limits, logger, tools: { slirp4netns: failing } });
    try {
      assert.equal(sandbox.networkIsolated, false);
      assert.match(sandbox.description, /network: the host's network \(.*setegid\(0\) \/ parent failed/);
    } finally {
      await sandbox.dispose();
    }
  });

  test('with SLIPWAY_SANDBOX=bwrap the service refuses to start, saying what failed', async () => {
    const { dataDir } = await serviceDirs('failing-bwrap');
    await assert.rejects(
      createSandbox({ mode: 'bwrap', dataDir, limits, logger, tools: { slirp4netns: failing } }),
      /SLIPWAY_SANDBOX=bwrap but apps cannot get a network of their own here: .*slirp4netns exited \(code 1\).*setegid\(0\)/,
    );
  });

  test('without bubblewrap, SLIPWAY_SANDBOX=bwrap refuses to start and auto says apps run bare', async () => {
    const { dataDir } = await serviceDirs('no-bwrap');
    await assert.rejects(
      createSandbox({ mode: 'bwrap', dataDir, limits, logger, tools: { bwrap: null } }),
      /SLIPWAY_SANDBOX=bwrap but bubblewrap is not installed/,
    );
    const bare = await createSandbox({ mode: 'auto', dataDir, limits, logger, tools: { bwrap: null } });
    assert.equal(bare.kind, 'none');
    assert.match(bare.description, /apps run without a sandbox .*because bubblewrap is not installed/);
  });
});
