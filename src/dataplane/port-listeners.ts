/**
 * Who listens on a TCP port of the host's network, from /proc/net/tcp and tcp6: for a data plane whose
 * apps share the host's network (no network namespace of their own, docs/data-plane.md), where any
 * process may bind the port an instance was given before the instance does. The health check counts an
 * answer on the port only when no other user's process listens there (src/dataplane/app-supervisor.ts).
 *
 * A listener is told apart by its user: with a uid per deployment (the service running as root) another
 * app's squatting is seen; with every app running as the service's own user it cannot be, and is not.
 */
import fs from 'node:fs/promises';

/** TCP state LISTEN, as /proc/net/tcp writes it. */
const LISTEN = '0A';

/**
 * The uids owning sockets that listen on `port` (any local address), from /proc/net's tables of the
 * reader's network namespace; an unreadable table adds nothing.
 */
export async function listenerUids(port: number, procNet = '/proc/net'): Promise<number[]> {
  const uids = new Set<number>();
  for (const table of ['tcp', 'tcp6']) {
    const text = await fs.readFile(`${procNet}/${table}`, 'utf8').catch(() => '');
    for (const line of text.split('\n').slice(1)) {
      // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
      const fields = line.trim().split(/\s+/);
      if (fields.length < 8 || fields[3] !== LISTEN) continue;
      const local = fields[1]!;
      if (Number.parseInt(local.slice(local.lastIndexOf(':') + 1), 16) !== port) continue;
      uids.add(Number(fields[7]));
    }
  }
  return [...uids];
}

/** The real uid of a process, from /proc/<pid>/status; null once it is gone. */
export async function processUid(pid: number): Promise<number | null> {
  const status = await fs.readFile(`/proc/${pid}/status`, 'utf8').catch(() => null);
  const uid = status?.match(/^Uid:\s+(\d+)/m)?.[1];
  return uid === undefined ? null : Number(uid);
}
