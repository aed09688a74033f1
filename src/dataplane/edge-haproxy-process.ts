/**
 * HAProxy as a process of the service (src/dataplane/edge-haproxy.ts runs it): one that an earlier run
 * left behind is stopped, its worker runs as a user of its own, and it is driven by commands on its
 * runtime socket, its changes one at a time. Its start and supervision are src/dataplane/edge-haproxy-supervisor.ts.
 */
import fs from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';
import { processAlive } from '../db/embedded-postgres.ts';

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

/** Stops a HAProxy left running by an earlier service on this directory (it holds the apps port). */
export async function stopLeftover(dir: string, configFile: string, logger: Logger): Promise<void> {
  const pid = Number((await fs.readFile(path.join(dir, 'haproxy.pid'), 'utf8').catch(() => '')).trim());
  if (!Number.isInteger(pid) || pid <= 1 || !processAlive(pid)) return;
  const cmdline = await fs.readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
  if (!cmdline.includes(configFile)) return;
  logger.warn({ pid }, 'app edge: stopping the HAProxy an earlier run of the service left behind');
  process.kill(pid, 'SIGTERM');
  for (let i = 0; i < 100 && processAlive(pid); i++) await sleep(50);
  if (processAlive(pid)) process.kill(pid, 'SIGKILL');
}

/** The `haproxy` system user and group when they exist, else nobody. */
export async function workerUser(): Promise<{ user: string; group: string }> {
  const has = async (file: string, name: string) =>
    (await fs.readFile(file, 'utf8').catch(() => '')).split('\n').some((line) => line.startsWith(`${name}:`));
  return (await has('/etc/passwd', 'haproxy')) && (await has('/etc/group', 'haproxy'))
    ? { user: 'haproxy', group: 'haproxy' }
    : { user: 'nobody', group: 'nogroup' };
}
