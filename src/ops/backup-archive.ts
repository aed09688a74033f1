/**
 * The archive `slipway backup` writes and `slipway restore` reads (docs/operations.md, "Back up and
 * restore"): a gzipped tar whose first entry is `manifest.json`, then `manifest.hmac`, then exactly the
 * entries the manifest lists, in its order:
 *
 * - `database/<table>.jsonl`: the rows of each table of the service's database, one JSON object a line,
 *   all read in one snapshot (src/ops/table-data.ts);
 * - `files/<path>`: files of the data directory the service still reads (uploads kept there by versions
 *   that did not store them in the database);
 * - `app-databases/<name>.dump`: an app's own database, as `pg_dump --format=custom` wrote it.
 *
 * The manifest names the Slipway version and schema version it was made on, the encryption key's check
 * value (the key itself is never in the archive), and each entry's size and SHA-256. `manifest.hmac`
 * authenticates the manifest with a key derived from the encryption key, so a restore with another key
 * is refused as such, and an archive changed after it was written (a row added, a file swapped) is
 * refused whole, before anything is written.
 *
 * Reading never uses an entry's path on disk: each entry must be the next one the manifest lists, of its
 * size, and is written to a numbered file of a private staging directory; links, directories and any
 * entry the manifest does not list are refused.
 */
import { createHash, createHmac, hkdfSync, timingSafeEqual } from 'node:crypto';
import { createReadStream, closeSync, openSync, writeSync } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { createGunzip } from 'node:zlib';
import { Ajv } from 'ajv';
import * as tar from 'tar';
import type { ReadEntry } from 'tar';

export const FORMAT = 'slipway-backup';
export const FORMAT_VERSION = 1;
export const MANIFEST = 'manifest.json';
export const MANIFEST_HMAC = 'manifest.hmac';
/** A manifest larger than this is not one we wrote. */
const MANIFEST_MAX_BYTES = 16 * 1024 * 1024;

export type EntryKind = 'table' | 'file' | 'app-database';

export interface ManifestEntry {
  /** Its name in the archive. */
  name: string;
  kind: EntryKind;
  /** The table (kind table), the path under the data directory (file), the database (app-database). */
  subject: string;
  bytes: number;
  sha256: string;
  /** Rows, for tables. */
  rows?: number;
}

export interface Manifest {
  format: typeof FORMAT;
  formatVersion: typeof FORMAT_VERSION;
  slipwayVersion: string;
  createdAt: string;
  /** The migrations the database had: the schema its rows fit. */
  schema: { version: number; migrations: { id: number; name: string }[] };
  /** The key_check row: which key the sealed values are sealed with, and a value sealed with it. */
  keyCheck: { keyId: string; checkValue: string; rotatingTo: string | null };
  /** The apps' databases, and whether their contents are in the archive. */
  appDatabases: { name: string; deploymentId: string; included: boolean }[];
  entries: ManifestEntry[];
}

const NAME = /^[a-z_][a-z0-9_]{0,62}$/;
/** The data directory paths a backup carries: files under uploads/, of plain names. */
export const FILE_PATH = /^uploads\/(?:[A-Za-z0-9_][A-Za-z0-9._-]{0,199}\/){0,4}[A-Za-z0-9_][A-Za-z0-9._-]{0,199}$/;
const APP_DATABASE = /^slw_app_[0-9a-f]{32}$/;

const manifestSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['format', 'formatVersion', 'slipwayVersion', 'createdAt', 'schema', 'keyCheck', 'appDatabases', 'entries'],
  properties: {
    format: { const: FORMAT },
    formatVersion: { const: FORMAT_VERSION },
    slipwayVersion: { type: 'string', maxLength: 100 },
    createdAt: { type: 'string', maxLength: 100 },
    schema: {
      type: 'object',
      additionalProperties: false,
      required: ['version', 'migrations'],
      properties: {
        version: { type: 'integer', minimum: 1 },
        migrations: {
          type: 'array',
          maxItems: 10_000,
          items: {
            type: 'object',
            additionalProperties: false,
            required: ['id', 'name'],
            properties: { id: { type: 'integer', minimum: 1 }, name: { type: 'string', maxLength: 200 } },
          },
        },
      },
    },
    keyCheck: {
      type: 'object',
      additionalProperties: false,
      required: ['keyId', 'checkValue', 'rotatingTo'],
      properties: {
        keyId: { type: 'string', pattern: '^[0-9a-f]{1,128}$' },
        checkValue: { type: 'string', maxLength: 10_000 },
        rotatingTo: { anyOf: [{ type: 'null' }, { type: 'string', pattern: '^[0-9a-f]{1,128}$' }] },
      },
    },
    appDatabases: {
      type: 'array',
      maxItems: 100_000,
      items: {
        type: 'object',
        additionalProperties: false,
        required: ['name', 'deploymentId', 'included'],
        properties: {
          name: { type: 'string', pattern: APP_DATABASE.source },
          deploymentId: { type: 'string', format: 'uuid' },
          included: { type: 'boolean' },
        },
      },
    },
    entries: {
      type: 'array',
      maxItems: 1_000_000,
      items: {
        type: 'object',
        additionalProperties: false,
        required: ['name', 'kind', 'subject', 'bytes', 'sha256'],
        properties: {
          name: { type: 'string', maxLength: 1100 },
          kind: { enum: ['table', 'file', 'app-database'] },
          subject: { type: 'string', maxLength: 1000 },
          bytes: { type: 'integer', minimum: 0 },
          sha256: { type: 'string', pattern: '^[0-9a-f]{64}$' },
          rows: { type: 'integer', minimum: 0 },
        },
      },
    },
  },
} as const;

const ajv = new Ajv({
  allErrors: false,
  formats: { uuid: /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i },
});
const validManifest = ajv.compile<Manifest>(manifestSchema);

/** A backup archive that cannot be used: not ours, damaged, changed, or not for this key or version. */
export class BackupError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'BackupError';
  }
}

/** The archive name of an entry, from what it holds. */
export function entryName(kind: EntryKind, subject: string): string {
  if (kind === 'table') return `database/${subject}.jsonl`;
  if (kind === 'app-database') return `app-databases/${subject}.dump`;
  return `files/${subject}`;
}

/** Whether the entry's name and subject are ones a backup writes (never a path out of the staging area). */
function entryIsSane(entry: ManifestEntry): boolean {
  const subjectOk =
    entry.kind === 'table'
      ? NAME.test(entry.subject)
      : entry.kind === 'app-database'
        ? APP_DATABASE.test(entry.subject)
        : FILE_PATH.test(entry.subject) && !entry.subject.split('/').some((part) => part === '.' || part === '..');
  return subjectOk && entry.name === entryName(entry.kind, entry.subject);
}

/** The key that authenticates manifests: derived from the encryption key, never the key itself. */
function manifestKey(encryptionKey: Buffer): Buffer {
  return Buffer.from(hkdfSync('sha256', encryptionKey, Buffer.alloc(0), 'slipway backup manifest v1', 32));
}

export function signManifest(manifest: Buffer, encryptionKey: Buffer): string {
  return createHmac('sha256', manifestKey(encryptionKey)).update(manifest).digest('hex');
}

export function manifestSignedBy(manifest: Buffer, signature: string, encryptionKey: Buffer): boolean {
  const expected = Buffer.from(signManifest(manifest, encryptionKey), 'hex');
  const given = Buffer.from(signature.trim(), 'hex');
  return given.length === expected.length && timingSafeEqual(given, expected);
}

export async function sha256Of(file: string): Promise<{ sha256: string; bytes: number }> {
  const hash = createHash('sha256');
  let bytes = 0;
  for await (const chunk of createReadStream(file)) {
    hash.update(chunk as Buffer);
    bytes += (chunk as Buffer).length;
  }
  return { sha256: hash.digest('hex'), bytes };
}

/**
 * Writes the archive from a staging directory holding the manifest's entries under their names. It is
 * written beside `output` and renamed into place once complete, so a file at `output` is never half.
 */
