/**
 * Attacker's tests of what a sandboxed build or app may ask of the kernel (issue 33, item 6): the whole
 * surface of nested user namespaces, system calls no app needs, and the terminal. Each runs in the very
 * sandbox the service gives apps (its own network, a host forward, as root or as an ordinary user: CI
 * runs this file both ways).
 *
 * What main did before: `unshare -U` inside an app made a user namespace (and with it the kernel's
 * whole namespace surface to each tenant); `add_key`, `keyctl`, `userfaultfd` and `io_uring_setup`
 * succeeded; TIOCSTI reached the kernel (ENOTTY, only because no terminal was at hand), and the
 * sandbox's processes were in the session of the bubblewrap outside it; as root, every deployment ran
 * as `nobody`, so one that reached another's data directory read it, and all shared one user's kernel
 * counters (processes, inotify instances).
 */
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { createAppUsers, type AppUsers } from '../../src/dataplane/app-uids.ts';
import { openHostForward, type HostForward } from '../../src/dataplane/host-forwards.ts';
import { startProcess } from '../../src/dataplane/process-runner.ts';
import { createResourceControl, type ResourceControl } from '../../src/dataplane/resource-limits.ts';
import { createSandbox, type Sandbox, type SandboxRun } from '../../src/dataplane/sandbox.ts';

const logger = { info: () => undefined, warn: () => undefined };
const PATH = '/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin';

/**
 * System call numbers of calls an unprivileged process may make on this kernel without a filter (each
 * succeeded on main), and of one every program makes, for the two architectures CI and users run.
 */
const SYSCALLS: Record<string, Record<string, number>> = {
  x64: { add_key: 248, keyctl: 250, userfaultfd: 323, io_uring_setup: 425, bpf: 321, getppid: 110 },
  arm64: { add_key: 217, keyctl: 219, userfaultfd: 282, io_uring_setup: 425, bpf: 280, getppid: 173 },
};

/**
 * Python with ctypes (the machine's, read-only in the sandbox): calls each system call the way a
 * hostile native module would, and prints `name=result/errno` per call. Arguments are valid ones, so
 * that a call fails only when something refuses it.
 */
const SYSCALL_SCRIPT = String.raw`
import ctypes, json, sys
libc = ctypes.CDLL(None, use_errno=True)
nr = json.loads(sys.argv[1])
def call(name, *args):
    ctypes.set_errno(0)
    r = libc.syscall(nr[name], *args)
    print("%s=%d/%d" % (name, r, ctypes.get_errno() if r < 0 else 0))
# add_key("user", "k", "v", 1, KEY_SPEC_PROCESS_KEYRING)
call("add_key", b"user", b"k", b"v", 1, -2)
# keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_PROCESS_KEYRING, create)
call("keyctl", 0, -2, 1)
# userfaultfd(UFFD_USER_MODE_ONLY)
call("userfaultfd", 1)
params = ctypes.create_string_buffer(120)
call("io_uring_setup", 1, params)
# bpf(BPF_PROG_LOAD) with an empty attribute: refused either way, EPERM only from the filter or policy
call("bpf", 5, ctypes.create_string_buffer(128), 128)
call("getppid")
`;

/** TIOCSTI on each standard descriptor, and the session and terminal the command is in. */
const TERMINAL_SCRIPT = String.raw`
import errno, fcntl, os, termios
for fd in (0, 1, 2):
    try:
        fcntl.ioctl(fd, termios.TIOCSTI, b"x")
        print("tiocsti%d=ok" % fd)
    except OSError as e:
        print("tiocsti%d=%s" % (fd, errno.errorcode[e.errno]))
fields = open("/proc/self/stat").read().rsplit(")", 1)[1].split()
print("sid=%s" % fields[3])
print("tty=%s" % fields[4])
print("sid_inside=%s" % os.path.isdir("/proc/%s" % fields[3]))
`;

let scratch: string;
let limits: ResourceControl;
let sandbox: Sandbox;
let appDir: string;
let forward: HostForward;
let host: net.Server;

