/**
 * Packing a folder for `slipway deploy`: every file git would commit (`.gitignore` files, at any
 * depth, with git's rules) minus what `.slipwayignore` leaves out, never `node_modules` or `.git`
 * (the data plane installs dependencies itself), as a gzipped tarball with portable headers.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import ignore, { type Ignore } from 'ignore';
import * as tar from 'tar';

/** Left out wherever they are, whatever the ignore files say. */
const NEVER_PACKED = new Set(['node_modules', '.git']);
const IGNORE_FILES = ['.gitignore', '.slipwayignore'];

export interface PackedSource {
  /** The gzipped tarball. */
  tarball: Buffer<ArrayBuffer>;
  /** The paths packed, relative to the folder, with `/`. */
  files: string[];
}

/** Rules of one ignore file, which apply below the directory it is in. */
interface RuleSet {
  base: string;
  rules: Ignore;
}

async function readRules(dir: string, relative: string, names: string[]): Promise<RuleSet | null> {
  const rules = ignore();
  let any = false;
  for (const name of names) {
    const text = await fs.readFile(path.join(dir, relative, name), 'utf8').catch((error: NodeJS.ErrnoException) => {
      if (error.code === 'ENOENT' || error.code === 'EISDIR') return null;
      throw error;
    });
    if (text === null) continue;
    rules.add(text);
    any = true;
  }
  return any ? { base: relative, rules } : null;
}

/** Git's order: a deeper file's rule (a `!negation` too) wins over a shallower one's. */
function ignored(sets: RuleSet[], relative: string, isDirectory: boolean): boolean {
  let result = false;
  for (const set of sets) {
    const local = path.posix.relative(set.base, relative);
    const verdict = set.rules.test(isDirectory ? `${local}/` : local);
    if (verdict.ignored) result = true;
    else if (verdict.unignored) result = false;
  }
  return result;
}

/** The files of `dir` that a deploy packs, sorted. */
export async function listSourceFiles(dir: string): Promise<string[]> {
  const files: string[] = [];
  const walk = async (relative: string, inherited: RuleSet[]) => {
    // The root's .slipwayignore applies to the whole tree; .gitignore files apply where they are.
    const own = await readRules(dir, relative, relative === '' ? IGNORE_FILES : ['.gitignore']);
    const sets = own ? [...inherited, own] : inherited;
    const entries = await fs.readdir(path.join(dir, relative), { withFileTypes: true });
    for (const entry of entries) {
      if (NEVER_PACKED.has(entry.name)) continue;
      const child = relative === '' ? entry.name : `${relative}/${entry.name}`;
      // As git does, an ignored directory is not entered, so nothing below it can be re-included.
      if (entry.isDirectory()) {
        if (!ignored(sets, child, true)) await walk(child, sets);
      } else if ((entry.isFile() || entry.isSymbolicLink()) && !ignored(sets, child, false)) {
        files.push(child);
      }
    }
  };
  await walk('', []);
  return files.sort();
}

export async function packSource(dir: string): Promise<PackedSource> {
  const files = await listSourceFiles(dir);
  const chunks: Buffer[] = [];
  // Links are stored as links (the data plane refuses any that leave the tree), never followed.
  for await (const chunk of tar.create({ gzip: true, cwd: dir, portable: true, noDirRecurse: true }, files))
    chunks.push(chunk);
  return { tarball: Buffer.concat(chunks), files };
}
