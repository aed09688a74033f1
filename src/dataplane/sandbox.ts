/**
 * How the local data plane contains what it runs (install and build commands, app instances). With
 * bubblewrap (Debian package `bubblewrap`) each process tree gets:
 *
 * - files: the machine's file system read-only; the service's data directory (its encryption key,
 *   database files, other apps' sources) and its socket directory hidden behind empty tmpfs mounts;
 *   /home and /tmp private. A build writes its own app directory (`/home/app`: `src` and `home`), which
 *   becomes a sealed snapshot when it ends (src/dataplane/build-snapshot.ts); an app instance sees that
 *   snapshot's `src` read-only, a fresh writable `HOME`, and its deployment's own writable directory
 *   (`/home/app/data`). Nothing an app can write is read by the service.
 * - processes: its own PID, IPC and UTS namespaces (it cannot see or signal the service or other apps),
 *   and it dies with the service.
 * - network (with slirp4netns and socat installed): its own network namespace with egress only
 *   (src/dataplane/sandbox-network.ts); inbound only through the published port the router uses; the
 *   deployment's database and the service's API through Unix sockets that lead only there
 *   (src/dataplane/host-forwards.ts), which socat inside exposes on the namespace's own 127.0.0.1.
 * - resources: a cgroup with the memory, CPU and process limits of its resource spec
 *   (src/dataplane/resource-limits.ts), entered before the command starts (bubblewrap's --block-fd holds
 *   it until then).
 *
 * When the service runs as root, what it runs runs as `nobody`. Without bubblewrap processes run bare
 * (still in a cgroup when the service may make one), which contains nothing: the start log says so.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import type { Logger } from 'pino';
import type { SandboxMode } from '../config.ts';
import { findExecutable } from './executables.ts';
import type { Limits, ResourceControl } from './resource-limits.ts';

const run = promisify(execFile);

/**
 * Where an app's directory appears inside the bubblewrap sandbox: /home is replaced by a tmpfs (which
 * also hides the machine's users' homes), so the mount points can be made on a read-only root.
 */
const SANDBOX_HOME = '/home';
const SANDBOX_APP_DIR = '/home/app';
/** Where the Unix sockets of the host forwards appear inside. */
const SANDBOX_SOCKET_DIR = '/home/app/.slipway';
/** The installation the service's own Node.js comes from (bin/node under it). */
const NODE_PREFIX = path.dirname(path.dirname(process.execPath));

/**
 * Directories of the machine an app has no business in, replaced by empty tmpfs mounts: daemons' state
 * and sockets (MariaDB's socket is under /var/lib on Fedora-like systems; a container engine's state,
 * spools, mail), the machine's logs and backups, root's home and an operator's own trees. /run is hidden
 * the same way in every sandbox; /tmp and /var/tmp become the app's own. Only those present are hidden.
 */
const HIDDEN_DIRS = [
  '/var/lib',
  '/var/log',
  '/var/spool',
  '/var/mail',
  '/var/backups',
  '/var/cache',
  '/var/tmp',
  '/root',
  '/srv',
  '/mnt',
  '/media',
];

/** The hidden directories present on this machine (a tmpfs needs an existing directory on a read-only root). */
async function presentHiddenDirs(): Promise<string[]> {
  const present: string[] = [];
  for (const dir of HIDDEN_DIRS) {
    const stat = await fs.lstat(dir).catch(() => null);
    if (stat?.isDirectory()) present.push(dir);
  }
  return present;
}

/**
 * A minimal /dev, made by hand: bubblewrap's `--dev` also mounts a devpts, for which an unprivileged
 * bubblewrap maps the caller to root and later moves the sandbox into a nested user namespace, after
 * which slirp4netns can no longer join its network namespace. Apps need no terminal.
 */
const DEV_ARGS = [
  '--tmpfs',
  '/dev',
  ...['null', 'zero', 'full', 'random', 'urandom'].flatMap((d) => ['--dev-bind', `/dev/${d}`, `/dev/${d}`]),
  '--symlink',
  '/proc/self/fd',
  '/dev/fd',
  ...['stdin', 'stdout', 'stderr'].flatMap((d, i) => ['--symlink', `/proc/self/fd/${i}`, `/dev/${d}`]),
  '--tmpfs',
  '/dev/shm',
];

/** slirp4netns's DNS forwarder, in the network it gives a namespace (10.0.2.0/24). */
const SLIRP_DNS = '10.0.2.3';