before(async () => {
  scratch = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-sandbox-3-'));
  await fs.chmod(scratch, 0o711);
  limits = await createResourceControl({ root: path.join(scratch, 'no-cgroups'), logger });
  const dataDir = path.join(scratch, 'data');
  await fs.mkdir(dataDir);
  appDir = path.join(scratch, 'app');
  await fs.mkdir(path.join(appDir, 'src'), { recursive: true });
  sandbox = await createSandbox({ mode: 'bwrap', dataDir, limits, logger });
  await sandbox.ownTree(appDir);
  host = net.createServer((socket) => socket.end('host'));
  await new Promise<void>((resolve) => host.listen(0, '127.0.0.1', resolve));
  const forwardDir = path.join(sandbox.slirp!.socketDir, 'sandbox-3');
  await fs.mkdir(forwardDir, { mode: 0o711 });
  forward = await openHostForward(
    forwardDir,
    {
      name: 'database',
      host: '127.0.0.1',
      port: (host.address() as net.AddressInfo).port,
      insidePort: 5432,
      maxConnections: 4,
    },
    logger,
  );
});

after(async () => {
  await forward?.close();
  await new Promise<void>((resolve) => (host ? host.close(() => resolve()) : resolve()));
  await sandbox?.dispose();
  await limits?.dispose();
  await fs.rm(scratch, { recursive: true, force: true });
});

/**
 * Runs `command` as a build or as an app (with its forward) to its end; its output lines as a map.
 * `where`: another sandbox, app directory or data directory than the shared ones.
 */
async function runAs(
  purpose: SandboxRun['purpose'],
  command: string,
  where: { sandbox?: Sandbox; appDir?: string; dataDir?: string } = {},
): Promise<Map<string, string>> {
  let output = '';
  const running = startProcess({
    sandbox: where.sandbox ?? sandbox,
    run: {
      purpose,
      command,
      appDir: where.appDir ?? appDir,
      ...(where.dataDir ? { dataDir: where.dataDir } : {}),
      forwards: purpose === 'app' && !where.sandbox ? [forward] : [],
      limits: null,
      name: `sandbox-3-${process.pid}`,
    },
    env: { PATH },
    output: {
      write: (_stream, chunk) => void (output += String(chunk)),
      system: (line) => void (output += `${line}\n`),
    },
  });
  const exit = await running.exited;
  assert.equal(exit.code, 0, output);
  const seen = new Map<string, string>();
  for (const line of output.split('\n')) {
    const at = line.indexOf('=');
    if (at > 0) seen.set(line.slice(0, at), line.slice(at + 1));
  }
  return seen;
}

const python = (script: string, ...args: string[]) =>
  ['python3', '-c', script, ...args].map((a) => `'${a.replaceAll("'", "'\\''")}'`).join(' ');

for (const purpose of ['app', 'build'] as const) {
  describe(`inside a sandboxed ${purpose}`, () => {
    test('no user namespace can be made: not with unshare -U, not as root of one', async () => {
      const seen = await runAs(
        purpose,
        [
          'unshare -U true 2>/dev/null && echo user=made || echo user=refused',
          'unshare -Ur true 2>/dev/null && echo root=made || echo root=refused',
          // The control: other namespaces' tools still run (and fail for want of capabilities).
          'echo alive=yes',
        ].join('\n'),
      );
      assert.equal(seen.get('alive'), 'yes');
      assert.equal(seen.get('user'), 'refused', 'unshare -U made a user namespace');
      assert.equal(seen.get('root'), 'refused', 'unshare -Ur made a user namespace');
    });

    test('system calls no app needs fail with EPERM; ordinary ones work', async () => {
      const numbers = SYSCALLS[process.arch];
      assert.ok(numbers, `no system call numbers for ${process.arch} in this test`);
      const seen = await runAs(purpose, python(SYSCALL_SCRIPT, JSON.stringify(numbers)));
      assert.match(seen.get('getppid') ?? '', /^[1-9]\d*\/0$/, 'an ordinary call failed');
      for (const name of ['add_key', 'keyctl', 'userfaultfd', 'io_uring_setup', 'bpf']) {
        assert.equal(seen.get(name), '-1/1', `${name} was not refused with EPERM (result/errno)`);
      }
    });

    test('the terminal is out of reach: TIOCSTI is refused, the session is the sandbox’s own, no terminal', async () => {
      const seen = await runAs(purpose, python(TERMINAL_SCRIPT));
      for (const fd of [0, 1, 2]) assert.equal(seen.get(`tiocsti${fd}`), 'EPERM', `TIOCSTI on fd ${fd}`);
      assert.equal(seen.get('tty'), '0', 'the command has a controlling terminal');
      assert.equal(seen.get('sid_inside'), 'True', `its session (${seen.get('sid')}) is led from outside the sandbox`);
    });
  });
}

