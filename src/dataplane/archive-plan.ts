/**
 * The safety checks of an archive (src/dataplane/archive-extraction.ts), on what its listing saw and
 * before anything is written: each entry on its own as it is read, then the tree the entries build
 * together (which entries are kept and where, nothing written through a symbolic link, hard links
 * joining files of the archive, every symbolic link, resolved through the others, staying inside).
 *
 * The planning is synchronous, so it must be cheap whatever the archive holds: it would otherwise stall the
 * whole process, shutdown included. Hence a tree of nodes, one per path component, walked one component
 * at a time (keying each prefix of a path by its whole text was quadratic in the depth: one entry with a
 * 1 MiB path of `a/a/a/…` held the process for hours); each symbolic link resolved once and remembered;
 * paths and link targets no longer than a file system takes (MAX_PATH_BYTES); and at most as many
 * directories that no entry lists (implied by the paths under them) as the archive may have entries.
 */
import path from 'node:path';
import { invalid, shown, unsafe } from './archive-error.ts';

// Linux gives up on a path after 40 symbolic links (ELOOP); a longer chain cannot be judged, so it is refused.
const MAX_LINK_HOPS = 40;
// PATH_MAX (4096, with its terminating NUL): Linux writes neither a longer path nor a longer link target.
const MAX_PATH_BYTES = 4095;

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

/** One path of the tree the archive builds: a component under its parent. */
interface PlannedNode {
  kind: Kind;
  /** The component as written (after stripping); empty for the root. */
  name: string;
  /** Undefined for the root only. */
  parent: PlannedNode | undefined;
  /** By folded name (foldName); made for the first child. */
  children?: Map<string, PlannedNode>;
  /** Made by the entries under it rather than by an entry of its own. */
  implied: boolean;
  /** For a node an entry made: the path as written after stripping, for lookups that must match exactly. */
  path?: string;
  /** For a node an entry made: the entry's path, for messages. */
  shown?: string;
  target?: string;
  /** A symbolic link's resolution, once worked out; null when it leads out or loops. */
  resolved?: Resolved | null;
  /** Where a resolution stands on this node, once needed. */
  place?: Place;
}

/**
 * Where a resolution stands: a node of the tree, or a name under one that the archive does not make
 * (node undefined); `up` is where `..` leads, undefined at the root. Shared, never copied.
 */
interface Place {
  node: PlannedNode | undefined;
  up: Place | undefined;
}

