// Finding the project's packages as Node finds them from the project's directory.
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

/** The directory of the package `name` as `require` finds it from `fromRequire` (exports need not list package.json). */
export function packageDir(fromRequire, name) {
  // Where `require` would look first: a package whose CommonJS entry is missing (ESM-first ones) is found too.
  for (const modules of fromRequire.resolve.paths(name) ?? []) {
    const manifest = path.join(modules, name, 'package.json');
    if (fs.existsSync(manifest)) return path.dirname(manifest);
  }
  let dir = path.dirname(fromRequire.resolve(name));
  for (;;) {
    const manifest = path.join(dir, 'package.json');
    if (fs.existsSync(manifest) && JSON.parse(fs.readFileSync(manifest, 'utf8')).name === name) return dir;
    const parent = path.dirname(dir);
    if (parent === dir) throw new Error(`could not find the directory of ${name}`);
    dir = parent;
  }
}

/** The file URL of `subpath` of a package as `import` (not `require`) resolves it: one class per module. */
export function esmEntry(fromRequire, name, subpath = '.') {
  const dir = packageDir(fromRequire, name);
  const manifest = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8'));
  let target = manifest.exports?.[subpath] ?? (subpath === '.' ? manifest.module || manifest.main : null);
  while (target && typeof target === 'object') target = target.import ?? target.default;
  if (typeof target !== 'string') throw new Error(`${name} has no ESM entry for ${subpath}`);
  return pathToFileURL(path.join(dir, target)).href;
}

/** Whether the project can load LangChain's PostgreSQL checkpointer and store. */
export function hasPostgresPackages(fromProject) {
  try {
    fromProject.resolve('@langchain/langgraph-checkpoint-postgres');
    return true;
  } catch {
    return false;
  }
}
