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
 * When the service runs as root, what it runs runs as `nobody`; as an ordinary user, as that user (in a
 * user namespace of bubblewrap's, see UserMapping). At start a probe makes one whole sandbox, network
 * and all (src/dataplane/sandbox-probe.ts): where the host lacks something the start log says what, and
 * SLIPWAY_SANDBOX=bwrap refuses to start. Without bubblewrap processes run bare (still in a cgroup when
 * the service may make one), which contains nothing: the start log says so.
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
import { bubblewrapProblem, networkProblem, tunProblem } from './sandbox-probe.ts';

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

async function chownTree(dir: string, uid: number, gid: number): Promise<void> {
  // The tree is the service's own at this point (extracted, or a fresh copy): no link is followed anyway.
  await run('chown', ['-R', '-h', '--', `${uid}:${gid}`, dir]);
}

/**
 * The shell that starts an app inside its sandbox: socat on the namespace's 127.0.0.1 for each host
 * forward (waiting until each listens, so that the app never starts before its database is reachable),
 * then the app's command as its child (in a user namespace of its own as `uid`:`gid` when `unshare` is
 * given, see UserMapping). When the app exits the shell stops the forwarders and exits with its status:
 * bubblewrap's init waits for every process of the namespace, so a forwarder left running would keep the
 * sandbox alive after its app. Signals from the runner reach the whole process group; the shell only
 * waits. Arguments: the command, `unshare` (or empty), uid, gid, then pairs of port and socket path.
 */
const FORWARDING_SHELL = [
  'cmd=$1; unshare=$2; uid=$3; gid=$4; shift 4; forwarders=',
  'while [ $# -ge 2 ]; do',
  '  socat -lf /dev/null TCP-LISTEN:$1,bind=127.0.0.1,reuseaddr,fork UNIX-CONNECT:$2 </dev/null &',
  '  forwarders="$forwarders $!"',
  '  hex=$(printf \'%04X\' "$1"); n=0',
  '  until grep -q ":$hex 00000000:0000 0A" /proc/net/tcp; do',
  '    n=$((n+1)); [ $n -gt 1000 ] && break; sleep 0.01',
  '  done',
  '  shift 2',
  'done',
  'if [ -n "$unshare" ]; then "$unshare" --user --map-user="$uid" --map-group="$gid" -- /bin/sh -c "$cmd" &',
  'else /bin/sh -c "$cmd" &',
  'fi',
  'app=$!',
  "trap ':' TERM INT HUP",
  'while :; do wait $app; status=$?; kill -0 $app 2>/dev/null || break; done',
  'kill $forwarders 2>/dev/null',
  'exit $status',
].join('\n');

/** Without bubblewrap: wait on fd 3 until the runner has placed this process, then run the command. */
const HOLDING_SHELL = 'read -r _ <&3; exec 3<&-; exec /bin/sh -c "$1"';

/** The programs a sandbox is made with; null when not installed. */
export interface SandboxTools {
  bwrap: string | null;
  slirp4netns: string | null;
  socat: string | null;
  /** util-linux `unshare`, for the command's own user namespace (UserMapping). */
  unshare: string | null;
}

async function findTools(): Promise<SandboxTools> {
  return {
    bwrap: await findExecutable('bwrap'),
    slirp4netns: await findExecutable('slirp4netns'),
    socat: await findExecutable('socat'),
    unshare: await findExecutable('unshare'),
  };
}

/**
 * How the users of a sandbox with a network of its own are mapped when the service is not root.
 * slirp4netns, started by the service's user, joins the sandbox's user namespace and becomes root there
 * for its own sandbox (`setegid(0)`): bubblewrap must map the service's user to uid 0 in it, or slirp4netns
 * exits with `setegid(0) / parent failed`. That root has no capabilities (`--cap-drop ALL`) and no more
 * rights on files than the service's user: it is the same user to the kernel, and the mounts hiding the
 * service's data are set up before the command starts and cannot be undone without capabilities. The
 * one capability kept, CAP_SETFCAP in the sandbox's own user namespace (the kernel asks it of whoever maps
 * uid 0 into a further namespace), is held by the sandbox's shell and socat only: the command itself runs
 * in a nested user namespace as the service's own uid (`unshare --map-user`, util-linux 2.38 and later),
 * without any capability, as it would without the mapping. With an older `unshare` it runs as uid 0 of
 * its namespace, still without capabilities; the start log says so.
 */
interface UserMapping {
  /** bubblewrap's arguments for the sandbox's user namespace. */
  bwrapArgs: string[];
  /** `unshare` with the uid and gid the command runs as inside, or null to run it as it is. */
  runAs: { unshare: string; uid: number; gid: number } | null;
  /** The uid the command runs as inside (what the probe expects). */
  uidInside: number;
}

async function userMapping(
  tools: SandboxTools,
  user: { uid: number; gid: number } | null,
  ownNetwork: boolean,
): Promise<UserMapping> {
  // As root the command runs as nobody, mapped to itself; slirp4netns runs as root and needs no mapping.
  if (user) return { bwrapArgs: [], runAs: null, uidInside: user.uid };
  const uid = process.getuid?.() ?? 0;
  const gid = process.getgid?.() ?? 0;
  // Without a network of its own bubblewrap's default (the service's uid, mapped to itself) serves.
  if (!ownNetwork) return { bwrapArgs: [], runAs: null, uidInside: uid };
  const mapsUsers =
    tools.unshare !== null &&
    (await run(tools.unshare, ['--help']).then(
      ({ stdout }) => stdout.includes('--map-user'),
      () => false,
    ));
  const rootInside = ['--unshare-user', '--uid', '0', '--gid', '0', '--cap-drop', 'ALL'];
  if (!mapsUsers || !tools.unshare) return { bwrapArgs: rootInside, runAs: null, uidInside: 0 };
  return {
    bwrapArgs: [...rootInside, '--cap-add', 'CAP_SETFCAP'],
    runAs: { unshare: tools.unshare, uid, gid },
    uidInside: uid,
  };
}

export async function createSandbox(options: {
  mode: SandboxMode;
  dataDir: string;
  limits: ResourceControl;
  logger: Pick<Logger, 'info' | 'warn'>;
  /** The programs to use instead of those installed (tests). */
  tools?: Partial<SandboxTools>;
}): Promise<Sandbox> {
  const { mode, dataDir, limits } = options;
  const user = process.getuid?.() === 0 ? NOBODY : null;
  const who = user ? 'as user nobody' : "as the service's own user";
  if (mode === 'none')
    return bareSandbox({ user, limits, why: `apps run without a sandbox (SLIPWAY_SANDBOX=none) ${who}` });
  const tools = { ...(await findTools()), ...options.tools };
  const bwrapProblem =
    tools.bwrap === null
      ? 'bubblewrap is not installed (Debian package bubblewrap)'
      : await bubblewrapProblem(tools.bwrap, user, DEV_ARGS);
  if (bwrapProblem !== null || tools.bwrap === null) {
    if (mode === 'bwrap') throw new Error(`SLIPWAY_SANDBOX=bwrap but ${bwrapProblem} (or set SLIPWAY_SANDBOX=auto)`);
    return bareSandbox({
      user,
      limits,
      why:
        `apps run without a sandbox ${who}, because ${bwrapProblem}` +
        (user ? '' : ': they can read everything the service can, including its data directory'),
    });
  }
  // The real thing once: a sandbox with its own network, as every app gets it.
  let networkMissing =
    tools.slirp4netns === null
      ? 'slirp4netns is not installed (Debian package slirp4netns)'
      : tools.socat === null
        ? 'socat is not installed (Debian package socat)'
        : await tunProblem();
  if (networkMissing === null && tools.slirp4netns !== null) {
    const mapping = await userMapping(tools, user, true);
    const candidate = await bwrapSandbox({
      bwrap: tools.bwrap,
      slirpBinary: tools.slirp4netns,
      mapping,
      user,
      who,
      dataDir,
      limits,
    });
    networkMissing = await networkProblem(candidate, mapping.uidInside).catch(
      (error: unknown) => `the probe failed: ${String(error)}`,
    );
    if (networkMissing === null) return candidate;
    await candidate.dispose();
  }
  if (mode === 'bwrap') {
    throw new Error(
      `SLIPWAY_SANDBOX=bwrap but apps cannot get a network of their own here: ${networkMissing} ` +
        '(see docs/operations.md, "Host setups"; or set SLIPWAY_SANDBOX=auto to run apps on the host\'s network)',
    );
  }
  const mapping = await userMapping(tools, user, false);
  return bwrapSandbox({ bwrap: tools.bwrap, slirpBinary: null, mapping, user, who, dataDir, limits, networkMissing });
}

/** A sandbox of bubblewrap, with a network of its own when `slirpBinary` is given. */
async function bwrapSandbox(options: {
  bwrap: string;
  slirpBinary: string | null;
  mapping: UserMapping;
  user: { uid: number; gid: number } | null;
  who: string;
  dataDir: string;
  limits: ResourceControl;
  /** Why there is no network of its own, for the start log. */
  networkMissing?: string | null;
}): Promise<Sandbox> {
  const { bwrap, slirpBinary, mapping, user, dataDir, limits } = options;
  const ownTree = async (dir: string) => {
    if (user) await chownTree(dir, user.uid, user.gid);
  };
  // The API sockets of slirp4netns: a directory only the service may enter; short, for socket paths.
  const socketDir = slirpBinary ? await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-net-')) : null;
  // The app's user must pass through it (never list it) to the sockets of its own forwards.
  if (socketDir) await fs.chmod(socketDir, 0o711);
  const slirp = slirpBinary && socketDir ? { binary: slirpBinary, socketDir } : null;
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
    : `the host's network (${options.networkMissing ?? 'no network of its own'}: apps reach every loopback service of the machine, the service's database port and other apps' ports)`;
  const runAs = mapping.runAs;
  const inside =
    user || !slirp
      ? options.who
      : runAs
        ? `${options.who} (uid ${runAs.uid} in a user namespace of its own, without capabilities)`
        : `${options.who} (uid 0 of its own user namespace, without capabilities: this unshare cannot map users, util-linux 2.38 can)`;
  const runAsArgs = runAs ? [runAs.unshare, '--user', `--map-user=${runAs.uid}`, `--map-group=${runAs.gid}`, '--'] : [];
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
      `apps and builds run under bubblewrap ${inside}: read-only system, builds sealed read-only, private /tmp and PID namespace, ` +
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
            runAs?.unshare ?? '',
            String(runAs?.uid ?? ''),
            String(runAs?.gid ?? ''),
            ...forwards.flatMap((f) => [String(f.port), `${SANDBOX_SOCKET_DIR}/${path.basename(f.socketPath)}`]),
          ]
        : [...runAsArgs, '/bin/sh', '-c', spec.command];
      const args = [
        ...mapping.bwrapArgs,
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

/** No sandbox: the command runs as the service's user (nobody when root), still in a cgroup when it may. */
function bareSandbox(options: {
  user: { uid: number; gid: number } | null;
  limits: ResourceControl;
  /** What the start log says about it. */
  why: string;
}): Sandbox {
  const { user, limits } = options;
  return {
    kind: 'none',
    user,
    networkIsolated: false,
    limits,
    slirp: null,
    listenHost: '127.0.0.1',
    description: `${options.why}; they share the host's network; resources: ${limits.description}`,
    ownTree: async (dir) => {
      if (user) await chownTree(dir, user.uid, user.gid);
    },
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
