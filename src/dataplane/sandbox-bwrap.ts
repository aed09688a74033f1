/**
 * The bubblewrap sandbox (src/dataplane/sandbox.ts says what it contains and why): the arguments each
 * build and app instance is spawned with.
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { AppUsers } from './app-uids.ts';
import type { ResourceControl } from './resource-limits.ts';
import type { Sandbox } from './sandbox.ts';
import type { SeccompFilter } from './seccomp-filter.ts';
import {
  DEV_ARGS,
  NODE_PREFIX,
  SANDBOX_APP_DIR,
  SANDBOX_HOME,
  SANDBOX_SOCKET_DIR,
  presentHiddenDirs,
} from './sandbox-mounts.ts';
import { FORWARDING_SHELL } from './sandbox-scripts.ts';
import type { UserMapping } from './sandbox-user-mapping.ts';

/** Where a build sees the sockets of its forwards (src/dataplane/build-registries.ts): /home is its own tmpfs. */
const BUILD_SOCKET_DIR = '/home/.slipway';

/** slirp4netns's DNS forwarder, in the network it gives a namespace (10.0.2.0/24). */
const SLIRP_DNS = '10.0.2.3';

/** The descriptor bubblewrap reads the seccomp filter from (0-2 output, 3 the hold, 4 its report). */
export const SECCOMP_FD = 5;

/** What the start log says of the sandbox: who commands run as, what the kernel refuses them, their network. */
function describeBwrapSandbox(options: {
  isolated: boolean;
  mapping: UserMapping;
  users: AppUsers;
  who: string;
  limits: ResourceControl;
  seccomp: SeccompFilter;
  networkMissing?: string | null;
}): string {
  const { isolated, mapping, users, who, limits, seccomp, networkMissing } = options;
  const runAs = mapping.runAs;
  const network = isolated
    ? 'its own network namespace (slirp4netns: egress only; the host loopback, the service and other apps unreachable except its database and the API)'
    : `the host's network (${networkMissing ?? 'no network of its own'}: apps reach every loopback service of the machine, the service's database port and other apps' ports)`;
  const inside =
    users.fallback || mapping.ids || !isolated
      ? who
      : runAs
        ? `${who} (uid ${runAs.uid} in a user namespace of its own, without capabilities)`
        : `${who} (uid 0 of its own user namespace, without capabilities: this unshare cannot map users, util-linux 2.38 can)`;
  const kernel = [
    'a session of its own (no terminal)',
    mapping.refusesUserNamespaces
      ? 'no user namespaces inside'
      : 'user namespaces NOT refused inside (this unshare cannot map users, util-linux 2.38 can)',
    seccomp.program
      ? 'a seccomp filter refusing system calls apps never need'
      : `NO seccomp filter (${seccomp.problem}): apps reach kernel interfaces they never need (kernel keyrings, userfaultfd, io_uring, BPF)`,
  ].join(', ');
  return (
    `apps and builds run under bubblewrap ${inside}: read-only system, builds sealed read-only, private /tmp and PID namespace, ` +
    `the data directory hidden; kernel: ${kernel}; network: ${network}; resources: ${limits.description}`
  );
}

