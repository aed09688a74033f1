/**
 * Why an archive was refused (src/dataplane/archive-extraction.ts), in messages written for the user;
 * and which failures of the gzip stream or of the `tar` package are the archive's fault.
 */
export type ArchiveFailure = 'unsafe_archive' | 'invalid_archive' | 'archive_too_slow';

/**
 * The archive was refused: `unsafe_archive` when it tries to reach outside the source directory or breaks a
 * limit, `invalid_archive` when it is not a gzipped tar, is damaged, or carries more than a little data
 * after its end, `archive_too_slow` when extracting it took longer than allowed. The message is written for
 * the user.
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

export const unsafe = (message: string): ArchiveError => new ArchiveError('unsafe_archive', message);
export const invalid = (message: string): ArchiveError => new ArchiveError('invalid_archive', message);
export const tooSlow = (timeoutMs: number): ArchiveError =>
  new ArchiveError(
    'archive_too_slow',
    `Extracting the archive took more than ${timeoutMs / 1000} s, the most a source may take; make it smaller or with fewer files.`,
  );

/** A path for a message: control characters would garble it, and an entry name can be 100 KB long. */
export function shown(value: string): string {
  // eslint-disable-next-line no-control-regex -- control characters are exactly what this replaces
  const clean = value.replace(/[\u0000-\u001f\u007f]/g, '?');
  return clean.length > 200 ? `${clean.slice(0, 200)}…` : clean;
}

// Failures of the machine rather than of the archive: reported as they are, not blamed on the user.
const ENVIRONMENT_ERRORS = new Set([
  'ENOSPC',
  'EDQUOT',
  'EACCES',
  'EPERM',
  'EMFILE',
  'ENFILE',
  'EIO',
  'EROFS',
  'ENOMEM',
]);

interface TarFailure {
  code?: unknown;
  tarCode?: unknown;
  entry?: { path?: unknown };
}

/** Turns what the gzip stream or the tar package threw into an ArchiveError, when the archive is to blame. */
export function classify(error: unknown): unknown {
  if (error instanceof ArchiveError || !(error instanceof Error)) return error;
  const { code, tarCode, entry } = error as Error & TarFailure;
  if (typeof code === 'string' && code.startsWith('Z_')) {
    return invalid(`The archive is not a valid gzip file, or it is truncated (${error.message}).`);
  }
  if (typeof tarCode !== 'string') return error;
  const entryPath = typeof entry?.path === 'string' ? shown(entry.path) : undefined;
  if (code === 'TAR_SYMLINK_ERROR') {
    return unsafe(
      `The archive entry '${entryPath ?? '?'}' would be written through a symbolic link; archives may not write through their own links.`,
    );
  }
  if (typeof code === 'string' && ENVIRONMENT_ERRORS.has(code) && tarCode === 'TAR_ENTRY_ERROR') return error;
  const detail = error.message.replace(/^TAR_[A-Z_]+: /, '');
  if (tarCode === 'TAR_ENTRY_ERROR' && entryPath !== undefined) {
    return invalid(
      `The archive entry '${entryPath}' could not be extracted (${typeof code === 'string' && code.startsWith('E') ? code : detail}).`,
    );
  }
  return invalid(`The file is not a valid tar archive, or it is truncated or corrupt (${detail}).`);
}
