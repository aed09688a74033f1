/**
 * Reads a revision's app config file (`framework_config_path`) and the few facts about its source that
 * the defaults need, then hands both to the pure rules in src/domain/app-config.ts, or, for a LangGraph
 * project's langgraph.json, src/domain/langgraph-config.ts (which also gets the launcher of its server
 * written into the source).
 *
 * One module for both sides: the data plane loads the config of an extracted source (`loadAppConfig`),
 * and `slipway deploy` checks the user's folder with `readAppConfig` before it creates or uploads
 * anything, so a mistake is named with the same rules and words, and nothing is written to the folder.
 *
 * The source is the user's: the path they name, and every link in it, must stay inside the source
 * directory, or a revision could make the data plane read (and quote in an error) a host file.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import {
  AppConfigError,
  parseJsonFile,
  resolveAppConfig,
  type AppConfig,
  type CommandOverrides,
  type SourceFiles,
} from '../domain/app-config.ts';
import {
  LANGGRAPH_LAUNCHER_PATH,
  isLangGraphConfig,
  langGraphReferencedPaths,
  resolveLangGraphConfig,
  type LangGraphSourceFacts,
  type PathKind,
} from '../domain/langgraph-config.ts';

export { AppConfigError, type AppConfig } from '../domain/app-config.ts';

// Config files and package.json are small; a bound keeps a hostile source from filling memory.
const MAX_FILE_BYTES = 1024 * 1024;

/** The named path, relative and without `..`, or an error naming it (the API checks the same at write time). */
function relativePath(configPath: string): string {
  if (configPath.trim() === '')
    throw new AppConfigError('framework_config_path is empty; name the app config file, e.g. slipway.json');
  if (configPath.includes('\0')) throw new AppConfigError('framework_config_path must not contain a NUL character');
  const segments = configPath.split(/[\\/]+/);
  if (path.isAbsolute(configPath) || /^[\\/]/.test(configPath) || segments.includes('..')) {
    throw new AppConfigError(
      `framework_config_path ${JSON.stringify(configPath)} must be a relative path inside the source (no leading '/', no '..')`,
    );
  }
  return path.normalize(segments.filter((s) => s !== '' && s !== '.').join(path.sep) || '.');
}

function isInside(root: string, real: string): boolean {
  const rel = path.relative(root, real);
  return rel === '' || (!rel.startsWith(`..${path.sep}`) && rel !== '..' && !path.isAbsolute(rel));
}

const code = (error: unknown): string | undefined => (error as NodeJS.ErrnoException | null)?.code;

/** The real path of `file` when it exists and stays inside `root`; null when it does not exist. */
async function realPathInside(root: string, file: string, shownAs: string): Promise<string | null> {
  let real: string;
  try {
    real = await fs.realpath(file);
  } catch (error) {
    if (code(error) === 'ENOENT' || code(error) === 'ENOTDIR') return null;
    if (code(error) === 'ELOOP') throw new AppConfigError(`${shownAs} is a loop of links`);
    throw error;
  }
  if (!isInside(root, real)) throw new AppConfigError(`${shownAs} is a link that leads outside the source directory`);
  return real;
}

async function readSmallFile(real: string, shownAs: string): Promise<string> {
  const stat = await fs.stat(real);
  if (!stat.isFile()) throw new AppConfigError(`${shownAs} is not a file`);
  if (stat.size > MAX_FILE_BYTES) throw new AppConfigError(`${shownAs} is larger than ${MAX_FILE_BYTES / 1024} KiB`);
  return fs.readFile(real, 'utf8');
}

/**
 * The root files the defaults look at. A link that leads outside the source counts as absent: its
 * target is not part of the app.
 */
async function describeSource(root: string): Promise<SourceFiles> {
  const rootFiles: string[] = [];
  for (const entry of await fs.readdir(root, { withFileTypes: true })) {
    if (entry.isFile()) rootFiles.push(entry.name);
    else if (entry.isSymbolicLink()) {
      const real = await fs.realpath(path.join(root, entry.name)).catch(() => null);
      if (real && isInside(root, real) && (await fs.stat(real)).isFile()) rootFiles.push(entry.name);
    }
  }
  const packageJson = rootFiles.includes('package.json')
    ? await readSmallFile(await fs.realpath(path.join(root, 'package.json')), 'package.json')
    : null;
  return { rootFiles, packageJson };
}

/**
 * Loads and resolves the app config of the source in `sourceDir`. Every problem of the user's making is
 * an `AppConfigError` (reason `invalid_app_config`) naming the file and the field; a missing
 * `sourceDir` is the data plane's own failure and surfaces as the file-system error.
 */
export async function loadAppConfig(
  sourceDir: string,
  configPath: string,
  overrides: CommandOverrides,
  /** Where a LangGraph server keeps its state at run time (the source is read-only then). */
  langGraphStateDir: string | null = null,
): Promise<AppConfig> {
  const { config, langGraph, root, name } = await readConfig(sourceDir, configPath, overrides);
  if (langGraph) {
    await writeLauncher(root);
    if (langGraphStateDir !== null) await linkLangGraphState(root, name, langGraphStateDir);
  }
  return config;
}

