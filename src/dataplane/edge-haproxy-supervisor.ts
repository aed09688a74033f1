/**
 * HAProxy's child process for the app edge (src/dataplane/edge-haproxy.ts): started from the edge's files
 * and waited for on its runtime socket, started again with the whole table when it exits on its own (unless
 * another edge took the directory over), restarted on purpose (a bigger pool), and soft-stopped when the
 * edge closes. The state they share is one `HaproxyProcess`.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs/promises';
import type { Logger } from 'pino';
import { processAlive } from '../db/embedded-postgres.ts';
import type { EdgeFiles } from './edge-haproxy-files.ts';
import { runtimeCommand, type ChangeQueue } from './edge-haproxy-process.ts';

/** How long HAProxy has to start and answer on its runtime socket. */
const START_TIMEOUT_MS = 15_000;

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** HAProxy's process as the edge runs it: how it is started, and what it is now. */
export interface HaproxyProcess {
  readonly haproxyPath: string;
  readonly files: EdgeFiles;
  /** util-linux's setpriv, which gives HAProxy a parent-death signal; null where there is none. */
  readonly setpriv: string | null;
  /** How to start it outside the service's CPU reserve (src/dataplane/service-cpu-reserve.ts). */
  readonly ordinary?: (argv: readonly string[]) => string[];
  readonly drainTimeoutMs: number;
  readonly logger: Logger;
  /** Whether this edge still owns the directory (src/dataplane/edge-haproxy-files.ts, takeOverDirectory). */
  readonly ownsDirectory: () => Promise<boolean>;
  /** Writes the configuration and maps from the table, which a start reads. */
  readonly writeFiles: () => Promise<void>;
  /** Told that a new HAProxy counts from zero, so the counts so far are carried. */
  readonly processStarted: () => void;
  /** Reads the apps' counts while HAProxy still answers. */
  readonly readCounts: () => Promise<unknown>;
  /** The edge's runtime changes, one at a time: a start after an exit is one of them. */
  readonly queue: ChangeQueue;

  /** The running HAProxy, once it answered on its socket; null while none is supervised. */
  child: ChildProcess | null;
  /** The edge is closing: nothing is started again. */
  closing: boolean;
  /** Its last lines of standard error, for the error of a start that failed. */
  readonly stderr: string[];
}

/** Starts HAProxy with the current table and waits until its runtime socket answers. */
export async function startHaproxy(p: HaproxyProcess): Promise<void> {
  await p.writeFiles();
  // A new HAProxy counts from zero: the counts so far are carried (edge-haproxy-stats.ts, EdgeAccounts).
  p.processStarted();
  const proc = spawnHaproxy(p);
  const deadline = Date.now() + START_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (proc.exitCode !== null || proc.signalCode !== null) break;
    const up = await runtimeCommand(p.files.adminSocket, 'show info').catch(() => '');
    if (/^Pid: /m.test(up)) {
      // Supervised from here on (an exit while starting is this function's to report).
      p.child = proc;
      return;
    }
    await sleep(25);
  }
  proc.kill('SIGKILL');
  throw new Error(`HAProxy did not start: ${p.stderr.slice(-5).join(' | ') || 'no output'}`);
}

/** Stops HAProxy and starts it again from the files (a brief interruption of app traffic). */
export async function restartHaproxy(p: HaproxyProcess, reason: string): Promise<void> {
  p.logger.warn({ reason }, 'app edge: restarting HAProxy (app traffic pauses briefly)');
  // The counts up to now, while this HAProxy still answers (after a crash, those since the last read are lost).
  await p.readCounts().catch(() => undefined);
  const proc = p.child;
  p.child = null;
  if (proc && proc.exitCode === null && proc.signalCode === null) {
    const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
    proc.kill('SIGTERM');
    await exited;
  }
  await startHaproxy(p);
}

/**
 * Soft stop, once the edge is closing: HAProxy stops listening and ends once its requests are done; the
 * drain time, then whatever is left is cut.
 */
export async function stopHaproxy(p: HaproxyProcess): Promise<void> {
  const proc = p.child;
  p.child = null;
  if (proc === null || proc.exitCode !== null || proc.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  proc.kill('SIGUSR1');
  const timer = setTimeout(() => proc.kill('SIGTERM'), p.drainTimeoutMs);
  const hard = setTimeout(() => proc.kill('SIGKILL'), p.drainTimeoutMs + 5_000);
  await exited;
  clearTimeout(timer);
  clearTimeout(hard);
}

function spawnHaproxy(p: HaproxyProcess): ChildProcess {
  const { logger, stderr } = p;
  // Master-worker mode: the master keeps root and so its parent-death signal (a change of user clears
  // it), the worker runs as nobody and exits with its master.
  // At ordinary priority: it carries the apps' traffic, which must not wait for what every other
  // process on the host leaves (it once ran in the idle class; docs/performance.md).
  const command = [p.haproxyPath, '-W', '-db', '-f', p.files.configFile];
  const direct = p.setpriv ? [p.setpriv, '--pdeathsig', 'SIGTERM', '--', ...command] : command;
  // Outside the service's CPU reserve, where there is one: the apps' traffic is not the API's.
  const argv = p.ordinary ? p.ordinary(direct) : direct;
  const proc = spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'ignore', 'pipe'] });
  proc.stderr.setEncoding('utf8');
  proc.stderr.on('data', (chunk: string) => {
    for (const line of chunk.split('\n').filter((l) => l.trim() !== '')) {
      stderr.push(line);
      if (stderr.length > 50) stderr.shift();
      // Its notices of servers coming and going are the data plane's own doing: debug only.
      if (/\[(ALERT|EMERG)\]/.test(line) && !/has no server available/.test(line))
        logger.warn({ haproxy: line }, 'app edge: HAProxy says');
      else logger.debug({ haproxy: line }, 'app edge: HAProxy says');
    }
  });
  proc.on('error', (error) => stderr.push(String(error)));
  proc.once('exit', (code, signal) => {
    if (p.child !== proc || p.closing) return;
    p.child = null;
    // Supervised: started again with the whole table, so apps stay reachable; unless another HAProxy
    // now holds this directory (another edge took it over), which must not be fought over.
    p.queue
      .enqueue(() => startAfterExit(p, proc, code, signal))
      .catch((error: unknown) => logger.error({ err: error }, 'app edge: HAProxy could not be started again'));
  });
  return proc;
}

/** After HAProxy exited on its own: started again, unless the edge closes or another one holds the directory. */
async function startAfterExit(
  p: HaproxyProcess,
  proc: ChildProcess,
  code: number | null,
  signal: NodeJS.Signals | null,
): Promise<void> {
  const { logger } = p;
  await sleep(500);
  if (p.closing) return;
  if (!(await p.ownsDirectory())) {
    logger.error(
      { code, signal },
      'app edge: HAProxy exited and another edge took its directory over; not restarting it',
    );
    return;
  }
  const holder = Number((await fs.readFile(p.files.pidFile, 'utf8').catch(() => '')).trim());
  if (Number.isInteger(holder) && holder > 1 && holder !== proc.pid && processAlive(holder)) {
    logger.error(
      { code, signal, holder },
      'app edge: HAProxy exited and another one holds its directory; not restarting it',
    );
    return;
  }
  logger.error({ code, signal }, 'app edge: HAProxy exited; starting it again');
  await startHaproxy(p);
}
