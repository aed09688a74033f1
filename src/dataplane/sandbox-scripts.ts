/**
 * The shell scripts a sandboxed command is started through (src/dataplane/sandbox.ts): passed to
 * `/bin/sh -c` as one argument, with the command and its settings as further arguments, never
 * interpolated into the script.
 */

/**
 * The shell that starts an app (or, when `unshare` is given, a build) inside its sandbox: socat on the
 * namespace's 127.0.0.1 for each host forward (waiting until each listens, so that the app never starts
 * before its database is reachable), then the command as its child. When `unshare` is given, the
 * command runs in a user namespace of its own as `uid`:`gid`, the last one: the shell first limits the
 * sandbox's namespace to that one (src/dataplane/sandbox-user-mapping.ts, UserMapping), and runs nothing
 * when it cannot. When the app exits the shell stops the forwarders and exits with its status:
 * bubblewrap's init waits for every process of the namespace, so a forwarder left running would keep the
 * sandbox alive after its app. Signals from the runner reach the whole process group; the shell only
 * waits. Arguments: the command, `unshare` (or empty), uid, gid, then pairs of port and socket path.
 */
export const FORWARDING_SHELL = [
  'cmd=$1; unshare=$2; uid=$3; gid=$4; shift 4; forwarders=',
  'if [ -n "$unshare" ] && ! echo 1 2>/dev/null >/proc/sys/user/max_user_namespaces; then',
  "  echo 'slipway: the sandbox could not refuse user namespaces to the command' >&2; exit 125",
  'fi',
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
export const HOLDING_SHELL = 'read -r _ <&3; exec 3<&-; exec /bin/sh -c "$1"';