/** A sandbox of bubblewrap, with a network of its own when `slirpBinary` is given. */
export async function bwrapSandbox(options: {
  bwrap: string;
  slirpBinary: string | null;
  /** How slirp4netns is started outside the service's CPU reserve (service-cpu-reserve.ts). */
  ordinary?: (argv: readonly string[]) => string[];
  mapping: UserMapping;
  users: AppUsers;
  who: string;
  dataDir: string;
  limits: ResourceControl;
  /** The seccomp filter every command runs under, or why there is none. */
  seccomp: SeccompFilter;
  /** Why there is no network of its own, for the start log. */
  networkMissing?: string | null;
}): Promise<Sandbox> {
  const { bwrap, slirpBinary, mapping, users, dataDir, limits, seccomp } = options;
  const user = users.fallback;
  // The API sockets of slirp4netns: a directory only the service may enter; short, for socket paths.
  const socketDir = slirpBinary ? await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-net-')) : null;
  // The app's user must pass through it (never list it) to the sockets of its own forwards.
  if (socketDir) await fs.chmod(socketDir, 0o711);
  const slirp =
    slirpBinary && socketDir
      ? { binary: slirpBinary, socketDir, ...(options.ordinary ? { ordinary: options.ordinary } : {}) }
      : null;
  // In its own network an app resolves names through slirp4netns's DNS forwarder (the host's resolver
  // may listen on the host's loopback, out of reach): a resolv.conf of ours, where the host's is read.
  const resolvConf = slirp ? path.join(slirp.socketDir, 'resolv.conf') : null;
  if (resolvConf) await fs.writeFile(resolvConf, `nameserver ${SLIRP_DNS}\n`, { mode: 0o644 });
  const resolvTarget = await fs.realpath('/etc/resolv.conf').catch(() => '/etc/resolv.conf');
  const hidden = await presentHiddenDirs();
  // A Node.js installed under a hidden directory (nvm in /root, say) stays usable.
  const nodeUnder = hidden.some((dir) => NODE_PREFIX.startsWith(`${dir}/`));
  const runAs = mapping.runAs;
  return {
    kind: 'bwrap',
    user,
    ids: users.ids,
    networkIsolated: slirp !== null,
    limits,
    slirp,
    listenHost: slirp ? '0.0.0.0' : '127.0.0.1',
    dispose: async () => {
      if (socketDir) await fs.rm(socketDir, { recursive: true, force: true });
    },
    description: describeBwrapSandbox({ ...options, isolated: slirp !== null }),
    ownTree: (dir, deploymentId) => users.ownTree(dir, deploymentId),
    ownDir: (dir, deploymentId) => users.ownDir(dir, deploymentId),
    appPaths: () => ({
      src: `${SANDBOX_APP_DIR}/src`,
      home: `${SANDBOX_APP_DIR}/home`,
      data: `${SANDBOX_APP_DIR}/data`,
    }),
    plan(spec) {
      const app = spec.purpose === 'app';
      const forwards = slirp ? (spec.forwards ?? []) : [];
      // A build's directory is bound whole at /home/app: its sockets go beside it, never into its output.
      const socketsAt = app ? SANDBOX_SOCKET_DIR : BUILD_SOCKET_DIR;
      const socketBinds = forwards.flatMap((f) => [
        '--ro-bind',
        f.socketPath,
        `${socketsAt}/${path.basename(f.socketPath)}`,
      ]);
      const readOnly = (spec.readOnly ?? []).flatMap((r) => ['--ro-bind', r.source, r.target]);
      const files = app
        ? [
            '--ro-bind',
            path.join(spec.appDir, 'src'),
            `${SANDBOX_APP_DIR}/src`,
            '--tmpfs',
            `${SANDBOX_APP_DIR}/home`,
            ...(spec.dataDir ? ['--bind', spec.dataDir, `${SANDBOX_APP_DIR}/data`] : []),
            ...socketBinds,
            ...readOnly,
          ]
        : ['--bind', spec.appDir, SANDBOX_APP_DIR, ...socketBinds, ...readOnly];
      // The shell when there is something to start first: forwarders, or the command's user namespace.
      // With a subordinate range, the uid of the deployment that owns what the command writes.
      const owner = mapping.ids ? users.userFor(spec.dataDir ?? spec.appDir) : null;
      const command =
        forwards.length || runAs
          ? [
              '/bin/sh',
              '-c',
              FORWARDING_SHELL,
              'slipway-app',
              spec.command,
              runAs?.program ?? '',
              runAs?.how ?? '',
              String(owner?.uid ?? runAs?.uid ?? ''),
              String(owner?.gid ?? runAs?.gid ?? ''),
              ...forwards.flatMap((f) => [String(f.port), `${socketsAt}/${path.basename(f.socketPath)}`]),
            ]
          : ['/bin/sh', '-c', spec.command];
      const args = [
        ...mapping.bwrapArgs,
        '--die-with-parent',
        // A session of its own: no terminal of the service's to push input into (TIOCSTI), whatever
        // the service was started from.
        '--new-session',
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
        ...(seccomp.program ? ['--seccomp', String(SECCOMP_FD)] : []),
        ...command,
      ];
      if (mapping.ids && owner) {
        // bubblewrap in a user namespace where the service is root and the deployment's uid is itself.
        const [file, ...prefix] = mapping.ids.prefix({ first: owner.uid, count: 1 });
        return {
          file: file!,
          args: [...prefix, bwrap, ...args],
          cwd: path.join(spec.appDir, 'src'),
          hold: 'bwrap',
          seccomp: seccomp.program,
        };
      }
      return {
        file: bwrap,
        args,
        cwd: path.join(spec.appDir, 'src'),
        hold: 'bwrap',
        seccomp: seccomp.program,
        // As the owner of what it writes: its deployment's uid (src/dataplane/app-uids.ts).
        ...(users.userFor(spec.dataDir ?? spec.appDir) ?? {}),
      };
    },
  };
}