describe('a uid per deployment', () => {
  const isRoot = process.getuid?.() === 0;
  const range = { first: 1_900_000_000, count: 16 };
  let users: AppUsers;
  let perDeployment: Sandbox;
  /** Outside /tmp, /home and the other hidden directories: visible (read-only) in every sandbox. */
  let base: string;
  const deployments = ['a', 'b'].map((name) => ({ name, id: `deployment-${name}` }));
  const dirsOf = (name: string) => ({
    appDir: path.join(base, `${name}-app`),
    dataDir: path.join(base, `${name}-data`),
  });

  before(async () => {
    base = await fs.mkdtemp(isRoot ? '/slipway-sandbox-3-' : path.join(scratch, 'uids-'));
    await fs.chmod(base, 0o711);
    const given = new Map<string, number>();
    users = createAppUsers({
      range,
      uidOf: async (id) => {
        if (!given.has(id)) given.set(id, range.first + given.size);
        return given.get(id)!;
      },
    });
    perDeployment = await createSandbox({ mode: 'bwrap', dataDir: path.join(scratch, 'data'), limits, logger, users });
    for (const { name, id } of deployments) {
      const { appDir: app, dataDir: data } = dirsOf(name);
      await fs.mkdir(path.join(app, 'src'), { recursive: true });
      await perDeployment.ownTree(app, id);
      // As the service makes a data directory (src/dataplane/app-host-access.ts).
      await fs.mkdir(data, { mode: 0o700 });
      await perDeployment.ownDir(data, id);
    }
  });
  after(async () => {
    await perDeployment?.dispose();
    await fs.rm(base, { recursive: true, force: true });
  });

  test('as root, two deployments run as two uids of the range, and neither reads the other’s data', async (t) => {
    if (!isRoot) {
      t.skip('only root can give processes other uids: the next test covers an ordinary user');
      return;
    }
    const seen = new Map<string, Map<string, string>>();
    for (const { name } of deployments) {
      const { appDir: app, dataDir: data } = dirsOf(name);
      const other = dirsOf(name === 'a' ? 'b' : 'a').dataDir;
      seen.set(
        name,
        await runAs(
          'app',
          [
            'echo uid=$(id -u)',
            `echo secret-${name} > /home/app/data/secret && echo wrote=yes`,
            // Another deployment's data directory, reached (here: by path; in production it is hidden).
            `[ -d '${other}' ] && echo sees=yes`,
            `cat '${other}/secret' 2>/dev/null && echo read=yes || echo read=no`,
          ].join('\n'),
          { sandbox: perDeployment, appDir: app, dataDir: data },
        ),
      );
    }
    const [a, b] = [seen.get('a')!, seen.get('b')!];
    assert.equal(a.get('wrote'), 'yes');
    assert.equal(b.get('wrote'), 'yes');
    assert.notEqual(a.get('uid'), b.get('uid'), 'both deployments ran as one uid');
    for (const uid of [a.get('uid'), b.get('uid')]) {
      assert.ok(
        Number(uid) >= range.first && Number(uid) < range.first + range.count,
        `uid ${uid} is not of the range`,
      );
    }
    // B wrote its secret after A looked; A looks again now that it is there.
    const again = await runAs(
      'app',
      `cat '${dirsOf('b').dataDir}/secret' 2>/dev/null && echo read=yes || echo read=no`,
      {
        sandbox: perDeployment,
        ...dirsOf('a'),
      },
    );
    assert.equal(b.get('sees'), 'yes', 'the test could not place the other data directory in view');
    assert.equal(b.get('read'), 'no', "deployment b read deployment a's data");
    assert.equal(again.get('read'), 'no', "deployment a read deployment b's data");
    // A build runs as its deployment's uid too.
    const build = await runAs('build', 'echo uid=$(id -u)', { sandbox: perDeployment, appDir: dirsOf('b').appDir });
    assert.equal(build.get('uid'), b.get('uid'), "a build did not run as its deployment's uid");
  });

  test('as an ordinary user, every app runs as the service’s user, and the start log says so', async (t) => {
    if (isRoot) {
      t.skip('covered above');
      return;
    }
    assert.match(perDeployment.description, /no uid per deployment/);
    const seen = await runAs('app', 'echo uid=$(id -u)', { sandbox: perDeployment, ...dirsOf('a') });
    assert.equal(seen.get('uid'), String(process.getuid!()));
  });
});
