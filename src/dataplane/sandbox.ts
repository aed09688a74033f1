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
 * When the service runs as root, what it runs runs as a uid of its deployment's own
 * (src/dataplane/app-uids.ts); as an ordinary user, as a uid of its deployment's own from the user's
 * subordinate range where the host gives one (src/dataplane/subordinate-ids.ts), else as that user (in
 * a user namespace of bubblewrap's, see UserMapping). Inside, it has a session of its own, no way to make user namespaces, and a seccomp
 * filter refusing system calls apps never need (src/dataplane/seccomp-filter.ts). At start a probe makes one whole sandbox, network
 * and all (src/dataplane/sandbox-probe.ts): where the host lacks something the start log says what, and
 * SLIPWAY_SANDBOX=bwrap refuses to start. Without bubblewrap processes run bare (still in a cgroup when
 * the service may make one), which contains nothing: the start log says so.
 */
import path from 'node:path';
import type { Logger } from 'pino';
import type { SandboxMode } from '../config.ts';
import { createAppUsers, type AppUsers } from './app-uids.ts';
import type { Limits, ResourceControl } from './resource-limits.ts';
import { bwrapSandbox } from './sandbox-bwrap.ts';
import type { SlirpOptions } from './sandbox-network.ts';
import { DEV_ARGS } from './sandbox-mounts.ts';
import { bubblewrapProblem, networkProblem, tunProblem } from './sandbox-probe.ts';
import { HOLDING_SHELL } from './sandbox-scripts.ts';
import { findTools, userMapping, type SandboxTools } from './sandbox-user-mapping.ts';
import { compileSeccompFilter } from './seccomp-filter.ts';
import type { SubordinateIds } from './subordinate-ids.ts';

export type { SandboxTools };

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
  /** Ways to the host: an app's database and the service's API; a build's registries on the host's loopback. */
  forwards?: readonly SandboxForward[];
  /** Host directories shown read-only at `target` (a build's registry settings); not without bubblewrap. */
  readOnly?: readonly { source: string; target: string }[];
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
  /** A compiled seccomp filter for bubblewrap, written to its fd 5 (`--seccomp 5`); null: none. */
  seccomp: Buffer | null;
}

export interface Sandbox {
  readonly kind: 'bwrap' | 'none';
  /** The user commands run as when no deployment owns what they write; null means the service's own user. */
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
  readonly slirp: SlirpOptions | null;
  /**
   * Where a command sees its app directory's `src` (its working directory), `home` and `data`. Under
   * bubblewrap every app directory appears at /home/app, so build output that records absolute paths (a
   * Python virtualenv, for one) stays valid in another revision's copy.
   */
  appPaths(appDir: string, dataDir?: string): { src: string; home: string; data: string };
  /** How to spawn the command under this sandbox. */
  plan(spec: SandboxRun): SpawnPlan;
  /**
   * Gives a tree a command must write to the deployment's user (`nobody` without a deployment; no-op
   * when that is the service's own user): a command runs as the owner of the directory it writes.
   */
  ownTree(dir: string, deploymentId?: string): Promise<void>;
  /** Gives one directory just made (not what is in it) to the deployment's user. */
  ownDir(dir: string, deploymentId: string): Promise<void>;
  /**
   * Not root, with a subordinate range: the ids deployments run as, which the service's own work on
   * their trees (sealing, removal: src/dataplane/build-snapshot.ts) must map. Null otherwise.
   */
  readonly ids: SubordinateIds | null;
  /** Removes what the sandbox made for itself (its socket directory), once nothing runs. */
  dispose(): Promise<void>;
}

