/**
 * The start-up probe of the sandbox (src/dataplane/sandbox.ts): rather than trusting that the tools
 * exist, it does the real thing once. First bubblewrap alone (can this user make namespaces here?), then
 * a whole app sandbox through the same runner every app goes through (src/dataplane/process-runner.ts):
 * its own network attached by slirp4netns, a host forward reached from inside through socat, the
 * command's user inside, and an answer through the published port the router uses. Each failure is
 * turned into a sentence saying what the host lacks (user namespaces, /dev/net/tun, ...) for the start
 * log, or for the error with which SLIPWAY_SANDBOX=bwrap refuses to start.
 */
import { randomBytes } from 'node:crypto';
import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { freeAppPort } from './app-ports.ts';
import { removeTree } from './build-snapshot.ts';
import { openHostForward } from './host-forwards.ts';
import { startProcess } from './process-runner.ts';
import type { Sandbox } from './sandbox.ts';

const run = promisify(execFile);

/** How long the whole network probe may take: a sandbox start is well under a second on an idle host. */
const PROBE_DEADLINE_MS = 60_000;

/** Where the probe's host forward appears on the sandbox's own 127.0.0.1. */
const PROBE_FORWARD_PORT = 7000;

/**
 * What the probe runs inside, as an app: it reads a token through its host forward (socat to
 * 127.0.0.1 inside, a Unix socket to the host), then answers every connection on its published port with
 * its user id inside, its capabilities and that token (without spaces: socat's SYSTEM address takes the
 * quotes around the variable for its own).
 */
const PROBE_COMMAND = [
  'forwarded=$(socat -u TCP:127.0.0.1:$PROBE_FORWARD_PORT STDOUT) || exit 1',
  'caps=$(grep "^CapEff:" /proc/self/status | tr -d "\\t" | cut -d: -f2)',
  'export PROBE_ANSWER="uid=$(id -u)/caps=$caps/forwarded=$forwarded"',
  'exec socat TCP-LISTEN:$PORT,bind=0.0.0.0,reuseaddr,fork SYSTEM:\'printf %s "$PROBE_ANSWER"\'',
].join('\n');

/** Why this host refuses unprivileged user namespaces, where its settings say so. */
async function userNamespaceSettings(): Promise<string[]> {
  const read = (file: string) =>
    fs.readFile(file, 'utf8').then(
      (text) => text.trim(),
      () => null,
    );
  const found: string[] = [];
  if ((await read('/proc/sys/kernel/unprivileged_userns_clone')) === '0')
    found.push('unprivileged user namespaces are disabled (sysctl kernel.unprivileged_userns_clone=0; set it to 1)');
  if ((await read('/proc/sys/user/max_user_namespaces')) === '0')
    found.push('user namespaces are disabled (sysctl user.max_user_namespaces=0)');
  if ((await read('/proc/sys/kernel/apparmor_restrict_unprivileged_userns')) === '1')
    found.push(
      'AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1): give bwrap an AppArmor profile that allows them',
    );
  return found;
}

/**
 * Whether bubblewrap can make a sandbox here as the user commands run as; null when it can, else what
 * is missing (bubblewrap's own words and what the host's settings say).
 */
export async function bubblewrapProblem(
  bwrap: string,
  user: { uid: number; gid: number } | null,
  devArgs: readonly string[],
): Promise<string | null> {
  try {
    await run(
      bwrap,
      ['--ro-bind', '/', '/', ...devArgs, '--proc', '/proc', '--unshare-pid', '--die-with-parent', '/bin/true'],
      { ...(user ?? {}), timeout: 10_000 },
    );
    return null;
  } catch (error) {
    const stderr = (error as { stderr?: unknown }).stderr;
    const said = (typeof stderr === 'string' ? stderr.trim() : '') || String(error);
    const settings = await userNamespaceSettings();
    const cause =
      settings.length > 0
        ? settings.join('; ')
        : 'user namespaces are refused (in a container: its seccomp or AppArmor profile; run it with both unconfined)';
    return `bubblewrap cannot make a sandbox here: ${cause} (bubblewrap said: ${said.split('\n').join(' / ')})`;
  }
}

/** Whether slirp4netns can open /dev/net/tun as this user; null when it can, else what is wrong. */
export async function tunProblem(device = '/dev/net/tun'): Promise<string | null> {
  const handle = await fs.open(device, 'r+').catch((error: NodeJS.ErrnoException) => error);
  if (!(handle instanceof Error)) {
    // Opened only: without TUNSETIFF no device is made.
    await handle.close();
    return null;
  }
  if (handle.code === 'ENOENT' || handle.code === 'ENODEV' || handle.code === 'ENXIO')
    return `${device} does not exist (load the tun kernel module; in a container, pass the device: docker run --device ${device})`;
  if (handle.code === 'EACCES' || handle.code === 'EPERM') {
    const stat = await fs.stat(device).catch(() => null);
    const mode = stat ? ` (mode ${(stat.mode & 0o777).toString(8).padStart(4, '0')})` : '';
    return `${device} cannot be opened by the service's user${mode}: slirp4netns needs it readable and writable by every user, as udev makes it (chmod 0666 ${device})`;
  }
  return `${device} cannot be opened: ${handle.message}`;
}