export async function writeArchive(
  staging: string,
  manifest: Manifest,
  encryptionKey: Buffer,
  output: string,
): Promise<void> {
  const manifestBytes = Buffer.from(JSON.stringify(manifest, null, 2) + '\n');
  await fs.writeFile(path.join(staging, MANIFEST), manifestBytes);
  await fs.writeFile(path.join(staging, MANIFEST_HMAC), signManifest(manifestBytes, encryptionKey) + '\n');
  const partial = `${output}.partial`;
  await tar.c({ gzip: true, file: partial, cwd: staging, portable: true, noDirRecurse: true, mode: 0o600 }, [
    MANIFEST,
    MANIFEST_HMAC,
    ...manifest.entries.map((e) => e.name),
  ]);
  await fs.chmod(partial, 0o600);
  const handle = await fs.open(partial, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
  await fs.rename(partial, output);
}

export interface OpenedArchive {
  manifest: Manifest;
  /** Where each entry's content was staged, by entry name. */
  staged: Map<string, string>;
}

export interface ReadArchiveOptions {
  /** A private, empty directory to stage the entries in. */
  staging: string;
  /**
   * Called with the manifest and its signature before any entry is staged: throws to refuse the archive
   * (the wrong key, a changed manifest, a schema this version cannot restore).
   */
  accept(manifest: Manifest, manifestBytes: Buffer, signature: string): void | Promise<void>;
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

interface Scan {
  /** Whether the archive's end marker was reached. */
  ended: boolean;
}

/**
 * Feeds the gunzipped archive to the tar parser until its end marker, `shouldStop()`, or an error
 * (a truncated or corrupt file; the parser's own complaints, strict). `onEntry` sees each entry.
 */
async function scan(
  file: string,
  onEntry: (entry: ReadEntry) => void,
  shouldStop: () => boolean,
  fail: (message: string) => void,
): Promise<Scan> {
  const parser = new tar.Parser({ strict: true, onReadEntry: onEntry });
  const state: Scan = { ended: false };
  // Set once the caller stopped reading: what the parser says about the rest is not about the archive.
  let stopped = false;
  parser.on('error', (error: Error) => {
    if (!stopped) fail(`the archive is damaged: ${error.message}`);
  });
  parser.on('warn', (_code: string, message: string | Error) => {
    if (!stopped) fail(`the archive is damaged: ${describe(message)}`);
  });
  // `eof`: the archive's end marker was read (emitted by the parser, absent from its types); anything
  // after it is padding or not ours, and never parsed.
  (parser as unknown as NodeJS.EventEmitter).on('eof', () => (state.ended = true));
  const input = createReadStream(file);
  try {
    for await (const chunk of input.pipe(createGunzip())) {
      parser.write(chunk as Buffer);
      if (state.ended) break;
      if (shouldStop()) {
        stopped = true;
        break;
      }
    }
  } catch (error) {
    fail(`the archive is truncated or not gzip-compressed (${describe(error)})`);
  } finally {
    input.destroy();
  }
  // Ends an entry cut short too (its stream ends, with the parser's complaint), so no reader waits forever.
  if (!state.ended) parser.end();
  return state;
}

/** The content of an entry, up to `limit` bytes (the rest is read and dropped). */
function collect(entry: ReadEntry, limit: number): Promise<Buffer> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    entry.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size <= limit) chunks.push(chunk);
    });
    entry.on('end', () => resolve(Buffer.concat(chunks)));
  });
}

function parseManifest(content: Buffer): Manifest {
  let parsed: unknown;
  try {
    parsed = JSON.parse(content.toString('utf8'));
  } catch (error) {
    throw new BackupError(`${MANIFEST} is not a Slipway backup manifest: ${describe(error)}`);
  }
  if (!validManifest(parsed)) {
    const first = validManifest.errors?.[0];
    throw new BackupError(
      `${MANIFEST} is not a Slipway backup manifest: ${first?.instancePath || '/'} ${first?.message ?? 'is invalid'}`,
    );
  }
  if (!parsed.entries.every(entryIsSane))
    throw new BackupError(
      `${MANIFEST} lists an entry of a name a backup never has: the archive is not one Slipway wrote`,
    );
  if (new Set(parsed.entries.map((e) => e.name)).size !== parsed.entries.length)
    throw new BackupError(`${MANIFEST} lists an entry twice: the archive is not one Slipway wrote`);
  return parsed;
}