/** The unprivileged user apps run as when the service is root. */
const NOBODY = { uid: 65534, gid: 65534 };

/** A loopback port inside the sandbox that leads to a Unix socket of the host. */
export interface SandboxForward {
  port: number;
  socketPath: string;
}

export interface SandboxRun {
  purpose: 'build' | 'app';
  command: string;
  /**
   * The app directory, holding `src` and `home`: a build writes it; an app instance runs from it sealed,
   * read-only.
   */
  appDir: string;
  /** An app's own writable directory (kept across its revisions), at /home/app/data. */
  dataDir?: string;
  /** An app's ways to the host: its database, the service's API. */
  forwards?: readonly SandboxForward[];
  /** The port an app instance listens on, published on the host's 127.0.0.1 for the router. */
  publishPort?: number | null;
  /** Resource limits (null: none). */
  limits: Limits | null;
  /** A name for its cgroup, unique among what runs. */
  name: string;
}

export interface SpawnPlan {
  file: string;
  args: string[];
  /** Working directory to spawn in (on the host). */
  cwd: string;
  uid?: number;
  gid?: number;
  /**
   * How the runner holds the command until its cgroup and network are set up: `bwrap` passes an info
   * pipe at fd 4 (bubblewrap writes the sandbox's pid there) and holds on fd 3 (--block-fd); `shell`
   * runs a shell that waits on fd 3 and then executes the command.
   */
  hold: 'bwrap' | 'shell';
}

export interface Sandbox {
  readonly kind: 'bwrap' | 'none';
  /** The user commands run as; null means the service's own user. */
  readonly user: { uid: number; gid: number } | null;
  /** Whether each process tree gets its own network namespace. */
  readonly networkIsolated: boolean;
  /** Where resource limits are enforced, or why not. */
  readonly limits: ResourceControl;
  /** Sentences for the start-up log saying what isolation is in force. */
  readonly description: string;
  /** The address an app must listen on to be reached by the router (its namespace's, or the host's loopback). */
  readonly listenHost: string;
  /** The slirp4netns binary and its socket directory, when the network is isolated. */
  readonly slirp: { binary: string; socketDir: string } | null;
  /**
   * Where a command sees its app directory's `src` (its working directory), `home` and `data`. Under
   * bubblewrap every app directory appears at /home/app, so build output that records absolute paths (a
   * Python virtualenv, for one) stays valid in another revision's copy.
   */
  appPaths(appDir: string, dataDir?: string): { src: string; home: string; data: string };
  /** How to spawn the command under this sandbox. */
  plan(spec: SandboxRun): SpawnPlan;
  /** Gives the command's user ownership of a directory it must write (no-op when it is us). */
  ownTree(dir: string): Promise<void>;
  /** Removes what the sandbox made for itself (its socket directory), once nothing runs. */
  dispose(): Promise<void>;
}

/** bubblewrap needs unprivileged user namespaces (or setuid); try it once rather than trusting it exists. */
async function bwrapWorks(bwrap: string, user: { uid: number; gid: number } | null, net: boolean): Promise<boolean> {
  try {
    await run(
      bwrap,
      [
        '--ro-bind',
        '/',
        '/',
        ...DEV_ARGS,
        '--proc',
        '/proc',
        '--unshare-pid',
        ...(net ? ['--unshare-net'] : []),
        '--die-with-parent',
        '/bin/true',
      ],
      { ...(user ?? {}), timeout: 10_000 },
    );
    return true;
  } catch {
    return false;
  }
}

async function chownTree(dir: string, uid: number, gid: number): Promise<void> {
  // The tree is the service's own at this point (extracted, or a fresh copy): no link is followed anyway.
  await run('chown', ['-R', '-h', '--', `${uid}:${gid}`, dir]);
}

/**
 * The shell that starts an app inside its sandbox: socat on the namespace's 127.0.0.1 for each host
 * forward (waiting until each listens, so that the app never starts before its database is reachable),
 * then the app's command as its child. When the app exits the shell stops the forwarders and exits with
 * its status: bubblewrap's init waits for every process of the namespace, so a forwarder left running
 * would keep the sandbox alive after its app. Signals from the runner reach the whole process group;
 * the shell only waits. Arguments: the command, then pairs of port and socket path.
 */
