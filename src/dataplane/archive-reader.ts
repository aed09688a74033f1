/**
 * The two passes of src/dataplane/archive-extraction.ts over a gzipped tarball, with the `tar` package
 * fed through a gzip stream of ours, so that the decompressed size can be capped: the listing, which
 * writes nothing and checks each entry as it is read; and the extraction of exactly the planned entries.
 *
 * Feeding stops at the end of the archive (its two zero blocks). The package's Parser does not stop by
 * itself: once it has seen the end it parses nothing more but keeps what it is given in a buffer, and each
 * further write concatenates the whole buffer with the new chunk and keeps the result, so that N bytes
 * after the end cost about N² / (2 × chunk size) bytes of copying (300 MiB of zeros, 300 KB gzipped, held a
 * CPU for minutes; 4 MiB already copied 550 MB). So the package's `eof` event (emitted by its Parser on the
 * second zero block, though absent from its type definitions; the tests notice if it ever goes) ends the
 * writing. What follows the end is still read, to tell an archive with its usual record padding (tar pads
 * to 10240-byte records, some writers to more) from a file with something else appended: up to
 * MAX_TRAILING_BYTES after the chunk holding the end (chunks are at most CHUNK_BYTES) are ignored whatever
 * they hold, as GNU tar ignores them; more is refused as `invalid_archive`. Both passes stop at the same
 * place, so nothing after the end is ever listed or written.
 *
 * Both passes stop promptly when their signal aborts (between chunks, or while waiting for the unpacker),
 * and then throw the signal's reason.
 */
import { createReadStream } from 'node:fs';
import fs from 'node:fs/promises';
import { once } from 'node:events';
import { pipeline } from 'node:stream/promises';
import { createGunzip } from 'node:zlib';
import { Parser, ReadEntry, Unpack } from 'tar';
import { ArchiveError, invalid, shown, unsafe } from './archive-error.ts';
import { checkEntry, type Kind, type ListedEntry, type Step } from './archive-plan.ts';

const GZIP_MAGIC = Buffer.from([0x1f, 0x8b]);
// The size of the decompressed chunks: how precisely the data after the end is counted.
const CHUNK_BYTES = 64 * 1024;
// Data after the end of the archive that is ignored: record padding, generously.
const MAX_TRAILING_BYTES = 1024 * 1024;

/** Sane modes whatever the archive says: no setuid, setgid or sticky bit, no write for others, readable by the owner. */
function modeFor(kind: Kind, archiveMode: number | undefined): number {
  if (kind === 'directory') return 0o755;
  return (archiveMode ?? 0) & 0o111 ? 0o755 : 0o644;
}

function sameEntry(listed: ListedEntry, entry: ReadEntry): boolean {
  return (
    listed.path === entry.path &&
    listed.type === entry.type &&
    listed.linkpath === entry.linkpath &&
    listed.size === entry.size
  );
}

export interface Limits {
  maxFiles: number;
  maxBytes: number;
  /**
   * Most path components (between slashes or backslashes) of the entries' paths and link targets, all
   * added up: what the planning's work is linear in (src/dataplane/archive-plan.ts).
   */
  maxComponents: number;
}

/** Components between separators, empty ones included: an upper bound, and cheap. */
function componentCount(value: string): number {
  let count = 1;
  for (let i = 0; i < value.length; i += 1) {
    const code = value.charCodeAt(i);
    if (code === 0x2f || code === 0x5c) count += 1;
  }
  return count;
}

/**
 * A parser of the tar package (the listing Parser, or the Unpack) fed with the decompressed archive, up to
 * the end of the archive. Throws the signal's reason once it aborts.
 */
