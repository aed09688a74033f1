/**
 * Who a sandboxed command is inside its sandbox (src/dataplane/sandbox.ts): the programs a sandbox is
 * made with, and the user namespace mapping bubblewrap is given. Which host user it is:
 * src/dataplane/app-uids.ts.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { findExecutable } from './executables.ts';
import type { SubordinateIds } from './subordinate-ids.ts';

const run = promisify(execFile);

/** The programs a sandbox is made with; null when not installed. */
export interface SandboxTools {
  bwrap: string | null;
  slirp4netns: string | null;
  socat: string | null;
  /** util-linux `unshare`, for the command's own user namespace (UserMapping). */
  unshare: string | null;
  /** util-linux `setpriv`, for the deployment's own uid of a subordinate range (UserMapping). */
  setpriv: string | null;
}

export async function findTools(): Promise<SandboxTools> {
  return {
    bwrap: await findExecutable('bwrap'),
    slirp4netns: await findExecutable('slirp4netns'),
    socat: await findExecutable('socat'),
    unshare: await findExecutable('unshare'),
    setpriv: await findExecutable('setpriv'),
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
 *
 * No user namespace can be made inside (issue 33: each would hand an app the kernel's whole namespace
 * surface). Where slirp4netns need not join the sandbox's user namespace (the service is root, or there
 * is no network of its own) bubblewrap's `--disable-userns` does it: it sets the sandbox namespace's
 * `user.max_user_namespaces` to 1 and enters one nested namespace, which uses that one. As an ordinary
 * user with a network of its own bubblewrap's nested namespace would come before slirp4netns joins, and
 * slirp4netns could no longer enter the network namespace; there the sandbox's shell does the same
 * itself (src/dataplane/sandbox-scripts.ts): it writes 1 to that sysctl (the one more capability it
 * keeps, CAP_SYS_RESOURCE in the sandbox's own namespace, allows it) before `unshare --map-user` makes
 * the command's namespace. The command, without capabilities in the sandbox's namespace, cannot raise
 * the limit again. With an older `unshare` nothing refuses them, and the start log says so.
 *
 * With a subordinate range (src/dataplane/subordinate-ids.ts) the sandbox's user namespace is made
 * before bubblewrap, by `unshare` and newuidmap: the service's user is root in it (slirp4netns joins it
 * as above) and the deployment's uid of the range is itself. bubblewrap, root there, makes the other
 * namespaces without a user namespace of its own, keeping only CAP_SETUID, CAP_SETGID, CAP_CHOWN and
 * CAP_SYS_RESOURCE in that namespace for the sandbox's shell, which sets the namespace's
 * `user.max_user_namespaces` to 0, gives the private /tmp and HOME to the deployment's uid, and
 * starts the command as that uid with `setpriv` (no capabilities, no_new_privs). The command is that
 * host uid to the kernel: its per-user counters are its deployment's own, and it can signal nothing
 * of the shell's or the service's.
 */
export interface UserMapping {
  /** bubblewrap's arguments for the sandbox's user namespace. */
  bwrapArgs: string[];
  /**
   * How the command gets its own user: `userns`, `unshare` with the uid and gid it runs as inside;
   * `setuid`, `setpriv` to the uid and gid of a subordinate range (the deployment's, in each plan).
   * Null to run it as it is.
   */
  runAs: { program: string; how: 'userns' | 'setuid'; uid: number; gid: number } | null;
  /** The subordinate range the sandbox's user namespace maps (see above), or null. */
  ids: SubordinateIds | null;
  /** The uid the command runs as inside (what the probe expects). */
  uidInside: number;
  /** Whether the command is refused user namespaces of its own (see above). */
  refusesUserNamespaces: boolean;
}

/** bubblewrap's own refusal of nested user namespaces, with the user namespace it needs. */
const DISABLE_USERNS = ['--unshare-user', '--disable-userns'];

export async function userMapping(
  tools: SandboxTools,
  user: { uid: number; gid: number } | null,
  ownNetwork: boolean,
  ids: SubordinateIds | null = null,
): Promise<UserMapping> {
  const plain = { runAs: null, ids: null };
  // As root the command runs as its deployment's uid, mapped to itself; slirp4netns runs as root and joins only the
  // network namespace (src/dataplane/sandbox-network.ts), so bubblewrap's nested namespace is no obstacle.
  if (user) return { ...plain, bwrapArgs: DISABLE_USERNS, uidInside: user.uid, refusesUserNamespaces: true };
  if (ids && tools.setpriv) {
    const keep = ['CAP_SETUID', 'CAP_SETGID', 'CAP_CHOWN', 'CAP_SYS_RESOURCE'].flatMap((cap) => ['--cap-add', cap]);
    return {
      bwrapArgs: ['--cap-drop', 'ALL', ...keep],
      runAs: { program: tools.setpriv, how: 'setuid', uid: ids.shared, gid: ids.shared },
      ids,
      uidInside: ids.shared,
      refusesUserNamespaces: true,
    };
  }
  const uid = process.getuid?.() ?? 0;
  const gid = process.getgid?.() ?? 0;
  // Without a network of its own bubblewrap's default (the service's uid, mapped to itself) serves.
  if (!ownNetwork) return { ...plain, bwrapArgs: DISABLE_USERNS, uidInside: uid, refusesUserNamespaces: true };
  const mapsUsers =
    tools.unshare !== null &&
    (await run(tools.unshare, ['--help']).then(
      ({ stdout }) => stdout.includes('--map-user'),
      () => false,
    ));
  const rootInside = ['--unshare-user', '--uid', '0', '--gid', '0', '--cap-drop', 'ALL'];
  if (!mapsUsers || !tools.unshare)
    return { ...plain, bwrapArgs: rootInside, uidInside: 0, refusesUserNamespaces: false };
  return {
    bwrapArgs: [...rootInside, '--cap-add', 'CAP_SETFCAP', '--cap-add', 'CAP_SYS_RESOURCE'],
    runAs: { program: tools.unshare, how: 'userns', uid, gid },
    ids: null,
    uidInside: uid,
    refusesUserNamespaces: true,
  };
}
