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
 *    files of the archive, and that every symbolic link, resolved through the others, stays inside;
 * 2. the extraction, in `strict` mode (every warning of the package fails it), into a fresh staging
 *    directory inside destDir, with a filter that lets through exactly the planned entries, recognised by
 *    position, and gives them the planned path and a sane mode.
 *
 * On success the staging directory's contents move up into destDir. On failure the staging directory is
 * first renamed, then removed: an unpacker operation still under way resolves its path against the old
 * name and fails, rather than recreating a directory after the removal.
 *
 * The gzip layer is ours, not the package's, so that the decompressed stream can be capped: declared sizes
 * bound the files, but not what an archive may hide in skipped entries or after its end.
 */
import { randomBytes } from 'node:crypto';
import { createReadStream } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { once } from 'node:events';
import { pipeline } from 'node:stream/promises';
import { createGunzip } from 'node:zlib';
import { Parser, ReadEntry, Unpack } from 'tar';

export type ArchiveFailure = 'unsafe_archive' | 'invalid_archive';

/**
 * The archive was refused: `unsafe_archive` when it tries to reach outside the source directory or breaks a
 * limit, `invalid_archive` when it is not a gzipped tar or is damaged. The message is written for the user.
 */
export class ArchiveError extends Error {
  constructor(
    readonly reason: ArchiveFailure,
    message: string,
  ) {
    super(message);
    this.name = 'ArchiveError';
  }
}

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
// Linux gives up on a path after 40 symbolic links (ELOOP); a longer chain cannot be judged, so it is refused.
const MAX_LINK_HOPS = 40;
const GZIP_MAGIC = Buffer.from([0x1f, 0x8b]);

type Kind = 'file' | 'directory' | 'symlink' | 'hardlink';

const KIND_OF_TYPE: Readonly<Record<string, Kind>> = {
  File: 'file',
  OldFile: 'file',
  ContiguousFile: 'file',
  Directory: 'directory',
  GNUDumpDir: 'directory',
  SymbolicLink: 'symlink',
  Link: 'hardlink',
};

const REFUSED_TYPES: Readonly<Record<string, string>> = {
  CharacterDevice: 'a character device',
  BlockDevice: 'a block device',
  FIFO: 'a named pipe (FIFO)',
};

const KIND_NAMES: Readonly<Record<Kind, string>> = {
  file: 'file',
  directory: 'directory',
  symlink: 'symbolic link',
  hardlink: 'hard link',
};

/** What the listing saw of an entry, to recognise the same entry when extracting. */
interface ListedEntry {
  path: string;
  type: string;
  linkpath: string | undefined;
  size: number;
}

type Step =
  | { listed: ListedEntry; action: 'skip' }
  | { listed: ListedEntry; action: 'extract'; kind: Kind; path: string; linkpath: string | undefined };

/** One path of the tree the archive builds, keyed by its folded path. */
interface PlannedNode {
  kind: Kind;
  /** The path as written (after stripping), for lookups that must match exactly. */
  path: string;
  /** Made by the entries under it rather than by an entry of its own. */
  implied: boolean;
  shown: string;
  target?: string;
}

const unsafe = (message: string): ArchiveError => new ArchiveError('unsafe_archive', message);
const invalid = (message: string): ArchiveError => new ArchiveError('invalid_archive', message);

/** A path for a message: control characters would garble it, and an entry name can be 100 KB long. */
function shown(value: string): string {
  const clean = value.replace(/[\u0000-\u001f\u007f]/g, '?');
  return clean.length > 200 ? `${clean.slice(0, 200)}…` : clean;
}

// The same notion of "absolute" as the package's own stripping (Windows roots included, on every
// platform), so that no entry the package would rewrite gets through.
function isAbsoluteEntryPath(value: string): boolean {
  return value.startsWith('/') || path.win32.isAbsolute(value) || path.win32.parse(value).root !== '';
}

/** `..` in either separator: the package refuses a backslash one too, and a user may unpack it on Windows. */
function hasParentComponent(value: string): boolean {
  return value.split(/[\\/]/).includes('..');
}