/** The first two entries: the manifest and its signature, checked to be those. */
async function readHead(file: string): Promise<{ manifestBytes: Buffer; signature: Buffer }> {
  let failure: string | null = null;
  const fail = (message: string) => {
    failure ??= message;
  };
  const contents: Promise<Buffer>[] = [];
  let seen = 0;
  await scan(
    file,
    (entry) => {
      const position = seen++;
      const expected = position === 0 ? MANIFEST : MANIFEST_HMAC;
      if (position > 1) return entry.resume();
      if (entry.type !== 'File' || entry.path !== expected) {
        fail(`the archive does not start with ${expected} (found ${JSON.stringify(entry.path)}): not a Slipway backup`);
        contents.push(Promise.resolve(Buffer.alloc(0)));
        return entry.resume();
      }
      if (entry.size > MANIFEST_MAX_BYTES) fail(`${expected} is too large to be a Slipway backup's`);
      contents.push(collect(entry, MANIFEST_MAX_BYTES));
    },
    // The third entry's header means the first two were read whole.
    () => failure !== null || seen > 2,
    fail,
  );
  const [manifestBytes, signature] = await Promise.all(contents);
  if (failure) throw new BackupError(failure);
  if (!manifestBytes || !signature)
    throw new BackupError('the archive holds no manifest: it is empty, truncated or not a Slipway backup');
  return { manifestBytes, signature };
}

/**
 * Reads and checks the whole archive: the manifest first (accepted or refused by the caller before
 * anything else is read), then each entry in the manifest's order with its size and SHA-256, each to a
 * numbered file of the staging directory. Throws BackupError for anything else: a truncated or corrupt
 * file, an entry too many, missing or changed, a link or a directory.
 */
export async function readArchive(file: string, options: ReadArchiveOptions): Promise<OpenedArchive> {
  const head = await readHead(file);
  const manifest = parseManifest(head.manifestBytes);
  await options.accept(manifest, head.manifestBytes, head.signature.toString('utf8'));

  let failure: string | null = null;
  const fail = (message: string) => {
    failure ??= message;
  };
  const staged = new Map<string, string>();
  const pending: Promise<void>[] = [];
  let index = 0;
  const state = await scan(
    file,
    (entry) => {
      const position = index++;
      if (failure) return entry.resume();
      if (entry.type !== 'File') {
        fail(`the archive holds a ${entry.type} entry (${JSON.stringify(entry.path)}): a backup holds files only`);
        return entry.resume();
      }
      if (position < 2) {
        // The same manifest as the one accepted (the file could have been replaced meanwhile).
        const before = position === 0 ? head.manifestBytes : head.signature;
        pending.push(
          collect(entry, MANIFEST_MAX_BYTES).then((content) => {
            if (!content.equals(before)) fail('the archive changed while it was read');
          }),
        );
        return;
      }
      const listed = manifest.entries[position - 2];
      if (!listed) {
        fail(`the archive holds an entry its manifest does not list (${JSON.stringify(entry.path)})`);
        return entry.resume();
      }
      if (entry.path !== listed.name || entry.size !== listed.bytes) {
        fail(
          `the archive's entry ${JSON.stringify(entry.path)} (${entry.size} bytes) is not the one its manifest lists there (${listed.name}, ${listed.bytes} bytes): the archive was changed`,
        );
        return entry.resume();
      }
      // Our own name for it: nothing of the archive's path reaches the file system.
      const target = path.join(options.staging, String(position - 2));
      const fd = openSync(target, 'wx', 0o600);
      const hash = createHash('sha256');
      let written = 0;
      pending.push(
        new Promise<void>((resolve) => {
          entry.on('data', (chunk: Buffer) => {
            written += chunk.length;
            hash.update(chunk);
            writeSync(fd, chunk);
          });
          entry.on('end', () => {
            closeSync(fd);
            if (written !== listed.bytes || hash.digest('hex') !== listed.sha256)
              fail(
                `${listed.name} is not what the backup wrote (its SHA-256 differs): the archive was changed or damaged`,
              );
            else staged.set(listed.name, target);
            resolve();
          });
        }),
      );
    },
    () => failure !== null,
    fail,
  );
  await Promise.all(pending);
  if (failure) throw new BackupError(failure);
  if (!state.ended || staged.size !== manifest.entries.length) {
    const missing = manifest.entries.filter((e) => !staged.has(e.name)).map((e) => e.name);
    throw new BackupError(
      `the archive is truncated: ${missing.length} of its ${manifest.entries.length} entries are missing or cut${missing.length > 0 ? ` (${missing.slice(0, 3).join(', ')}${missing.length > 3 ? ', ...' : ''})` : ''}`,
    );
  }
  return { manifest, staged };
}
