/**
 * The two passes of src/dataplane/archive-extraction.ts over a gzipped tarball, with the `tar` package
 * fed through a gzip stream of ours, so that the decompressed size can be capped: the listing, which
 * writes nothing and checks each entry as it is read; and the extraction of exactly the planned entries.
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
}

/** A parser of the tar package (the listing Parser, or the Unpack) fed with the decompressed archive. */
async function feed(archiveFile: string, sink: Parser, maxTarBytes: number): Promise<void> {
  let failed = false;
  const settled = new Promise<void>((resolve, reject) => {
    sink.on('close', () => resolve());
    sink.on('error', (error: Error) => {
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
export async function listArchive(archiveFile: string, limits: Limits, maxTarBytes: number): Promise<ListedEntry[]> {
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
          throw unsafe(
            `The archive's files add up to more than ${limits.maxBytes} bytes (reached at '${shown(seen.path)}'), the most a source may have.`,
          );
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
export async function unpackPlanned(
  archiveFile: string,
  staging: string,
  steps: readonly Step[],
  maxTarBytes: number,
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
    await feed(archiveFile, unpack, maxTarBytes);
  } catch (error) {
    throw refusal ?? error;
  }
  if (index !== steps.length) throw invalid('The archive changed while it was being extracted.');
}