/** The path's components, without empty and `.` ones; the caller has refused absolute and `..` paths. */
function componentsOf(value: string): string[] {
  return value.split('/').filter((part) => part !== '' && part !== '.');
}

// Case-insensitive file systems (macOS, Windows) would make `Link` and `link/x` one path; fold both the
// case and the Unicode form so that the checks below see what such a file system would.
function keyOf(parts: readonly string[]): string {
  return parts.join('/').normalize('NFC').toLowerCase();
}

/** Sane modes whatever the archive says: no setuid, setgid or sticky bit, no write for others, readable by the owner. */
function modeFor(kind: Kind, archiveMode: number | undefined): number {
  if (kind === 'directory') return 0o755;
  return (archiveMode ?? 0) & 0o111 ? 0o755 : 0o644;
}

function sameEntry(listed: ListedEntry, entry: ReadEntry): boolean {
  return listed.path === entry.path && listed.type === entry.type && listed.linkpath === entry.linkpath && listed.size === entry.size;
}

/** Checks of one entry that need nothing but the entry itself; run as the listing reads it. */
function checkEntry(entry: ListedEntry): void {
  const name = shown(entry.path);
  const refused = REFUSED_TYPES[entry.type];
  if (refused !== undefined) {
    throw unsafe(`The archive entry '${name}' is ${refused}; archives may hold only files, directories and links.`);
  }
  if (isAbsoluteEntryPath(entry.path)) {
    throw unsafe(`The archive entry '${name}' is an absolute path; archives must hold relative paths only.`);
  }
  if (hasParentComponent(entry.path)) {
    throw unsafe(`The archive entry '${name}' points outside the source directory; archives must hold relative paths only.`);
  }
  const kind = KIND_OF_TYPE[entry.type];
  const target = entry.linkpath ?? '';
  if (kind === 'symlink' && isAbsoluteEntryPath(target)) {
    throw unsafe(`The archive entry '${name}' is a symbolic link to the absolute path '${shown(target)}'; links must be relative and stay inside the source directory.`);
  }
  if (kind === 'hardlink' && (isAbsoluteEntryPath(target) || hasParentComponent(target))) {
    throw unsafe(`The archive entry '${name}' is a hard link to '${shown(target)}', outside the source directory; links must stay inside it.`);
  }
}

/**
 * Where `target`, read in directory `from`, leads in the planned tree, following the archive's symbolic
 * links on the way; null when it leaves the tree, or the chain of links is too long to judge. Components
 * that the archive does not make are plain names (the destination starts empty).
 */
function resolveInTree(from: readonly string[], target: string, nodes: ReadonlyMap<string, PlannedNode>, hops: { left: number }): string[] | null {
  let at = [...from];
  for (const part of target.split('/')) {
    if (part === '' || part === '.') continue;
    if (part === '..') {
      if (at.length === 0) return null;
      at.pop();
      continue;
    }
    at.push(part);
    const node = nodes.get(keyOf(at));
    if (node?.kind === 'symlink' && node.target !== undefined) {
      hops.left -= 1;
      if (hops.left < 0) return null;
      at.pop();
      const resolved = resolveInTree(at, node.target, nodes, hops);
      if (resolved === null) return null;
      at = resolved;
    }
  }
  return at;
}

function linkStaysInside(from: readonly string[], target: string, nodes: ReadonlyMap<string, PlannedNode>): boolean {
  // A backslash is a plain character here, but a separator to the package's own check and on Windows:
  // the link must stay inside read either way.
  const readings = target.includes('\\') ? [target, target.replaceAll('\\', '/')] : [target];
  return readings.every((reading) => resolveInTree(from, reading, nodes, { left: MAX_LINK_HOPS }) !== null);
}

/** The one top-level directory every entry sits under, if there is one. */
function singleTopDirectory(listed: readonly ListedEntry[]): string | undefined {
  let top: string | undefined;
  let nested = false;
  for (const entry of listed) {
    const parts = componentsOf(entry.path);
    const first = parts[0];
    if (first === undefined) continue;
    if (top === undefined) top = first;
    if (first !== top) return undefined;
    if (parts.length === 1 && KIND_OF_TYPE[entry.type] !== 'directory') return undefined;
    if (parts.length > 1) nested = true;
  }
  return nested ? top : undefined;
}

