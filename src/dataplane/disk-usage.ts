/**
 * What a tree takes on its disk, measured with coreutils' `du` (a maintained walker, rather than one of
 * our own): blocks, not apparent sizes (a sparse file takes what it holds), each hard-linked file once,
 * no symbolic link followed (`du` follows none unless told) and no other file system entered (`-x`).
 *
 * The trees measured are an app's or a build's while it runs: the walk only reads (it follows no link
 * and changes nothing), so an app that swaps a directory for a link in the middle makes it count at most
 * what the link's target holds, against the app itself. What `du` cannot read (a directory the app made
 * unreadable to the service) counts as over any limit: an app can hide its files from the measure only
 * by stopping itself.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs/promises';
import type { SubordinateIds } from './subordinate-ids.ts';

export interface TreeUsage {
  bytes: number;
  /** Some of the tree could not be read: its real size is unknown, and may be any. */
  unreadable: boolean;
  /** Measured on a file system of its own (src/dataplane/disk-images.ts), which is full. */
  fileSystemFull?: boolean;
}

/**
 * A file system of its own counts as full with less room left than this share of it, or 2 MiB when
 * that is more (or with no inode left): ext4 refuses a write (ENOSPC) some way before its last block,
 * by as much as a write asks for and the room it keeps for writes under way.
 */
const FULL_SHARE = 0.01;
const FULL_MIN_BYTES = 2 * 1024 * 1024;

/**
 * What a deployment's own file system holds (statfs: nothing walked), and whether it is full: the
 * kernel refuses the app's next writes, which then fail with ENOSPC.
 */
export async function measureFileSystem(dir: string): Promise<TreeUsage> {
  const stat = await fs.statfs(dir);
  return {
    bytes: (stat.blocks - stat.bfree) * stat.bsize,
    unreadable: false,
    fileSystemFull:
      stat.bavail * stat.bsize < Math.max(FULL_MIN_BYTES, stat.blocks * stat.bsize * FULL_SHARE) || stat.ffree === 0,
  };
}

/**
 * Measures the trees together (a missing one counts nothing). `ids`: the trees are a subordinate uid's
 * (src/dataplane/subordinate-ids.ts), read as root of the namespace that maps them.
 */
export function measureTrees(dirs: readonly string[], ids?: SubordinateIds | null): Promise<TreeUsage> {
  return new Promise((resolve, reject) => {
    // --total: one line for all, hard links shared between the trees counted once.
    const [file, ...args] = [...(ids ? ids.prefix() : []), 'du', '-sxcB1', '--', ...dirs];
    const du = spawn(file!, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    du.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    du.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    du.on('error', reject);
    du.on('close', (code) => {
      const total = /^(\d+)\s+total$/m.exec(stdout);
      if (!total) {
        reject(new Error(`du ${dirs.join(' ')} exited with ${code}: ${stderr.trim().slice(0, 500)}`));
        return;
      }
      // A tree removed meanwhile is no secret: only what exists and cannot be read is.
      const unreadable = stderr.split('\n').some((line) => /Permission denied|Operation not permitted/.test(line));
      resolve({ bytes: Number(total[1]), unreadable });
    });
  });
}

export interface DiskWatch {
  stop(): void;
}

/**
 * Measures every `intervalMs` while it runs and calls `onFull` once, when what is measured holds more
 * than `limitBytes`, cannot all be read, or is a full file system of its own; then it stops. A failure
 * to measure is logged through `onError` and the next round tries again.
 */
export function watchDiskUse(options: {
  measure(): Promise<TreeUsage>;
  limitBytes: number;
  intervalMs: number;
  onFull(usage: TreeUsage): void;
  onError(error: unknown): void;
}): DiskWatch {
  let stopped = false;
  let timer: NodeJS.Timeout | null = null;
  const round = async (): Promise<void> => {
    try {
      const usage = await options.measure();
      if (stopped) return;
      if (usage.bytes > options.limitBytes || usage.unreadable || usage.fileSystemFull) {
        stopped = true;
        options.onFull(usage);
        return;
      }
    } catch (error) {
      if (!stopped) options.onError(error);
    }
    // The next round a whole interval after this one ended: a slow walk never runs twice at once.
    if (!stopped) timer = setTimeout(() => void round(), options.intervalMs).unref();
  };
  timer = setTimeout(() => void round(), options.intervalMs).unref();
  return {
    stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
    },
  };
}
