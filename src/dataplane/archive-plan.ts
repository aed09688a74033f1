/**
 * The safety checks of an archive (src/dataplane/archive-extraction.ts), on what its listing saw and
 * before anything is written: each entry on its own as it is read, then the tree the entries build
 * together (which entries are kept and where, nothing written through a symbolic link, hard links
 * joining files of the archive, every symbolic link, resolved through the others, staying inside).
 */
import path from 'node:path';
import { invalid, shown, unsafe } from './archive-error.ts';

// Linux gives up on a path after 40 symbolic links (ELOOP); a longer chain cannot be judged, so it is refused.
const MAX_LINK_HOPS = 40;

export type Kind = 'file' | 'directory' | 'symlink' | 'hardlink';

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
export interface ListedEntry {
  path: string;
  type: string;
  linkpath: string | undefined;
  size: number;
}

export type Step =
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

/** Checks of one entry that need nothing but the entry itself; run as the listing reads it. */
export function checkEntry(entry: ListedEntry): void {
  const name = shown(entry.path);
  const refused = REFUSED_TYPES[entry.type];
  if (refused !== undefined) {
    throw unsafe(`The archive entry '${name}' is ${refused}; archives may hold only files, directories and links.`);
  }
  if (isAbsoluteEntryPath(entry.path)) {
    throw unsafe(`The archive entry '${name}' is an absolute path; archives must hold relative paths only.`);
  }
  if (hasParentComponent(entry.path)) {
    throw unsafe(
      `The archive entry '${name}' points outside the source directory; archives must hold relative paths only.`,
    );
  }
  const kind = KIND_OF_TYPE[entry.type];
  const target = entry.linkpath ?? '';
  if (kind === 'symlink' && isAbsoluteEntryPath(target)) {
    throw unsafe(
      `The archive entry '${name}' is a symbolic link to the absolute path '${shown(target)}'; links must be relative and stay inside the source directory.`,
    );
  }
  if (kind === 'hardlink' && (isAbsoluteEntryPath(target) || hasParentComponent(target))) {
    throw unsafe(
      `The archive entry '${name}' is a hard link to '${shown(target)}', outside the source directory; links must stay inside it.`,
    );
  }
}

/**
 * Where `target`, read in directory `from`, leads in the planned tree, following the archive's symbolic
 * links on the way; null when it leaves the tree, or the chain of links is too long to judge. Components
 * that the archive does not make are plain names (the destination starts empty).
 */
function resolveInTree(
  from: readonly string[],
  target: string,
  nodes: ReadonlyMap<string, PlannedNode>,
  hops: { left: number },
): string[] | null {
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
export function planExtraction(listed: readonly ListedEntry[], stripSingleTop: boolean): Step[] {
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
        nodes.set(key, {
          kind: 'directory',
          path: ancestor.join('/'),
          implied: true,
          shown: shown(ancestor.join('/')),
        });
      } else if (node.kind === 'symlink') {
        throw unsafe(
          `The archive entry '${name}' would be written through the symbolic link '${node.shown}'; archives may not write through their own links.`,
        );
      } else if (node.kind !== 'directory') {
        throw invalid(
          `The archive entry '${name}' sits under '${node.shown}', which the archive makes a ${KIND_NAMES[node.kind]}.`,
        );
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
            : `The archive entry '${name}' appears more than once, as a ${KIND_NAMES[existing.kind]} ` +
                `and as a ${KIND_NAMES[kind]}; an archive may not replace one kind of entry with another.`,
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
        throw unsafe(
          `The archive entry '${name}' is a hard link to '${shown(entry.linkpath ?? '')}', ` +
            `which is not a file earlier in the archive; hard links may only join files inside ` +
            `the source directory.`,
        );
      }
    } else if (kind === 'symlink') {
      // The target stays as written: it is read relative to the link's own directory.
      linkpath = entry.linkpath;
      symlinks.push({ from: parts.slice(0, -1), target: entry.linkpath ?? '', shown: name });
    }

    nodes.set(key, {
      kind,
      path: parts.join('/'),
      implied: false,
      shown: name,
      ...(kind === 'symlink' ? { target: entry.linkpath ?? '' } : {}),
    });
    steps.push({ listed: entry, action: 'extract', kind, path: parts.join('/'), linkpath });
  }

  // Judged on the finished tree: a link may run through links that come later in the archive.
  for (const link of symlinks) {
    if (!linkStaysInside(link.from, link.target, nodes)) {
      throw unsafe(
        `The archive entry '${link.shown}' is a symbolic link to '${shown(link.target)}', ` +
          `which points outside the source directory; links must stay inside it.`,
      );
    }
  }
  return steps;
}