/**
 * Decides, for every listed entry in order, whether and where it is extracted, and checks the tree they
 * build together. Throws ArchiveError.
 */
function planExtraction(listed: readonly ListedEntry[], stripSingleTop: boolean): Step[] {
  const top = stripSingleTop ? singleTopDirectory(listed) : undefined;
  const strip = (parts: string[]): string[] => (top !== undefined && parts[0] === top ? parts.slice(1) : parts);
  const nodes = new Map<string, PlannedNode>();
  const symlinks: { from: string[]; target: string; shown: string }[] = [];
  const steps: Step[] = [];

  for (const entry of listed) {
    const kind = KIND_OF_TYPE[entry.type];
    // Only these types reach the filter; anything else is a bug in this module, not in the archive.
    if (kind === undefined) throw new Error(`unexpected tar entry type ${entry.type}`);
    const name = shown(entry.path);
    const parts = strip(componentsOf(entry.path));
    if (parts.length === 0) {
      if (kind !== 'directory') throw unsafe(`The archive entry '${name}' would replace the source directory itself.`);
      steps.push({ listed: entry, action: 'skip' });
      continue;
    }

    for (let depth = 1; depth < parts.length; depth += 1) {
      const ancestor = parts.slice(0, depth);
      const key = keyOf(ancestor);
      const node = nodes.get(key);
      if (node === undefined) {
        nodes.set(key, { kind: 'directory', path: ancestor.join('/'), implied: true, shown: shown(ancestor.join('/')) });
      } else if (node.kind === 'symlink') {
        throw unsafe(`The archive entry '${name}' would be written through the symbolic link '${node.shown}'; archives may not write through their own links.`);
      } else if (node.kind !== 'directory') {
        throw invalid(`The archive entry '${name}' sits under '${node.shown}', which the archive makes a ${KIND_NAMES[node.kind]}.`);
      }
    }

    const key = keyOf(parts);
    const existing = nodes.get(key);
    if (existing !== undefined) {
      const overwrite = existing.kind === kind && (kind === 'file' || kind === 'directory');
      if (!overwrite) {
        throw unsafe(
          existing.implied
            ? `The archive entry '${name}' is a ${KIND_NAMES[kind]}, but earlier entries use it as a directory.`
            : `The archive entry '${name}' appears more than once, as a ${KIND_NAMES[existing.kind]} and as a ${KIND_NAMES[kind]}; an archive may not replace one kind of entry with another.`,
        );
      }
    }

    let linkpath: string | undefined;
    if (kind === 'hardlink') {
      const targetParts = strip(componentsOf(entry.linkpath ?? ''));
      linkpath = targetParts.join('/');
      const target = nodes.get(keyOf(targetParts));
      // Exact match: link(2) does not fold case, even where the file system does for lookups.
      if (target === undefined || target.path !== linkpath || (target.kind !== 'file' && target.kind !== 'hardlink')) {
        throw unsafe(`The archive entry '${name}' is a hard link to '${shown(entry.linkpath ?? '')}', which is not a file earlier in the archive; hard links may only join files inside the source directory.`);
      }
    } else if (kind === 'symlink') {
      // The target stays as written: it is read relative to the link's own directory.
      linkpath = entry.linkpath;
      symlinks.push({ from: parts.slice(0, -1), target: entry.linkpath ?? '', shown: name });
    }

    nodes.set(key, { kind, path: parts.join('/'), implied: false, shown: name, ...(kind === 'symlink' ? { target: entry.linkpath ?? '' } : {}) });
    steps.push({ listed: entry, action: 'extract', kind, path: parts.join('/'), linkpath });
  }

  // Judged on the finished tree: a link may run through links that come later in the archive.
  for (const link of symlinks) {
    if (!linkStaysInside(link.from, link.target, nodes)) {
      throw unsafe(`The archive entry '${link.shown}' is a symbolic link to '${shown(link.target)}', which points outside the source directory; links must stay inside it.`);
    }
  }
  return steps;
}

