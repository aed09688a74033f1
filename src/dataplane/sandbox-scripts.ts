/**
 * The shell scripts a sandboxed command is started through (src/dataplane/sandbox.ts): passed to
 * `/bin/sh -c` as one argument, with the command and its settings as further arguments, never
 * interpolated into the script.
 */
import { SANDBOX_APP_DIR } from './sandbox-mounts.ts';

/**
 * The shell that starts an app (or, when a way to its user is given, a build) inside its sandbox: socat
 * on the namespace's 127.0.0.1 for each host forward (waiting until each listens, so that the app never
 * starts before its database is reachable), then the command as its child. With `userns` (the program
 * is `unshare`) the command runs in a user namespace of its own as `uid`:`gid`, the last one: the shell
 * first limits the sandbox's namespace to that one; with `setuid` (the program is `setpriv`) it runs
 * as the subordinate `uid`:`gid`, and the shell first refuses the namespace any further user namespace
 * and gives the private /tmp and HOME to that uid (src/dataplane/sandbox-user-mapping.ts, UserMapping).
 * It runs nothing when it cannot. When the app exits the shell stops the forwarders and exits with its status:
 * bubblewrap's init waits for every process of the namespace, so a forwarder left running would keep the
 * sandbox alive after its app. Signals from the runner reach the whole process group; the shell only
 * waits. Arguments: the command, the program (or empty), `userns` or `setuid`, uid, gid, then pairs of
 * port and socket path.
 */
export const FORWARDING_SHELL = [
  'cmd=$1; program=$2; how=$3; uid=$4; gid=$5; shift 5; forwarders=',
  'if [ "$how" = setuid ]; then limit=0; else limit=1; fi',
  'if [ -n "$program" ] && ! echo $limit 2>/dev/null >/proc/sys/user/max_user_namespaces; then',
  "  echo 'slipway: the sandbox could not refuse user namespaces to the command' >&2; exit 125",
  'fi',
  // bubblewrap made the directory the app's own are mounted in (0700): passable, still the shell's (its sockets are there).
  `if [ "$how" = setuid ] && [ -O ${SANDBOX_APP_DIR} ] && ! chmod 0755 ${SANDBOX_APP_DIR}; then exit 125; fi`,
  'if [ "$how" = setuid ]; then for dir in /tmp "$HOME"; do',
  '  [ -d "$dir" ] || continue',
  '  chown -h "$uid:$gid" "$dir" && continue',
  "  echo 'slipway: the sandbox could not give its /tmp and HOME to the command' >&2; exit 125",
  'done; fi',
  'while [ $# -ge 2 ]; do',
  '  socat -lf /dev/null TCP-LISTEN:$1,bind=127.0.0.1,reuseaddr,fork UNIX-CONNECT:$2 </dev/null &',
  '  forwarders="$forwarders $!"',
  '  hex=$(printf \'%04X\' "$1"); n=0',
  '  until grep -q ":$hex 00000000:0000 0A" /proc/net/tcp; do',
  '    n=$((n+1)); [ $n -gt 1000 ] && break; sleep 0.01',
  '  done',
  '  shift 2',
  'done',
  'if [ "$how" = userns ]; then "$program" --user --map-user="$uid" --map-group="$gid" -- /bin/sh -c "$cmd" &',
  'elif [ "$how" = setuid ]; then',
  '  "$program" --reuid="$uid" --regid="$gid" --clear-groups --inh-caps=-all --no-new-privs -- /bin/sh -c "$cmd" &',
  'else /bin/sh -c "$cmd" &',
  'fi',
  'app=$!',
  "trap ':' TERM INT HUP",
  'while :; do wait $app; status=$?; kill -0 $app 2>/dev/null || break; done',
  'kill $forwarders 2>/dev/null',
  'exit $status',
].join('\n');

/** Without bubblewrap: wait on fd 3 until the runner has placed this process, then run the command. */
export const HOLDING_SHELL = 'read -r _ <&3; exec 3<&-; exec /bin/sh -c "$1"';