/**
 * The app config of the source in `sourceDir` as `loadAppConfig` resolves it, without writing anything
 * into the directory: what `slipway deploy` checks a folder with before it uploads it.
 */
export async function readAppConfig(
  sourceDir: string,
  configPath: string,
  overrides: CommandOverrides = {},
): Promise<AppConfig> {
  return (await readConfig(sourceDir, configPath, overrides)).config;
}

async function readConfig(
  sourceDir: string,
  configPath: string,
  overrides: CommandOverrides,
): Promise<{ config: AppConfig; langGraph: boolean; root: string; name: string }> {
  const name = relativePath(configPath);
  const root = await fs.realpath(sourceDir);
  const real = await realPathInside(root, path.join(root, name), configPath);
  if (real === null)
    throw new AppConfigError(`${configPath} was not found in the source; framework_config_path must name a file in it`);
  const parsed = parseJsonFile(await readSmallFile(real, configPath), configPath);
  if (isLangGraphConfig(configPath, parsed)) {
    const facts = await describeLangGraphSource(root, configPath, parsed);
    return { config: resolveLangGraphConfig(configPath, parsed, facts, overrides), langGraph: true, root, name };
  }
  return {
    config: resolveAppConfig(configPath, parsed, await describeSource(root), overrides),
    langGraph: false,
    root,
    name,
  };
}

/** What the LangGraph rules asked about: each path's kind, and the text of the files they read. */
async function describeLangGraphSource(
  root: string,
  configPath: string,
  parsed: unknown,
): Promise<LangGraphSourceFacts> {
  const { paths, read } = langGraphReferencedPaths(configPath, parsed);
  const kinds: Record<string, PathKind> = {};
  const texts: Record<string, string> = {};
  for (const relative of paths) {
    let real: string | null;
    try {
      real = await realPathInside(root, path.join(root, relative), relative);
    } catch (error) {
      if (!(error instanceof AppConfigError)) throw error;
      kinds[relative] = 'outside';
      continue;
    }
    const stat = real === null ? null : await fs.stat(real);
    kinds[relative] = stat === null ? 'missing' : stat.isFile() ? 'file' : stat.isDirectory() ? 'dir' : 'missing';
    if (real !== null && kinds[relative] === 'file' && read.includes(relative))
      texts[relative] = await readSmallFile(real, relative);
  }
  return { kinds, texts };
}

// The launcher ships with the service; its copy in the source travels with the build output (a
// redeploy, a restart after a service restart), so a revision keeps the launcher it was built with. It is
// the entry file and the directory of modules it imports (runtime/langgraph/, the PostgreSQL layer).
const LAUNCHER_SOURCE = new URL('../../runtime/langgraph-server.mjs', import.meta.url);
const LAUNCHER_MODULES = new URL('../../runtime/langgraph/', import.meta.url);

/**
 * The LangGraph server keeps its state in `.langgraph_api` beside the config; the sealed source is
 * read-only when it runs, so that name becomes a link to the deployment's own writable directory.
 */
async function linkLangGraphState(root: string, configName: string, stateDir: string): Promise<void> {
  const projectDir = await realPathInside(root, path.join(root, path.dirname(configName)), path.dirname(configName));
  if (projectDir === null) return;
  const link = path.join(projectDir, '.langgraph_api');
  // What the archive had there is state of someone's laptop, not of this deployment.
  await fs.rm(link, { recursive: true, force: true });
  await fs.symlink(stateDir, link);
}

async function writeLauncher(root: string): Promise<void> {
  const target = path.join(root, LANGGRAPH_LAUNCHER_PATH);
  const modules = path.join(path.dirname(target), 'langgraph');
  try {
    await fs.mkdir(path.dirname(target), { recursive: true });
    // The directory may come from the archive: it must not be a link that leads out of the source.
    if (!isInside(root, await fs.realpath(path.dirname(target))))
      throw new Error('it is a link that leads outside the source');
    await fs.rm(target, { force: true });
    await fs.writeFile(target, await fs.readFile(LAUNCHER_SOURCE), { mode: 0o644, flag: 'wx' });
    // What the archive had there goes (a link is removed, not followed); the directory is made anew.
    await fs.rm(modules, { recursive: true, force: true });
    await fs.mkdir(modules);
    for (const name of await fs.readdir(LAUNCHER_MODULES)) {
      if (!name.endsWith('.mjs')) continue;
      await fs.writeFile(path.join(modules, name), await fs.readFile(new URL(name, LAUNCHER_MODULES)), {
        mode: 0o644,
        flag: 'wx',
      });
    }
  } catch (error) {
    throw new AppConfigError(
      `${LANGGRAPH_LAUNCHER_PATH} could not be written into the source (${error instanceof Error ? error.message : String(error)}); remove it from the archive`,
    );
  }
}
