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
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { classify, invalid } from './archive-error.ts';
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
 * disk, a missing archive file) are thrown as they are, with destDir left empty too.
 */
export async function extractTarball(
  archiveFile: string,
  destDir: string,
  options: ExtractOptions = {},
): Promise<ExtractResult> {
  const limits: Limits = {
    maxFiles: options.maxFiles ?? DEFAULT_MAX_FILES,
    maxBytes: options.maxBytes ?? DEFAULT_MAX_BYTES,
  };
  const maxTarBytes = limits.maxBytes + (limits.maxFiles + 1) * STREAM_OVERHEAD_PER_ENTRY + STREAM_OVERHEAD;

  await fs.mkdir(destDir, { recursive: true });
  const root = await fs.realpath(destDir);
  // Emptying destDir on failure is only safe when everything in it came from this archive.
  if ((await fs.readdir(root)).length > 0)
    throw new Error(`extractTarball needs an empty destination directory, and ${destDir} is not empty.`);

  if (!(await isGzipFile(archiveFile))) {
    throw invalid('The file is not a gzip-compressed tar archive (.tar.gz).');
  }
  let steps: Step[];
  try {
    steps = planExtraction(
      await listArchive(archiveFile, limits, maxTarBytes),
      options.stripSingleTopDirectory === true,
    );
  } catch (error) {
    throw classify(error);
  }

  const staging = path.join(root, `.slipway-extract-${randomBytes(8).toString('hex')}`);
  await fs.mkdir(staging, { mode: 0o700 });
  try {
    await unpackPlanned(archiveFile, staging, steps, maxTarBytes);
    for (const name of await fs.readdir(staging)) await fs.rename(path.join(staging, name), path.join(root, name));
    await fs.rmdir(staging);
  } catch (error) {
    await discard(staging);
    // Some entries may have moved up before the failure.
    for (const name of await fs.readdir(root)) await fs.rm(path.join(root, name), { recursive: true, force: true });
    throw classify(error);
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