interface Resolved {
  place: Place;
  /** Symbolic links followed to get there, this one included. */
  hops: number;
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
// case and the Unicode form so that the checks below see what such a file system would. Per component,
// as a file system compares them.
function foldName(name: string): string {
  return name.normalize('NFC').toLowerCase();
}

function childOf(dir: PlannedNode, name: string): PlannedNode | undefined {
  return dir.children?.get(foldName(name));
}

function addChild(dir: PlannedNode, name: string, node: Omit<PlannedNode, 'name' | 'parent'>): PlannedNode {
  const child: PlannedNode = { ...node, name, parent: dir };
  dir.children ??= new Map();
  dir.children.set(foldName(name), child);
  return child;
}

/** The node at `parts` from the root, without following links; undefined when the archive makes none. */
function lookup(root: PlannedNode, parts: readonly string[]): PlannedNode | undefined {
  let node: PlannedNode | undefined = root;
  for (const part of parts) {
    node = node === undefined ? undefined : childOf(node, part);
  }
  return node;
}

/** A node's path, as the entry that made it wrote it, or as its components were first written. */
function shownOf(node: PlannedNode): string {
  if (node.shown !== undefined) return node.shown;
  const names: string[] = [];
  for (let at: PlannedNode | undefined = node; at?.parent !== undefined; at = at.parent) names.push(at.name);
  return shown(names.reverse().join('/'));
}

function placeOf(node: PlannedNode): Place {
  node.place ??= { node, up: node.parent === undefined ? undefined : placeOf(node.parent) };
  return node.place;
}

/** Checks of one entry that need nothing but the entry itself; run as the listing reads it. */
export function checkEntry(entry: ListedEntry): void {
  const name = shown(entry.path);
  if (Buffer.byteLength(entry.path) > MAX_PATH_BYTES) {
    throw invalid(
      `The archive entry '${name}' has a path of more than ${MAX_PATH_BYTES} bytes, longer than a file system takes.`,
    );
  }
  if (entry.linkpath !== undefined && Buffer.byteLength(entry.linkpath) > MAX_PATH_BYTES) {
    throw invalid(
      `The archive entry '${name}' is a link to a path of more than ${MAX_PATH_BYTES} bytes, longer than a file system takes.`,
    );
  }
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
 * Where `target`, read from `from`, leads in the planned tree, following the archive's symbolic links on
 * the way; null when it leaves the tree, or it follows more than `maxHops` links. Components that the
 * archive does not make are plain names (the destination starts empty). Linear in the target: each link on
 * the way is resolved once for all (resolveLink). `nesting` counts the links whose resolution is under way.
 */
function walk(from: Place, target: string, maxHops: number, nesting: number): Resolved | null {
  let place = from;
  let hops = 0;
  for (const part of target.split('/')) {
    if (part === '' || part === '.') continue;
    if (part === '..') {
      if (place.up === undefined) return null;
      place = place.up;
      continue;
    }
    const node = place.node === undefined ? undefined : childOf(place.node, part);
    if (node?.kind === 'symlink') {
      const through = resolveLink(node, nesting + 1);
      if (through === null) return null;
      hops += through.hops;
      if (hops > maxHops) return null;
      place = through.place;
    } else {
      place = { node, up: place };
    }
  }
  return { place, hops };
}

/**
 * Where a symbolic link leads, read from its own directory: the same wherever the link is met, so worked
 * out once. A link met again while its own resolution is under way loops: Linux would give up (ELOOP).
 *
 * Links resolved within links nest: past MAX_LINK_HOPS + 1 of them, the link being judged at the top
 * follows more than MAX_LINK_HOPS and is refused, so the resolution stops there (rather than recursing
 * as deep as the archive's longest chain), and null is remembered for the links under way: a wrong
 * verdict for one of them on its own, but the plan is refused before any other link is judged.
 */
function resolveLink(link: PlannedNode, nesting: number): Resolved | null {
  if (link.resolved !== undefined) return link.resolved;
  if (nesting > MAX_LINK_HOPS + 1) return null;
  // Marks the resolution as under way.
  link.resolved = null;
  const parent = link.parent === undefined ? undefined : placeOf(link.parent);
  const through = parent === undefined ? null : walk(parent, link.target ?? '', MAX_LINK_HOPS - 1, nesting);
  link.resolved = through === null ? null : { place: through.place, hops: through.hops + 1 };
  return link.resolved;
}

function linkStaysInside(link: PlannedNode, target: string): boolean {
  if (link.parent === undefined) return false;
  const from = placeOf(link.parent);
  // A backslash is a plain character here, but a separator to the package's own check and on Windows:
  // the link must stay inside read either way.
  const readings = target.includes('\\') ? [target, target.replaceAll('\\', '/')] : [target];
  return readings.every((reading) => walk(from, reading, MAX_LINK_HOPS, 0) !== null);
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
 * build together; at most `maxImplied` directories may be implied by paths rather than listed. Throws
 * ArchiveError.
 */
export function planExtraction(listed: readonly ListedEntry[], stripSingleTop: boolean, maxImplied: number): Step[] {
  const top = stripSingleTop ? singleTopDirectory(listed) : undefined;
  const strip = (parts: string[]): string[] => (top !== undefined && parts[0] === top ? parts.slice(1) : parts);
  const root: PlannedNode = { kind: 'directory', name: '', parent: undefined, implied: false };
  const symlinks: { node: PlannedNode; target: string }[] = [];
  const steps: Step[] = [];
  let implied = 0;

  for (const entry of listed) {
    const kind = KIND_OF_TYPE[entry.type];
    // Only these types reach the filter; anything else is a bug in this module, not in the archive.
    if (kind === undefined) throw new Error(`unexpected tar entry type ${entry.type}`);
    const name = shown(entry.path);
    const parts = strip(componentsOf(entry.path));
    const last = parts.at(-1);
    if (last === undefined) {
      if (kind !== 'directory') throw unsafe(`The archive entry '${name}' would replace the source directory itself.`);
      steps.push({ listed: entry, action: 'skip' });
      continue;
    }

    let dir = root;
    for (const part of parts.slice(0, -1)) {
      const node = childOf(dir, part);
      if (node === undefined) {
        implied += 1;
        if (implied > maxImplied) {
          throw unsafe(
            `The archive's paths make more than ${maxImplied} directories that it does not list (reached at '${name}'), the most a source may have.`,
          );
        }
        dir = addChild(dir, part, { kind: 'directory', implied: true });
      } else if (node.kind === 'symlink') {
        throw unsafe(
          `The archive entry '${name}' would be written through the symbolic link '${shownOf(node)}'; archives may not write through their own links.`,
        );
      } else if (node.kind !== 'directory') {
        throw invalid(
          `The archive entry '${name}' sits under '${shownOf(node)}', which the archive makes a ${KIND_NAMES[node.kind]}.`,
        );
      } else {
        dir = node;
      }
    }

    const existing = childOf(dir, last);
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
      const target = lookup(root, targetParts);
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
    }

    const made = { kind, implied: false, path: parts.join('/'), shown: name };
    let node: PlannedNode;
    if (existing === undefined) {
      node = addChild(dir, last, kind === 'symlink' ? { ...made, target: entry.linkpath ?? '' } : made);
    } else {
      // A file or directory listed again: the later entry's spelling, and its children kept.
      node = existing;
      Object.assign(node, made, { name: last });
    }
    if (kind === 'symlink') symlinks.push({ node, target: entry.linkpath ?? '' });
    steps.push({ listed: entry, action: 'extract', kind, path: parts.join('/'), linkpath });
  }

  // Judged on the finished tree: a link may run through links that come later in the archive.
  for (const link of symlinks) {
    if (!linkStaysInside(link.node, link.target)) {
      throw unsafe(
        `The archive entry '${link.node.shown ?? ''}' is a symbolic link to '${shown(link.target)}', ` +
          `which points outside the source directory; links must stay inside it.`,
      );
    }
  }
  return steps;
}