export async function createSandbox(options: {
  mode: SandboxMode;
  dataDir: string;
  limits: ResourceControl;
  logger: Pick<Logger, 'info' | 'warn'>;
  /** The programs to use instead of those installed (tests). */
  tools?: Partial<SandboxTools>;
  /** Who commands run as (a uid per deployment when root); by default `nobody` when root. */
  users?: AppUsers;
  /** How slirp4netns is started outside the service's CPU reserve (service-cpu-reserve.ts). */
  ordinary?: (argv: readonly string[]) => string[];
}): Promise<Sandbox> {
  const { mode, dataDir, limits } = options;
  const users = options.users ?? createAppUsers({ range: { first: 0, count: 0 } });
  const user = users.fallback;
  const who = users.description;
  const tools = { ...(await findTools()), ...options.tools };
  const setpriv = tools.setpriv;
  if (mode === 'none')
    return bareSandbox({ users, limits, setpriv, why: `apps run without a sandbox (SLIPWAY_SANDBOX=none) ${who}` });
  const bwrapProblem =
    tools.bwrap === null
      ? 'bubblewrap is not installed (Debian package bubblewrap)'
      : await bubblewrapProblem(tools.bwrap, user, DEV_ARGS);
  if (bwrapProblem !== null || tools.bwrap === null) {
    if (mode === 'bwrap') throw new Error(`SLIPWAY_SANDBOX=bwrap but ${bwrapProblem} (or set SLIPWAY_SANDBOX=auto)`);
    return bareSandbox({
      users,
      limits,
      setpriv,
      why:
        `apps run without a sandbox ${who}, because ${bwrapProblem}` +
        (user ? '' : ': they can read everything the service can, including its data directory'),
    });
  }
  const seccomp = await compileSeccompFilter();
  // The real thing once: a sandbox with its own network, as every app gets it.
  let networkMissing =
    tools.slirp4netns === null
      ? 'slirp4netns is not installed (Debian package slirp4netns)'
      : tools.socat === null
        ? 'socat is not installed (Debian package socat)'
        : await tunProblem();
  if (networkMissing === null && tools.slirp4netns !== null) {
    const mapping = await userMapping(tools, user, true, users.ids);
    const candidate = await bwrapSandbox({
      bwrap: tools.bwrap,
      slirpBinary: tools.slirp4netns,
      ...(options.ordinary ? { ordinary: options.ordinary } : {}),
      mapping,
      users,
      who,
      dataDir,
      limits,
      seccomp,
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
  const mapping = await userMapping(tools, user, false, users.ids);
  return bwrapSandbox({
    bwrap: tools.bwrap,
    slirpBinary: null,
    mapping,
    users,
    who,
    dataDir,
    limits,
    seccomp,
    networkMissing,
  });
}

/** No sandbox: the command runs as its deployment's user (the service's own unless root), still in a cgroup when it may. */
function bareSandbox(options: {
  users: AppUsers;
  limits: ResourceControl;
  /** What the start log says about it. */
  why: string;
  /** util-linux setpriv, to run as a deployment's subordinate uid. */
  setpriv: string | null;
}): Sandbox {
  const { users, limits, setpriv } = options;
  return {
    kind: 'none',
    user: users.fallback,
    ids: users.ids,
    networkIsolated: false,
    limits,
    slirp: null,
    listenHost: '127.0.0.1',
    description: `${options.why}; they share the host's network; resources: ${limits.description}`,
    ownTree: (dir, deploymentId) => users.ownTree(dir, deploymentId),
    ownDir: (dir, deploymentId) => users.ownDir(dir, deploymentId),
    dispose: async () => undefined,
    // An app's HOME cannot be in its sealed snapshot: it is the `home` beside its data directory.
    appPaths: (appDir, ownData) => ({
      src: path.join(appDir, 'src'),
      home: ownData ? path.join(path.dirname(ownData), 'home') : path.join(appDir, 'home'),
      data: ownData ?? path.join(appDir, 'data'),
    }),
    plan(spec) {
      const owner = users.userFor(spec.dataDir ?? spec.appDir);
      const shell = ['/bin/sh', '-c', HOLDING_SHELL, 'slipway', spec.command];
      const cwd = path.join(spec.appDir, 'src');
      if (users.ids && owner && setpriv) {
        // Its deployment's subordinate uid: root of a user namespace mapping it, then that uid (app-uids.ts).
        const [file, ...prefix] = users.ids.prefix({ first: owner.uid, count: 1 });
        const become = [`--reuid=${owner.uid}`, `--regid=${owner.gid}`, '--clear-groups', '--inh-caps=-all'];
        return {
          file: file!,
          args: [...prefix, setpriv, ...become, '--no-new-privs', '--', ...shell],
          cwd,
          hold: 'shell',
          seccomp: null,
        };
      }
      const as = users.ids ? {} : (owner ?? {});
      return { file: shell[0]!, args: shell.slice(1), cwd, hold: 'shell', seccomp: null, ...as };
    },
  };
}