async function feed(archiveFile: string, sink: Parser, maxTarBytes: number, signal: AbortSignal): Promise<void> {
  signal.throwIfAborted();
  let stopped = false;
  const stopParser = (): void => {
    if (stopped) return;
    stopped = true;
    // A new error: the package decorates the one it is given, and the answer is decided elsewhere.
    sink.abort(new Error('extraction stopped'));
  };
  const settled = new Promise<void>((resolve, reject) => {
    sink.on('close', () => resolve());
    sink.on('error', (error: Error) => {
      // In strict mode a warning is an error, but the package goes on with the next entries unless
      // aborted. Only the first error is the answer; the abort's own error comes back here and is ignored.
      reject(error);
      stopParser();
    });
  });
  // Observed below; this only keeps an early exit from leaving it unhandled.
  settled.catch(() => {});
  let atEnd = false;
  sink.on('eof', () => {
    atEnd = true;
  });

  const input = createReadStream(archiveFile);
  const gunzip = createGunzip({ chunkSize: CHUNK_BYTES });
  const piped = pipeline(input, gunzip);
  // A read or gzip failure also destroys `gunzip`, which is where the loop below sees it.
  piped.catch(() => {});

  // Every wait below races this, so that an abort is answered at once, whatever is being waited for; the
  // catch below turns it into the signal's reason.
  let onAbort = (): void => {};
  const aborted = new Promise<never>((_resolve, reject) => {
    onAbort = () => {
      reject(new Error('extraction aborted'));
      stopParser();
      gunzip.destroy();
    };
  });
  aborted.catch(() => {});
  signal.addEventListener('abort', onAbort, { once: true });

  const chunks = (gunzip as AsyncIterable<Buffer>)[Symbol.asyncIterator]();
  let total = 0;
  let trailing = 0;
  try {
    for (;;) {
      const next = await Promise.race([chunks.next(), aborted]);
      if (next.done === true) break;
      const chunk = next.value;
      total += chunk.length;
      if (total > maxTarBytes) {
        throw unsafe(`The archive expands to more than ${maxTarBytes} bytes, more than its entries can account for.`);
      }
      // The parser failed: its error is the answer, awaited below.
      if (stopped) break;
      if (atEnd) {
        trailing += chunk.length;
        if (trailing > MAX_TRAILING_BYTES) {
          throw invalid(
            `The archive has more than ${MAX_TRAILING_BYTES} bytes of data after its end; a tar archive may only be followed by its padding.`,
          );
        }
        continue;
      }
      // A `false` with the end of the archive queued behind an entry still being written comes with a
      // `drain` only after the `eof` event, so no write follows the end.
      if (!sink.write(chunk)) await Promise.race([once(sink, 'drain'), settled, aborted]);
    }
    if (!stopped) sink.end();
    await Promise.race([settled, aborted]);
  } catch (error) {
    // Stop the parser too (an Unpack would go on writing what it already has).
    stopParser();
    throw signal.aborted ? signal.reason : error;
  } finally {
    signal.removeEventListener('abort', onAbort);
    gunzip.destroy();
    input.destroy();
  }
}

export async function isGzipFile(archiveFile: string): Promise<boolean> {
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
export async function listArchive(
  archiveFile: string,
  limits: Limits,
  maxTarBytes: number,
  signal: AbortSignal,
): Promise<ListedEntry[]> {
  const listed: ListedEntry[] = [];
  let bytes = 0;
  let components = 0;
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
          throw unsafe(
            `The archive's files add up to more than ${limits.maxBytes} bytes (reached at '${shown(seen.path)}'), the most a source may have.`,
          );
        }
        // After checkEntry, which bounds the length of both.
        checkEntry(seen);
        components += componentCount(seen.path) + (seen.linkpath === undefined ? 0 : componentCount(seen.linkpath));
        if (components > limits.maxComponents) {
          throw unsafe(
            `The archive's paths and link targets have more than ${limits.maxComponents} components (names between slashes) in all (reached at '${shown(seen.path)}'), the most a source may have.`,
          );
        }
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
    await feed(archiveFile, parser, maxTarBytes, signal);
  } catch (error) {
    throw signal.aborted ? error : (refusal ?? error);
  }
  if (refusal !== undefined) throw refusal;
  return listed;
}

/** The extraction pass, into `staging`, of exactly the planned entries. */
export async function unpackPlanned(
  archiveFile: string,
  staging: string,
  steps: readonly Step[],
  maxTarBytes: number,
  signal: AbortSignal,
): Promise<void> {
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
    await feed(archiveFile, unpack, maxTarBytes, signal);
  } catch (error) {
    throw signal.aborted ? error : (refusal ?? error);
  }
  if (index !== steps.length) throw invalid('The archive changed while it was being extracted.');
}
