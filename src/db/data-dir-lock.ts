/**
 * One process owns a data directory at a time: its embedded PostgreSQL, its uploads, its app
 * processes and its node id (which names its work leases) all assume so. The owner holds
 * `slipway.lock`, a file naming it (pid, the process's start time and the boot it started in, so a
 * reused pid is not mistaken for it), for as long as it runs.
 *
 * The file is made complete and then linked into place, so it never exists half-written, and link()
 * fails when it exists, so of several starters one wins. A lock whose owner is gone (a crash, kill -9,
 * a reboot) is removed, under a guard that keeps takers from removing each other's fresh locks.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync, unlinkSync } from 'node:fs';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { Logger } from 'pino';
import { ConfigError } from '../config.ts';

export const LOCK_FILE = 'slipway.lock';

interface Owner {
  pid: number;
  /** Start time of the process in clock ticks since boot (Linux), null where unknown. */
  started: number | null;
  boot: string | null;
  host: string;
  /** What holds it: the service, or a command such as rotate-key. */
  command: string;
  since: string;
}

export interface DataDirLock {
  readonly file: string;
  release(): Promise<void>;
}

function readProc(file: string): string | null {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return null;
  }
}

/** Field 22 of /proc/<pid>/stat: when the process started, in clock ticks since boot. */
function startTicks(pid: number): number | null {
  const stat = readProc(`/proc/${pid}/stat`);
  if (stat === null) return null;
  // The command name (field 2) may hold spaces and parentheses: count fields after its closing one.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticks = Number(fields[19]);
  return Number.isFinite(ticks) ? ticks : null;
}

const bootId = (): string | null => readProc('/proc/sys/kernel/random/boot_id')?.trim() ?? null;

function processExists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: it exists, under another user.
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

type Liveness = 'alive' | 'gone' | 'elsewhere';

function liveness(owner: Owner): Liveness {
  // Another machine (or container) sharing the directory: its processes cannot be seen from here.
  if (owner.host !== os.hostname()) return 'elsewhere';
  const boot = bootId();
  if (owner.boot !== null && boot !== null && owner.boot !== boot) return 'gone';
  if (!processExists(owner.pid)) return 'gone';
  const started = startTicks(owner.pid);
  if (owner.started !== null && started !== null && owner.started !== started) return 'gone';
  return 'alive';
}

function parse(text: string): Owner | null {
  try {
    const value = JSON.parse(text) as Partial<Owner>;
    if (typeof value.pid !== 'number' || typeof value.host !== 'string') return null;
    return {
      pid: value.pid,
      started: value.started ?? null,
      boot: value.boot ?? null,
      host: value.host,
      command: value.command ?? 'slipway',
      since: value.since ?? '?',
    };
  } catch {
    return null;
  }
}

export class DataDirInUseError extends ConfigError {
  constructor(
    readonly dataDir: string,
    readonly owner: Owner,
  ) {
    super(
      'SLIPWAY_DATA_DIR',
      `${dataDir} is in use by another Slipway process (pid ${owner.pid}, ${owner.command}, ` +
        `running since ${owner.since}). Stop that process first, or give this one its own ` +
        `SLIPWAY_DATA_DIR: two processes on one data directory would stop each other's database.`,
    );
    this.name = 'DataDirInUseError';
  }
}

async function readText(file: string): Promise<string | null> {
  return fs.readFile(file, 'utf8').catch((error: NodeJS.ErrnoException) => {
    if (error.code === 'ENOENT') return null;
    throw error;
  });
}

export interface LockOptions {
  logger: Pick<Logger, 'warn'>;
  /** Shown to a process that finds the directory taken: `service`, `rotate-key`. */
  command: string;
}

/** Takes the data directory (made if missing) for this process, or throws DataDirInUseError. */
export async function lockDataDir(dataDir: string, options: LockOptions): Promise<DataDirLock> {
  await fs.mkdir(dataDir, { recursive: true, mode: 0o700 });
  const file = path.join(dataDir, LOCK_FILE);
  const me: Owner = {
    pid: process.pid,
    started: startTicks(process.pid),
    boot: bootId(),
    host: os.hostname(),
    command: options.command,
    since: new Date().toISOString(),
  };
  const mine = JSON.stringify(me);
  const temp = `${file}.${process.pid}.${randomBytes(4).toString('hex')}`;
  await fs.writeFile(temp, mine, { mode: 0o600 });
  try {
    for (let attempt = 0; attempt < 200; attempt++) {
      try {
        // link() fails when the lock exists: of several starters exactly one succeeds.
        await fs.link(temp, file);
        return held(file, mine);
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      }
      const text = await readText(file);
      if (text === null) continue;
      const owner = parse(text);
      const state = owner === null ? 'gone' : liveness(owner);
      if (state === 'alive') throw new DataDirInUseError(dataDir, owner!);
      if (owner && state === 'elsewhere') {
        options.logger.warn(
          { ownerPid: owner.pid, ownerHost: owner.host },
          `${file} names a process on another host, which cannot be checked from here; taking ` +
            `the data directory over. If that process still runs, stop one of them.`,
        );
      } else if (owner) {
        options.logger.warn(
          { ownerPid: owner.pid },
          'the data directory lock was left by a process that is gone; taking it over',
        );
      }
      await takeOver(file, text, temp);
    }
    throw new Error(`Could not take ${file}: other processes keep taking it`);
  } finally {
    await fs.rm(temp, { force: true });
  }
}

/** How long a takeover may hold its guard; a guard older than this was left by a process that died in it. */
const TAKEOVER_GUARD_MS = 10_000;

/**
 * Removes a stale lock. A guard file (made with link(), so exclusive) makes the check and the removal
 * one step among takers: without it, a slow taker could remove the fresh lock a faster one just made.
 */
async function takeOver(file: string, staleText: string, temp: string): Promise<void> {
  const guard = `${file}.takeover`;
  try {
    await fs.link(temp, guard);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    const stat = await fs.stat(guard).catch(() => null);
    if (stat && Date.now() - stat.mtimeMs > TAKEOVER_GUARD_MS) await fs.rm(guard, { force: true });
    // Another taker is at it: look again once it is done.
    await new Promise((resolve) => setTimeout(resolve, 20));
    return;
  }
  try {
    if ((await readText(file)) === staleText) await fs.rm(file, { force: true });
  } finally {
    await fs.rm(guard, { force: true });
  }
}

function held(file: string, mine: string): DataDirLock {
  let released = false;
  // Also on process.exit() from anywhere (a failed start): a lock left behind would only be stale,
  // but removing it keeps the next start's log quiet.
  const releaseSync = () => {
    if (released) return;
    released = true;
    try {
      if (readFileSync(file, 'utf8') === mine) unlinkSync(file);
    } catch {
      // Already gone.
    }
  };
  process.once('exit', releaseSync);
  return {
    file,
    async release() {
      process.removeListener('exit', releaseSync);
      releaseSync();
    },
  };
}