interface Limits {
  maxFiles: number;
  maxBytes: number;
}

/** A parser of the tar package (the listing Parser, or the Unpack) fed with the decompressed archive. */
async function feed(archiveFile: string, sink: Parser, maxTarBytes: number): Promise<void> {
  let failed = false;
  const settled = new Promise<void>((resolve, reject) => {
    sink.on('close', () => resolve());
    sink.on('error', (error: unknown) => {
      // In strict mode a warning is an error, but the package goes on with the next entries unless aborted.
      if (!failed) {
        failed = true;
        reject(error);
        // A new error: the package decorates the one it is given, and this one is already the answer.
        sink.abort(new Error('extraction stopped after an error'));
      }
    });
  });
  // Observed below; this only keeps an early exit from leaving it unhandled.
  settled.catch(() => {});

  const input = createReadStream(archiveFile);
  const gunzip = createGunzip();
  const piped = pipeline(input, gunzip);
  // A read or gzip failure also destroys `gunzip`, which is where the loop below sees it.
  piped.catch(() => {});
  let total = 0;
  try {
    for await (const chunk of gunzip as AsyncIterable<Buffer>) {
      total += chunk.length;
      if (total > maxTarBytes) {
        throw unsafe(`The archive expands to more than ${maxTarBytes} bytes, more than its entries can account for.`);
      }
      if (failed) break;
      if (!sink.write(chunk)) await Promise.race([once(sink, 'drain'), settled]);
    }
    if (!failed) sink.end();
    await settled;
  } catch (error) {
    // Stop the parser too (an Unpack would go on writing what it already has).
    if (!failed) {
      failed = true;
      sink.abort(new Error('extraction stopped'));
    }
    throw error;
  } finally {
    gunzip.destroy();
    input.destroy();
  }
}

async function isGzipFile(archiveFile: string): Promise<boolean> {
  const handle = await fs.open(archiveFile, 'r');
  try {
    const head = Buffer.alloc(GZIP_MAGIC.length);
    const { bytesRead } = await handle.read(head, 0, head.length, 0);
    return bytesRead === head.length && head.equals(GZIP_MAGIC);
  } finally {
    await handle.close();
  }
}

/** The listing pass: every entry checked as it is read, nothing written. */
async function listArchive(archiveFile: string, limits: Limits, maxTarBytes: number): Promise<ListedEntry[]> {
  const listed: ListedEntry[] = [];
  let bytes = 0;
  let refusal: ArchiveError | undefined;
  const parser: Parser = new Parser({
    strict: true,
    brotli: false,
    zstd: false,
    // Every entry is looked at here and then skipped: the listing needs no body.
    filter: (_path, entry) => {
      if (refusal !== undefined || !(entry instanceof ReadEntry)) return false;
      const seen: ListedEntry = { path: entry.path, type: entry.type, linkpath: entry.linkpath, size: entry.size };
      try {
        if (listed.length >= limits.maxFiles) {
          throw unsafe(`The archive holds more than ${limits.maxFiles} entries, the most a source may have.`);
        }
        bytes += seen.size;
        if (bytes > limits.maxBytes) {
          throw unsafe(`The archive's files add up to more than ${limits.maxBytes} bytes (reached at '${shown(seen.path)}'), the most a source may have.`);
        }
        checkEntry(seen);
      } catch (error) {
        if (!(error instanceof ArchiveError)) throw error;
        refusal = error;
        // A copy: the package decorates the error it is given with its own fields.
        parser.abort(new Error(error.message));
        return false;
      }
      listed.push(seen);
      return false;
    },
  });
  try {
    await feed(archiveFile, parser, maxTarBytes);
  } catch (error) {
    throw refusal ?? error;
  }
  if (refusal !== undefined) throw refusal;
  return listed;
}

