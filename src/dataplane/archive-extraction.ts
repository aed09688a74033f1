/**
 * Extracts a source tarball (a user's upload, a code host's repository tarball) into a revision's work
 * directory, with the `tar` package, refusing every archive that could put anything outside it.
 *
 * The `tar` package alone is not enough for archives from users: by default it strips a leading `/`, skips
 * `..` entries with a warning and carries on, so a hostile archive would come out half-extracted instead
 * of refused; and it judges each symbolic link on its own, so a link whose target runs through another
 * link (`z -> a/b/c/../../y` with `a/b/c -> ../..`) is let through although it points outside. Hence two
 * passes over the file:
 *
 * 1. a listing pass, which writes nothing: each entry's path, type and size is checked as it is read (so
 *    an archive of a million entries stops at the limit, not at its end), then the whole plan: which
 *    entries are kept and where, that no entry is written through a symbolic link, that hard links join
 *    files of the archive, and that every symbolic link, resolved through the others, stays inside
 *    (src/dataplane/archive-plan.ts);
 * 2. the extraction, in `strict` mode (every warning of the package fails it), into a fresh staging
 *    directory inside destDir, with a filter that lets through exactly the planned entries, recognised by
 *    position, and gives them the planned path and a sane mode (src/dataplane/archive-reader.ts has
 *    both passes).
 *
 * On success the staging directory's contents move up into destDir. On failure the staging directory is
 * first renamed, then removed: an unpacker operation still under way resolves its path against the old
 * name and fails, rather than recreating a directory after the removal.
 *
 * The gzip layer is ours, not the package's, so that the decompressed stream can be capped: declared sizes
 * bound the files, but not what an archive may hide in skipped entries or after its end.
 *
 * Every step is bounded, so that no archive can hold a build slot, or the process, for long: each pass reads
 * the file once and stops at the end of the archive (at most a little padding may follow it, see
 * src/dataplane/archive-reader.ts), the planning is linear in the paths (src/dataplane/archive-plan.ts),
 * and the whole extraction has a time bound (`timeoutMs`) past which it fails with `archive_too_slow`.
 * `signal` stops it promptly whichever pass is under way (an interrupted revision, a shutdown); the promise
 * then rejects with the signal's reason, and destDir is left empty, or not even created when the signal
 * had aborted before the call.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { classify, invalid, tooSlow } from './archive-error.ts';
import { planExtraction, type Step } from './archive-plan.ts';
import { isGzipFile, listArchive, unpackPlanned, type Limits } from './archive-reader.ts';

export interface ExtractOptions {
  /** Most entries (files, directories and links) the archive may hold. Default 20 000. */
  maxFiles?: number;
  /** Most bytes of file content, by the sizes the entries declare. Default 1 GiB. */
  maxBytes?: number;
  /**
   * Drop one leading directory when every entry sits under the same single top-level directory (GitHub's
   * `owner-repo-sha/` prefix, or `tar czf app.tgz app/`).
   */
  stripSingleTopDirectory?: boolean;
  /** Stops the extraction (both passes), which then rejects with `signal.reason`, destDir left empty. */
  signal?: AbortSignal;
  /**
   * The most the whole extraction may take, in milliseconds; past it, an ArchiveError `archive_too_slow`.
   * Default 120 000; Infinity for none.
   */
  timeoutMs?: number;
}

export interface ExtractResult {
  /** Regular files written (hard links included). */
  files: number;
  /** Their declared sizes, added up. */
  bytes: number;
}

const DEFAULT_MAX_FILES = 20_000;
const DEFAULT_MAX_BYTES = 1024 ** 3;
// Per entry: its header, the padding of its body, a pax header for a long name; and for the archive, the
// end blocks and the record padding. Generous, since it only needs to stop a decompression bomb.
const STREAM_OVERHEAD_PER_ENTRY = 4096;
const STREAM_OVERHEAD = 16 * 1024 ** 2;
// Path components per entry, on average over the archive (paths and link targets): source trees are a
// few levels deep, and a path may have 2048. Bounds the planning, which runs without yielding.
const COMPONENTS_PER_ENTRY = 32;
// A gigabyte of source extracts in seconds; two minutes is a sick disk or an archive made to be slow.
const DEFAULT_TIMEOUT_MS = 120_000;
// setTimeout fires at once for anything longer (with a warning).
const MAX_TIMER_MS = 2 ** 31 - 1;