/** Connects to the published port until something answers there, the sandbox exits, or the deadline. */
async function askThrough(port: number, ended: () => boolean, deadline: number): Promise<string | null> {
  while (!ended() && Date.now() < deadline) {
    const answer = await new Promise<string>((resolve) => {
      const socket = net.createConnection({ host: '127.0.0.1', port });
      const chunks: Buffer[] = [];
      socket.on('data', (chunk: Buffer) => chunks.push(chunk));
      socket.on('error', () => socket.destroy());
      socket.on('close', () => resolve(Buffer.concat(chunks).toString('utf8')));
      socket.setTimeout(5_000, () => socket.destroy());
    });
    if (answer !== '') return answer;
    // Not set up yet: slirp4netns's port forward, or the listener inside, comes a moment later.
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return null;
}

/**
 * Starts one sandbox as an app is started (its own network through slirp4netns, a host forward, a
 * published port), asks it through the published port what it sees, and stops it. Null when all of it
 * works and the command runs as `expectUid` inside without capabilities; otherwise what went wrong,
 * with the sandbox's own output.
 */
export async function networkProblem(sandbox: Sandbox, expectUid: number): Promise<string | null> {
  if (!sandbox.slirp) return 'the sandbox has no network of its own';
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-probe-'));
  const appDir = path.join(dir, 'app');
  await fs.mkdir(path.join(appDir, 'src'), { recursive: true });
  // The app's user (nobody, when the service is root) passes through to its directory.
  await fs.chmod(dir, 0o711);
  await sandbox.ownTree(appDir);
  const token = randomBytes(8).toString('hex');
  const target = net.createServer((socket) => socket.end(token));
  await new Promise<void>((resolve) => target.listen(0, '127.0.0.1', resolve));
  const targetPort = (target.address() as net.AddressInfo).port;
  const forwardDir = path.join(sandbox.slirp.socketDir, `probe-${randomBytes(6).toString('hex')}`);
  await fs.mkdir(forwardDir, { mode: 0o711 });
  const output: string[] = [];
  let running: ReturnType<typeof startProcess> | null = null;
  let ended = false;
  try {
    const forward = await openHostForward(
      forwardDir,
      { name: 'probe', host: '127.0.0.1', port: targetPort, insidePort: PROBE_FORWARD_PORT, maxConnections: 4 },
      { warn: () => undefined },
    );
    try {
      const publishPort = await freeAppPort();
      running = startProcess({
        sandbox,
        run: {
          purpose: 'app',
          command: PROBE_COMMAND,
          appDir,
          forwards: [forward],
          publishPort,
          limits: null,
          name: `probe-${process.pid}`,
        },
        env: {
          PATH: '/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin',
          PORT: String(publishPort),
          PROBE_FORWARD_PORT: String(PROBE_FORWARD_PORT),
        },
        output: {
          write: (_stream, chunk) => void output.push(String(chunk)),
          system: (line) => void output.push(`${line}\n`),
        },
      });
      void running.exited.then(() => (ended = true));
      const answer = await askThrough(publishPort, () => ended, Date.now() + PROBE_DEADLINE_MS);
      if (answer === null) {
        const exit = ended ? await running.exited : null;
        const said = output.join('').trim().split('\n').slice(-6).join(' / ');
        return (
          (exit
            ? `a sandbox with its own network exited (code ${exit.code}) before it answered through its published port`
            : `a sandbox with its own network did not answer through its published port within ${PROBE_DEADLINE_MS / 1000} s`) +
          (said ? `: ${said}` : '')
        );
      }
      const seen = /^uid=(\d+)\/caps=([0-9a-f]*)\/forwarded=(.*)$/.exec(answer);
      if (!seen) return `a sandbox answered through its published port with something unexpected: ${answer}`;
      if (seen[3] !== token) return `a sandbox did not reach the host through its forward (it read "${seen[3]}")`;
      if (Number(seen[1]) !== expectUid)
        return `a sandboxed command ran as uid ${seen[1]} inside its sandbox, not as uid ${expectUid}`;
      if (!/^0*$/.test(seen[2]!)) return `a sandboxed command kept capabilities (${seen[2]}) inside its sandbox`;
      return null;
    } finally {
      await running?.stop(2_000);
      await forward.close();
    }
  } finally {
    await new Promise<void>((resolve) => target.close(() => resolve()));
    await fs.rm(forwardDir, { recursive: true, force: true });
    // Its app directory is the probe's uid's when that is of a subordinate range: removed as the service removes trees.
    await removeTree(dir, sandbox.ids);
  }
}