const FORWARDING_SHELL = [
  'cmd=$1; shift; forwarders=',
  'while [ $# -ge 2 ]; do',
  '  socat -lf /dev/null TCP-LISTEN:$1,bind=127.0.0.1,reuseaddr,fork UNIX-CONNECT:$2 </dev/null &',
  '  forwarders="$forwarders $!"',
  '  hex=$(printf \'%04X\' "$1"); n=0',
  '  until grep -q ":$hex 00000000:0000 0A" /proc/net/tcp; do',
  '    n=$((n+1)); [ $n -gt 1000 ] && break; sleep 0.01',
  '  done',
  '  shift 2',
  'done',
  '/bin/sh -c "$cmd" &',
  'app=$!',
  "trap ':' TERM INT HUP",
  'while :; do wait $app; status=$?; kill -0 $app 2>/dev/null || break; done',
  'kill $forwarders 2>/dev/null',
  'exit $status',
].join('\n');

/** Without bubblewrap: wait on fd 3 until the runner has placed this process, then run the command. */
const HOLDING_SHELL = 'read -r _ <&3; exec 3<&-; exec /bin/sh -c "$1"';

export async function createSandbox(options: {
  mode: SandboxMode;
  dataDir: string;
  limits: ResourceControl;
  logger: Pick<Logger, 'info' | 'warn'>;
}): Promise<Sandbox> {
  const { mode, dataDir, limits } = options;
  const user = process.getuid?.() === 0 ? NOBODY : null;
  const ownTree = async (dir: string) => {
    if (user) await chownTree(dir, user.uid, user.gid);
  };
  const bwrap = mode === 'none' ? null : await findExecutable('bwrap');
  const slirpBinary = mode === 'none' ? null : await findExecutable('slirp4netns');
  const socat = mode === 'none' ? null : await findExecutable('socat');
  const usable = bwrap !== null && (await bwrapWorks(bwrap, user, false));
  const netUsable = usable && slirpBinary !== null && socat !== null && (await bwrapWorks(bwrap, user, true));
  if (mode === 'bwrap' && !netUsable) {
    throw new Error(
      'SLIPWAY_SANDBOX=bwrap but ' +
        (!usable
          ? 'bubblewrap is not installed or cannot create namespaces here'
          : `${slirpBinary === null ? 'slirp4netns' : 'socat'} is not installed (each app gets its own network through them)`) +
        ' (install the bubblewrap, slirp4netns and socat packages, or set SLIPWAY_SANDBOX=auto)',
    );
  }
  const who = user ? 'as user nobody' : "as the service's own user";
  if (usable && bwrap) {
    // The API sockets of slirp4netns: a directory only the service may enter; short, for socket paths.
    const socketDir = netUsable ? await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-net-')) : null;
    // The app's user must pass through it (never list it) to the sockets of its own forwards.
    if (socketDir) await fs.chmod(socketDir, 0o711);
    const slirp = netUsable && slirpBinary && socketDir ? { binary: slirpBinary, socketDir } : null;
    // In its own network an app resolves names through slirp4netns's DNS forwarder (the host's resolver
    // may listen on the host's loopback, out of reach): a resolv.conf of ours, where the host's is read.
    const resolvConf = slirp ? path.join(slirp.socketDir, 'resolv.conf') : null;
    if (resolvConf) await fs.writeFile(resolvConf, `nameserver ${SLIRP_DNS}\n`, { mode: 0o644 });
    const resolvTarget = await fs.realpath('/etc/resolv.conf').catch(() => '/etc/resolv.conf');
    const hidden = await presentHiddenDirs();
    // A Node.js installed under a hidden directory (nvm in /root, say) stays usable.
    const nodeUnder = hidden.some((dir) => NODE_PREFIX.startsWith(`${dir}/`));
    const network = slirp
      ? 'its own network namespace (slirp4netns: egress only; the host loopback, the service and other apps unreachable except its database and the API)'
      : "the host's network (slirp4netns or socat is missing: apps reach every loopback service of the machine, the service's database port and other apps' ports; install them)";
    return {
      kind: 'bwrap',
      user,
      networkIsolated: slirp !== null,
      limits,
      slirp,
      listenHost: slirp ? '0.0.0.0' : '127.0.0.1',
      dispose: async () => {
        if (socketDir) await fs.rm(socketDir, { recursive: true, force: true });
      },
      description:
        `apps and builds run under bubblewrap ${who}: read-only system, builds sealed read-only, private /tmp and PID namespace, ` +
        `the data directory hidden; network: ${network}; resources: ${limits.description}`,
      ownTree,
      appPaths: () => ({
        src: `${SANDBOX_APP_DIR}/src`,
        home: `${SANDBOX_APP_DIR}/home`,
        data: `${SANDBOX_APP_DIR}/data`,
      }),
      plan(spec) {
        const app = spec.purpose === 'app';
        const forwards = app && slirp ? (spec.forwards ?? []) : [];
        const files = app
          ? [
              '--ro-bind',
              path.join(spec.appDir, 'src'),
              `${SANDBOX_APP_DIR}/src`,
              '--tmpfs',
              `${SANDBOX_APP_DIR}/home`,
              ...(spec.dataDir ? ['--bind', spec.dataDir, `${SANDBOX_APP_DIR}/data`] : []),
              ...forwards.flatMap((f) => [
                '--ro-bind',
                f.socketPath,
                `${SANDBOX_SOCKET_DIR}/${path.basename(f.socketPath)}`,
              ]),
            ]
          : ['--bind', spec.appDir, SANDBOX_APP_DIR];
        const command = forwards.length
          ? [
              '/bin/sh',
              '-c',
              FORWARDING_SHELL,
              'slipway-app',
              spec.command,
              ...forwards.flatMap((f) => [String(f.port), `${SANDBOX_SOCKET_DIR}/${path.basename(f.socketPath)}`]),
            ]
          : ['/bin/sh', '-c', spec.command];
        const args = [
          '--die-with-parent',
          '--unshare-pid',
          '--unshare-ipc',
          '--unshare-uts',
          ...(slirp ? ['--unshare-net'] : []),
          '--ro-bind',
          '/',
          '/',
          ...DEV_ARGS,
          '--proc',
          '/proc',
          '--tmpfs',
          '/tmp',
          '--tmpfs',
          SANDBOX_HOME,
          // A Node.js installed under /home (nvm, for one) stays usable.
          ...(NODE_PREFIX.startsWith(`${SANDBOX_HOME}/`) ? ['--ro-bind', NODE_PREFIX, NODE_PREFIX] : []),
          // Hide the service's data directory and sockets; the command's own directory appears at /home/app.
          '--tmpfs',
          dataDir,
          ...(socketDir ? ['--tmpfs', socketDir] : []),
          // The machine's Unix sockets (PostgreSQL, MariaDB, Redis, D-Bus, a container engine) live
          // under /run: a read-only mount does not keep a process from connecting to them.
          '--tmpfs',
          '/run',
          ...hidden.flatMap((dir) => ['--tmpfs', dir]),
          ...(nodeUnder ? ['--ro-bind', NODE_PREFIX, NODE_PREFIX] : []),
          ...(resolvConf ? ['--ro-bind', resolvConf, resolvTarget] : []),
          ...files,
          '--chdir',
          `${SANDBOX_APP_DIR}/src`,
          '--block-fd',
          '3',
          '--info-fd',
          '4',
          ...command,
        ];
        return { file: bwrap, args, cwd: path.join(spec.appDir, 'src'), hold: 'bwrap', ...(user ?? {}) };
      },
    };
  }
  const description =
    (mode === 'none'
      ? `apps run without a sandbox (SLIPWAY_SANDBOX=none) ${who}`
      : `bubblewrap is not available, so apps run without a sandbox ${who}` +
        (user ? '' : ': they can read everything the service can, including its data directory; install bubblewrap')) +
    `; they share the host's network; resources: ${limits.description}`;
  return {
    kind: 'none',
    user,
    networkIsolated: false,
    limits,
    slirp: null,
    listenHost: '127.0.0.1',
    description,
    ownTree,
    dispose: async () => undefined,
    // An app's HOME cannot be in its sealed snapshot: it is the `home` beside its data directory.
    appPaths: (appDir, ownData) => ({
      src: path.join(appDir, 'src'),
      home: ownData ? path.join(path.dirname(ownData), 'home') : path.join(appDir, 'home'),
      data: ownData ?? path.join(appDir, 'data'),
    }),
    plan(spec) {
      return {
        file: '/bin/sh',
        args: ['-c', HOLDING_SHELL, 'slipway', spec.command],
        cwd: path.join(spec.appDir, 'src'),
        hold: 'shell',
        ...(user ?? {}),
      };
    },
  };
}