/** Renamed first, so that unpacker operations still under way fail instead of writing into it again. */
async function discard(dir: string): Promise<void> {
  const trash = `${dir}.discarded`;
  try {
    await fs.rename(dir, trash);
  } catch {
    await fs.rm(dir, { recursive: true, force: true, maxRetries: 3 });
    return;
  }
  await fs.rm(trash, { recursive: true, force: true, maxRetries: 3 });
}

/**
 * Extracts the gzipped tarball `archiveFile` into `destDir`, which is created if missing and must be
 * empty. Throws ArchiveError when the archive is refused; then destDir is left empty. Other errors (a full
 * disk, a missing archive file) are thrown as they are, with destDir left empty too. When `signal` aborts,
 * throws its reason, with destDir left empty.
 */
export async function extractTarball(
  archiveFile: string,
  destDir: string,
  options: ExtractOptions = {},
): Promise<ExtractResult> {
  const { signal } = options;
  // Before anything is touched: an interrupted revision does not even create its directory.
  signal?.throwIfAborted();
  // One signal for both causes of stopping; the reason tells them apart.
  const stop = new AbortController();
  const onAbort = (): void => stop.abort(signal?.reason);
  signal?.addEventListener('abort', onAbort, { once: true });
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const timer =
    timeoutMs <= MAX_TIMER_MS ? setTimeout(() => stop.abort(tooSlow(timeoutMs)), Math.max(timeoutMs, 0)) : undefined;
  try {
    return await extractWithin(archiveFile, destDir, options, stop.signal);
  } finally {
    clearTimeout(timer);
    signal?.removeEventListener('abort', onAbort);
  }
}

async function extractWithin(
  archiveFile: string,
  destDir: string,
  options: ExtractOptions,
  signal: AbortSignal,
): Promise<ExtractResult> {
  const maxFiles = options.maxFiles ?? DEFAULT_MAX_FILES;
  const limits: Limits = {
    maxFiles,
    maxBytes: options.maxBytes ?? DEFAULT_MAX_BYTES,
    maxComponents: maxFiles * COMPONENTS_PER_ENTRY,
  };
  const maxTarBytes = limits.maxBytes + (limits.maxFiles + 1) * STREAM_OVERHEAD_PER_ENTRY + STREAM_OVERHEAD;
  // An abort's reason as it is: it is the caller's, not the archive's.
  const answer = (error: unknown): unknown => (signal.aborted ? signal.reason : classify(error));

  await fs.mkdir(destDir, { recursive: true });
  const root = await fs.realpath(destDir);
  // Emptying destDir on failure is only safe when everything in it came from this archive.
  if ((await fs.readdir(root)).length > 0)
    throw new Error(`extractTarball needs an empty destination directory, and ${destDir} is not empty.`);

  const gzipped = await isGzipFile(archiveFile);
  signal.throwIfAborted();
  if (!gzipped) {
    throw invalid('The file is not a gzip-compressed tar archive (.tar.gz).');
  }
  let steps: Step[];
  try {
    steps = planExtraction(
      await listArchive(archiveFile, limits, maxTarBytes, signal),
      options.stripSingleTopDirectory === true,
      limits.maxFiles,
    );
  } catch (error) {
    throw answer(error);
  }
  signal.throwIfAborted();

  const staging = path.join(root, `.slipway-extract-${randomBytes(8).toString('hex')}`);
  await fs.mkdir(staging, { mode: 0o700 });
  try {
    await unpackPlanned(archiveFile, staging, steps, maxTarBytes, signal);
    signal.throwIfAborted();
    for (const name of await fs.readdir(staging)) await fs.rename(path.join(staging, name), path.join(root, name));
    await fs.rmdir(staging);
  } catch (error) {
    // Decided now: an abort during the cleanup does not change what went wrong.
    const failure = answer(error);
    await discard(staging);
    // Some entries may have moved up before the failure.
    for (const name of await fs.readdir(root)) await fs.rm(path.join(root, name), { recursive: true, force: true });
    throw failure;
  }

  let files = 0;
  let bytes = 0;
  for (const step of steps) {
    if (step.action === 'extract' && (step.kind === 'file' || step.kind === 'hardlink')) {
      files += 1;
      bytes += step.listed.size;
    }
  }
  return { files, bytes };
}
