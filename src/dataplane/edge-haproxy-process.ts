/**
 * HAProxy as a process of the service (src/dataplane/edge-haproxy.ts runs it): one that an earlier run
 * left behind is stopped, its worker runs as a user of its own, and it is driven by commands on its
 * runtime socket, its changes one at a time. Its start and supervision are src/dataplane/edge-haproxy-supervisor.ts.
 */
import fs from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import type { Logger } from 'pino';
import { identify, type ProcessIdentity, signalIdentified, waitGone } from './process-identity.ts';

/** One runtime API command (or several, `;`-separated); HAProxy answers and closes. */
export function runtimeCommand(socketPath: string, command: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.createConnection(socketPath);
    let answer = '';
    socket.setEncoding('utf8');
    socket.setTimeout(10_000, () => socket.destroy(new Error(`HAProxy did not answer '${command}'`)));
    socket.on('connect', () => socket.end(`${command}\n`));
    socket.on('data', (chunk: string) => (answer += chunk));
    socket.on('end', () => resolve(answer.trim()));
    socket.on('error', reject);
  });
}

/**
 * A runtime API command that must have done something: HAProxy says what went wrong in words, and those
 * words are thrown (HAProxy refused ...) instead of returned.
 */
export async function checkedRuntimeCommand(socketPath: string, command: string): Promise<string> {
  const answer = await runtimeCommand(socketPath, command);
  // These are the answers of a command that did nothing.
  if (/^(No such|Unknown|Require|Can't|Cannot|Invalid|Missing|Server is|Server still|'.*' expects)/m.test(answer))
    throw new Error(`HAProxy refused '${command}': ${answer}`);
  return answer;
}

/** Runtime changes run one at a time, each after the ones before it have settled. */
export interface ChangeQueue {
  enqueue: <T>(step: () => Promise<T>) => Promise<T>;
  /** Settles once every change queued so far has. */
  idle: () => Promise<unknown>;
}

export function createChangeQueue(): ChangeQueue {
  let chain: Promise<unknown> = Promise.resolve();
  return {
    enqueue<T>(step: () => Promise<T>): Promise<T> {
      const run = chain.then(step);
      chain = run.catch(() => undefined);
      return run;
    },
    idle: () => chain,
  };
}

/**
 * Stops the HAProxy an earlier run of the service left running on this directory (it holds the apps
 * port): every process, master and workers, whose command line runs this configuration. They are found
 * in /proc, not by the pid file, which names the master only and which a HAProxy that is still starting
 * may not have written yet; and a worker can outlive its master by a moment, holding the port. Returns
 * once all are gone, after a hard stop (SIGTERM) and, five seconds later, SIGKILL for what is left.
 */
export async function stopLeftover(configFile: string, logger: Logger): Promise<void> {
  const found = await haproxiesRunning(configFile);
  if (found.length === 0) return;
  logger.warn(
    { pids: found.map((p) => p.pid) },
    'app edge: stopping the HAProxy an earlier run of the service left behind',
  );
  for (const signal of ['SIGTERM', 'SIGKILL'] as const) {
    for (const leftover of found) await signalIdentified(leftover, signal);
    const gone = await Promise.all(found.map((leftover) => waitGone(leftover, 5_000)));
    if (gone.every(Boolean)) return;
  }
  logger.error(
    { pids: found.map((p) => p.pid) },
    'app edge: the HAProxy an earlier run left behind is still there after SIGKILL',
  );
}

/** The HAProxy processes whose command line runs this configuration file (`haproxy ... -f FILE`). */
async function haproxiesRunning(configFile: string): Promise<ProcessIdentity[]> {
  const found: ProcessIdentity[] = [];
  for (const entry of await fs.readdir('/proc').catch(() => [] as string[])) {
    if (!/^\d+$/.test(entry)) continue;
    const argv = (await fs.readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => '')).split('\0');
    const at = argv.indexOf('-f');
    if (at < 0 || argv[at + 1] !== configFile || path.basename(argv[0] ?? '') !== 'haproxy') continue;
    const identity = await identify(Number(entry));
    if (identity !== null) found.push(identity);
  }
  return found;
}

/** The `haproxy` system user and group when they exist, else nobody. */
export async function workerUser(): Promise<{ user: string; group: string }> {
  const has = async (file: string, name: string) =>
    (await fs.readFile(file, 'utf8').catch(() => '')).split('\n').some((line) => line.startsWith(`${name}:`));
  return (await has('/etc/passwd', 'haproxy')) && (await has('/etc/group', 'haproxy'))
    ? { user: 'haproxy', group: 'haproxy' }
    : { user: 'nobody', group: 'nogroup' };
}