/** The extraction pass, into `staging`, of exactly the planned entries. */
async function unpackPlanned(archiveFile: string, staging: string, steps: readonly Step[], maxTarBytes: number): Promise<void> {
  let index = 0;
  let refusal: ArchiveError | undefined;
  const unpack: Unpack = new Unpack({
    cwd: staging,
    strict: true,
    brotli: false,
    zstd: false,
    preserveOwner: false,
    // Implied parent directories; the package would otherwise use 0o777 and leave the rest to the umask.
    dmode: 0o755,
    fmode: 0o644,
    filter: (_path, entry) => {
      if (refusal !== undefined || !(entry instanceof ReadEntry)) return false;
      const step = steps[index];
      index += 1;
      if (step === undefined || !sameEntry(step.listed, entry)) {
        // Same file, same parser: only a file changed between the passes gets here.
        refusal = invalid('The archive changed while it was being extracted.');
        unpack.abort(new Error(refusal.message));
        return false;
      }
      if (step.action === 'skip') return false;
      entry.path = step.path;
      if (step.linkpath !== undefined) entry.linkpath = step.linkpath;
      entry.mode = modeFor(step.kind, entry.mode);
      return true;
    },
  });
  try {
    await feed(archiveFile, unpack, maxTarBytes);
  } catch (error) {
    throw refusal ?? error;
  }
  if (index !== steps.length) throw invalid('The archive changed while it was being extracted.');
}

// Failures of the machine rather than of the archive: reported as they are, not blamed on the user.
const ENVIRONMENT_ERRORS = new Set(['ENOSPC', 'EDQUOT', 'EACCES', 'EPERM', 'EMFILE', 'ENFILE', 'EIO', 'EROFS', 'ENOMEM']);

interface TarFailure {
  code?: unknown;
  tarCode?: unknown;
  entry?: { path?: unknown };
}

/** Turns what the gzip stream or the tar package threw into an ArchiveError, when the archive is to blame. */
function classify(error: unknown): unknown {
  if (error instanceof ArchiveError || !(error instanceof Error)) return error;
  const { code, tarCode, entry } = error as Error & TarFailure;
  if (typeof code === 'string' && code.startsWith('Z_')) {
    return invalid(`The archive is not a valid gzip file, or it is truncated (${error.message}).`);
  }
  if (typeof tarCode !== 'string') return error;
  const entryPath = typeof entry?.path === 'string' ? shown(entry.path) : undefined;
  if (code === 'TAR_SYMLINK_ERROR') {
    return unsafe(`The archive entry '${entryPath ?? '?'}' would be written through a symbolic link; archives may not write through their own links.`);
  }
  if (typeof code === 'string' && ENVIRONMENT_ERRORS.has(code) && tarCode === 'TAR_ENTRY_ERROR') return error;
  const detail = error.message.replace(/^TAR_[A-Z_]+: /, '');
  if (tarCode === 'TAR_ENTRY_ERROR' && entryPath !== undefined) {
    return invalid(`The archive entry '${entryPath}' could not be extracted (${typeof code === 'string' && code.startsWith('E') ? code : detail}).`);
  }
  return invalid(`The file is not a valid tar archive, or it is truncated or corrupt (${detail}).`);
}

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
export async function extractTarball(archiveFile: string, destDir: string, options: ExtractOptions = {}): Promise<ExtractResult> {
  const limits: Limits = { maxFiles: options.maxFiles ?? DEFAULT_MAX_FILES, maxBytes: options.maxBytes ?? DEFAULT_MAX_BYTES };
  const maxTarBytes = limits.maxBytes + (limits.maxFiles + 1) * STREAM_OVERHEAD_PER_ENTRY + STREAM_OVERHEAD;

  await fs.mkdir(destDir, { recursive: true });
  const root = await fs.realpath(destDir);
  // Emptying destDir on failure is only safe when everything in it came from this archive.
  if ((await fs.readdir(root)).length > 0) throw new Error(`extractTarball needs an empty destination directory, and ${destDir} is not empty.`);

  if (!(await isGzipFile(archiveFile))) {
    throw invalid('The file is not a gzip-compressed tar archive (.tar.gz).');
  }
  let steps: Step[];
  try {
    steps = planExtraction(await listArchive(archiveFile, limits, maxTarBytes), options.stripSingleTopDirectory === true);
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
