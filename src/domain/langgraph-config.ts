/**
 * LangGraph applications (docs/langgraph.md): a framework config file named `langgraph.json`, or any
 * config with a `graphs` key, is a LangGraph project as LangChain's CLIs describe it, and resolves to
 * the same AppConfig as the service's own format (src/domain/app-config.ts): install commands with
 * the project's package manager, and a start command that serves its graphs with LangChain's
 * open-source API server, healthy on `/ok`; a JavaScript project's state in the deployment's database.
 *
 * Pure, like app-config.ts: `langGraphReferencedPaths` says which paths of the source the rules need
 * to know about, src/dataplane/app-config-file.ts looks them up, and `resolveLangGraphConfig` decides.
 * Every path is relative to the root of the source, with `/` separators.
 */
import path from 'node:path';
import { jsonMistake, parseJsonText } from './json-mistakes.ts';
import {
  AppConfigError,
  ENV_NAME,
  checkEnv,
  commandProblem,
  isPlainObject,
  isPlatformEnvName,
  shellWord,
  shown,
  type AppConfig,
  type CommandOverrides,
} from './app-config.ts';

/** The LangGraph.js API server put beside a project that does not depend on it (`@langchain/langgraph-api`). */
const LANGGRAPH_JS_SERVER_PACKAGE = '@langchain/langgraph-api';
/**
 * Pinned: the server is part of the app, so a revision must install the same one tomorrow. 1.5.1 is the
 * newest release whose peer range takes @langchain/langgraph 1.x with its checkpointer 1.2 (2.0.0 wants
 * the checkpointer ~1.0 and conflicts with a current project).
 */
export const LANGGRAPH_JS_SERVER_VERSION = '1.5.1';
/**
 * LangChain's PostgreSQL checkpointer and store, which the launcher gives the JS server when the
 * deployment has its database (runtime/langgraph-server.mjs). Pinned like the server; 1.0.5 takes
 * @langchain/langgraph-checkpoint 1.x, and brings `pg`.
 */
const LANGGRAPH_POSTGRES_PACKAGE = '@langchain/langgraph-checkpoint-postgres';
export const LANGGRAPH_POSTGRES_VERSION = '1.0.5';
/**
 * The SDKs of MCP and A2A, which the launcher serves every JS deployment's graphs with (`/mcp`, `/a2a`,
 * runtime/langgraph/protocols.mjs). Pinned like the server: the runtime is written against these releases.
 */
export const MCP_SDK_PACKAGE = '@modelcontextprotocol/sdk';
export const MCP_SDK_VERSION = '1.32.2';
export const A2A_SDK_PACKAGE = '@a2a-js/sdk';
export const A2A_SDK_VERSION = '1.3.0';
/** Packages whose presence in a project's package.json means it brings the JS server itself. */
const JS_SERVER_PROVIDERS = [LANGGRAPH_JS_SERVER_PACKAGE, '@langchain/langgraph-cli'];
/** The open-source in-memory Python server, as `langgraph dev` runs it. */
const LANGGRAPH_PYTHON_SERVER_REQUIREMENT = 'langgraph-cli[inmem]>=0.4';
/** Where the data plane writes the launcher (runtime/langgraph-server.mjs) in the source. */
export const LANGGRAPH_LAUNCHER_PATH = '.slipway/langgraph-server.mjs';
const LANGGRAPH_HEALTH_PATH = '/ok';
/**
 * The health path of a JavaScript project with custom auth: LangChain's JS server runs the project's
 * auth handler on every path but `/info`, so `/ok` answers 401 to the health check there.
 */
const LANGGRAPH_AUTH_HEALTH_PATH = '/info';

export type LangGraphLanguage = 'js' | 'python';
export type PathKind = 'file' | 'dir' | 'missing' | 'outside';

/** What the reader found for the paths `langGraphReferencedPaths` named. */
export interface LangGraphSourceFacts {
  /** The kind of every path named in `paths` (a link that leads out of the source is `outside`). */
  readonly kinds: Readonly<Record<string, PathKind>>;
  /** The text of every path named in `read` that is a file. */
  readonly texts: Readonly<Record<string, string>>;
}

/** A config path that the LangGraph rules apply to. */
export function isLangGraphConfig(file: string, raw: unknown): boolean {
  return (
    path.posix.basename(file.replaceAll('\\', '/')) === 'langgraph.json' || (isPlainObject(raw) && 'graphs' in raw)
  );
}

/** Lockfiles in the order LangChain's CLI tries them (yarn, pnpm, npm, bun), with their package manager. */
const LOCKFILES: readonly { name: string; manager: PackageManager }[] = [
  { name: 'yarn.lock', manager: 'yarn' },
  { name: 'pnpm-lock.yaml', manager: 'pnpm' },
  { name: 'package-lock.json', manager: 'npm' },
  { name: 'npm-shrinkwrap.json', manager: 'npm' },
  { name: 'bun.lock', manager: 'bun' },
  { name: 'bun.lockb', manager: 'bun' },
];
type PackageManager = 'npm' | 'pnpm' | 'yarn' | 'bun';
const PYTHON_PACKAGE_MARKERS = ['pyproject.toml', 'setup.py', 'requirements.txt'];

const posix = path.posix;

function configDirOf(file: string): string {
  return posix.dirname(posix.normalize(file.replaceAll('\\', '/')));
}

/** `ref` (relative to the config's directory) as a path from the source root, or null when it leaves the source. */
function inSource(configDir: string, ref: string): string | null {
  if (ref.includes('\0') || posix.isAbsolute(ref)) return null;
  const joined = posix.normalize(posix.join(configDir, ref.replaceAll('\\', '/')));
  return joined === '..' || joined.startsWith('../') ? null : joined.replace(/\/$/, '') || '.';
}

/** The config's directory and every directory above it, up to the root ('.'). */
function ancestors(configDir: string): string[] {
  const dirs = [configDir];
  while (dirs.at(-1) !== '.') dirs.push(posix.dirname(dirs.at(-1)!));
  return dirs;
}

const at = (dir: string, name: string): string => (dir === '.' ? name : `${dir}/${name}`);

/** A graph spec's file part (`./src/agent.ts:graph` -> `./src/agent.ts`), or null for a Python module path. */
function graphFile(spec: string, language: LangGraphLanguage): string | null {
  const colon = spec.lastIndexOf(':');
  const file = colon > 0 ? spec.slice(0, colon) : spec;
  if (language === 'js') return file;
  return file.includes('/') || file.endsWith('.py') ? file : null;
}

function graphSpecs(raw: Record<string, unknown>): [string, unknown][] {
  return isPlainObject(raw.graphs) ? Object.entries(raw.graphs) : [];
}

const specPath = (spec: unknown): string | null =>
  typeof spec === 'string' ? spec : isPlainObject(spec) && typeof spec.path === 'string' ? spec.path : null;

function languageOf(raw: Record<string, unknown>, hasPackageJson: boolean): LangGraphLanguage {
  // LangChain's rule: python_version wins (a Python server that also builds JS graphs); then node_version.
  if (raw.python_version !== undefined) return 'python';
  if (raw.node_version !== undefined) return 'js';
  return hasPackageJson ? 'js' : 'python';
}

const localDependencies = (raw: Record<string, unknown>): string[] =>
  Array.isArray(raw.dependencies)
    ? raw.dependencies.filter((d): d is string => typeof d === 'string' && d.startsWith('.'))
    : [];

/** The paths (from the source root) whose kind, and the files whose text, the rules need. */
export function langGraphReferencedPaths(file: string, raw: unknown): { paths: string[]; read: string[] } {
  const paths = new Set<string>();
  const read = new Set<string>();
  if (!isPlainObject(raw)) return { paths: [], read: [] };
  const configDir = configDirOf(file);
  for (const dir of ancestors(configDir)) {
    paths.add(at(dir, 'package.json'));
    read.add(at(dir, 'package.json'));
    for (const lock of LOCKFILES) paths.add(at(dir, lock.name));
  }
  for (const [, spec] of graphSpecs(raw)) {
    const specText = specPath(spec);
    // Both languages' readings of the path, so the rules can pick one once they know the language.
    const asFile = specText === null ? null : graphFile(specText, 'js');
    const where = asFile === null ? null : inSource(configDir, asFile);
    if (where) paths.add(where);
  }
  for (const dependency of localDependencies(raw)) {
    const where = inSource(configDir, dependency);
    if (!where) continue;
    paths.add(where);
    for (const marker of PYTHON_PACKAGE_MARKERS) paths.add(at(where, marker));
  }
  for (const field of ['env', 'pip_config_file'] as const) {
    const value = raw[field];
    const where = typeof value === 'string' ? inSource(configDir, value) : null;
    if (where) {
      paths.add(where);
      if (field === 'env') read.add(where);
    }
  }
  return { paths: [...paths], read: [...read] };
}

/**
 * A `.env` file as python-dotenv and dotenv read it: `NAME=value` lines, optionally `export `-prefixed,
 * values bare (a ` #` starts a comment), single-quoted (literal) or double-quoted (with \n escapes, and
 * spanning lines). Names the platform sets are left out (a development .env often sets PORT).
 */
export function parseDotenv(text: string, shownAs: string, issues: string[]): Record<string, string> {
  const env: Record<string, string> = {};
  // A comment starts at a '#' after a space (or after a closing quote): `a#b` is the value 'a#b'.
  const line =
    /^[ \t]*(?:export[ \t]+)?([^\s=#]+)[ \t]*=[ \t]*(?:'([^']*)'|"((?:\\.|[^"\\])*)"|([^\r\n]*?))[ \t]*(?:(?<=[ \t"'])#[^\r\n]*)?$/gm;
  const body = text.replace(/^\uFEFF/, '').replace(/\r\n?/g, '\n');
  for (const match of body.matchAll(line)) {
    const [, name, single, double, bare] = match;
    if (!name) continue;
    if (!ENV_NAME.test(name)) {
      issues.push(
        `${shownAs}: ${shown(name)} is not a valid variable name (letters, digits and '_', not starting with a digit)`,
      );
      continue;
    }
    if (isPlatformEnvName(name)) continue;
    const value =
      single ?? (double !== undefined ? double.replace(/\\n/g, '\n').replace(/\\(["\\])/g, '$1') : (bare ?? ''));
    if (value.includes('\0')) issues.push(`${shownAs}: ${name} must not contain a NUL character`);
    else env[name] = value;
  }
  return env;
}

interface PackageFacts {
  packageManager: PackageManager | null;
  dependsOn(name: string): boolean;
}

function packageFacts(text: string | undefined, shownAs: string, issues: string[]): PackageFacts | null {
  if (text === undefined) return null;
  const result = parseJsonText(text);
  if (!result.ok) {
    issues.push(`${shownAs} is not valid JSON: ${jsonMistake(result)}`);
    return null;
  }
  const parsed = result.value;
  if (!isPlainObject(parsed)) {
    issues.push(`${shownAs} is not a JSON object`);
    return null;
  }
  const pkg = parsed;
  // `packageManager: "pnpm@9.1.0"`, or `devEngines.packageManager.name`, as package-manager-detector reads them.
  const declared =
    typeof pkg.packageManager === 'string'
      ? pkg.packageManager.replace(/^\^/, '').split('@')[0]
      : isPlainObject(pkg.devEngines) && isPlainObject(pkg.devEngines.packageManager)
        ? pkg.devEngines.packageManager.name
        : null;
  const packageManager =
    declared === 'npm' || declared === 'pnpm' || declared === 'yarn' || declared === 'bun' ? declared : null;
  const sections = ['dependencies', 'devDependencies', 'optionalDependencies'].map((s) => pkg[s]).filter(isPlainObject);
  return { packageManager, dependsOn: (name) => sections.some((s) => name in s) };
}

/** `cd <dir> && <command>` in a subshell, so the next command starts from the source root again. */
const inDir = (dir: string, command: string): string =>
  dir === '.' ? command : `(cd ${shellWord(dir)} && ${command})`;

const COREPACK = 'COREPACK_ENABLE_DOWNLOAD_PROMPT=0 corepack';

function installCommand(manager: PackageManager, locked: boolean): string {
  switch (manager) {
    case 'npm':
      return locked ? 'npm ci --no-audit --no-fund' : 'npm install --no-audit --no-fund';
    case 'pnpm':
      return `${COREPACK} pnpm install${locked ? ' --frozen-lockfile' : ''}`;
    case 'yarn':
      return `${COREPACK} yarn install${locked ? ' --frozen-lockfile' : ''}`;
    case 'bun':
      return 'bun install';
  }
}

/** What the build log says when the schemas step itself ended in failure (`$?`: its exit status). */
const SCHEMAS_STEP_FAILED =
  "The graphs' schemas were not read at build time (the step ended with status $?): the server reads them when first asked for";

/** Adds pinned packages without touching the project's own manifest where the manager allows it. */
function addPackagesCommand(manager: Exclude<PackageManager, 'bun'>, specs: string[]): string {
  if (manager === 'npm') return `npm install --no-save --no-audit --no-fund ${specs.join(' ')}`;
  return `${COREPACK} ${manager} add ${specs.join(' ')}`;
}

/**
 * Checks a LangGraph config and resolves it against what the reader found. `file` is the path the
 * revision named (every message names it); `overrides` are the deployment's install and build
 * commands, run in the config's directory as LangChain's CLI runs its `--install-command`.
 */
export function resolveLangGraphConfig(
  file: string,
  raw: unknown,
  source: LangGraphSourceFacts,
  overrides: CommandOverrides = {},
): AppConfig {
  if (!isPlainObject(raw))
    throw new AppConfigError(`${file} must hold a JSON object with a "graphs" object, got ${shown(raw)}`);
  const issues: string[] = [];
  const configDir = configDirOf(file);
  const kind = (where: string): PathKind => source.kinds[where] ?? 'missing';
  const configPackage = at(configDir, 'package.json');
  const language = languageOf(raw, kind(configPackage) === 'file');

  for (const field of ['node_version', 'python_version'] as const) {
    const value = raw[field];
    if (
      value !== undefined &&
      !(typeof value === 'string' && /^[0-9][0-9.]*$/.test(value)) &&
      typeof value !== 'number'
    ) {
      issues.push(
        `${field} must be a version such as ${field === 'node_version' ? "'20'" : "'3.11'"}, got ${shown(value)}`,
      );
    }
  }

  // graphs: what the server serves, by graph id (the id clients pass as assistant_id).
  const graphs = graphSpecs(raw);
  if (!isPlainObject(raw.graphs))
    issues.push(`graphs must be an object of graph id to "path:export", got ${shown(raw.graphs)}`);
  else if (graphs.length === 0)
    issues.push('graphs is empty: name at least one graph, e.g. {"agent": "./src/agent.ts:graph"}');
  for (const [id, spec] of graphs) {
    const specText = specPath(spec);
    if (specText === null || specText.trim() === '') {
      issues.push(`graphs.${id} must be a "path:export" string or an object with a path, got ${shown(spec)}`);
      continue;
    }
    const fileRef = graphFile(specText, language);
    if (fileRef === null) continue;
    const where = inSource(configDir, fileRef);
    if (where === null)
      issues.push(
        `graphs.${id}: ${shown(fileRef)} is outside the source; paths are relative to the directory of ${file}`,
      );
    else if (kind(where) === 'outside')
      issues.push(`graphs.${id}: ${shown(fileRef)} is a link that leads outside the source`);
    else if (kind(where) !== 'file')
      issues.push(`graphs.${id}: ${shown(fileRef)} is not a file in the source (looked for ${where})`);
  }

  // dependencies: local ones must be in the archive; for Python the others are pip requirements.
  const pipArguments: string[] = [];
  if (
    raw.dependencies !== undefined &&
    !(Array.isArray(raw.dependencies) && raw.dependencies.every((d) => typeof d === 'string'))
  ) {
    issues.push(`dependencies must be a list of strings, got ${shown(raw.dependencies)}`);
  }
  for (const dependency of Array.isArray(raw.dependencies) ? raw.dependencies : []) {
    if (typeof dependency !== 'string') continue;
    if (!dependency.startsWith('.')) {
      if (/[\0\r\n]/.test(dependency) || dependency.trim() === '')
        issues.push(`dependencies: ${shown(dependency)} is not a requirement`);
      else pipArguments.push(shellWord(dependency));
      continue;
    }
    const where = inSource(configDir, dependency);
    if (where === null)
      issues.push(
        `dependencies: ${shown(dependency)} is outside the source; the archive must hold every local dependency`,
      );
    else if (kind(where) === 'outside')
      issues.push(`dependencies: ${shown(dependency)} is a link that leads outside the source`);
    else if (kind(where) !== 'dir')
      issues.push(`dependencies: ${shown(dependency)} is not a directory in the source (looked for ${where})`);
    else if (kind(at(where, 'pyproject.toml')) === 'file' || kind(at(where, 'setup.py')) === 'file')
      pipArguments.push('-e', shellWord(where));
    else if (kind(at(where, 'requirements.txt')) === 'file')
      pipArguments.push('-r', shellWord(at(where, 'requirements.txt')));
    // Else a plain directory: `langgraph dev` puts it on the import path itself.
  }

  // env: an object, or the path of a .env file (usually left out of the archive: the CLI sends it as secrets).
  let env: Record<string, string> = {};
  if (typeof raw.env === 'string') {
    const where = inSource(configDir, raw.env);
    if (where === null) issues.push(`env: ${shown(raw.env)} is outside the source`);
    else if (kind(where) === 'outside') issues.push(`env: ${shown(raw.env)} is a link that leads outside the source`);
    else if (kind(where) === 'file') env = parseDotenv(source.texts[where] ?? '', where, issues);
  } else if (raw.env !== undefined) {
    env = checkEnv(raw.env, issues) ?? {};
  }

  let pipConfig: string | null = null;
  if (raw.pip_config_file !== undefined) {
    const where = typeof raw.pip_config_file === 'string' ? inSource(configDir, raw.pip_config_file) : null;
    if (where === null || kind(where) !== 'file')
      issues.push(`pip_config_file must name a file in the source, got ${shown(raw.pip_config_file)}`);
    else pipConfig = where;
  }

  for (const [field, value] of [
    ['install_command', overrides.install_command],
    ['build_command', overrides.build_command],
  ] as const) {
    const problem = typeof value === 'string' ? commandProblem(value) : null;
    if (problem) issues.push(`source_config.${field} ${problem}`);
  }

  const configWord = shellWord(posix.normalize(file.replaceAll('\\', '/')));
  const start = `exec node ${LANGGRAPH_LAUNCHER_PATH} ${language} ${configWord}`;
  const override = (value: string | null | undefined): string | null =>
    typeof value === 'string' && value !== '' ? inDir(configDir, value) : null;
  let install: string | null;
  if (language === 'js') {
    install = jsInstall(file, configDir, source, kind, override(overrides.install_command), issues);
  } else {
    const server = `.venv/bin/pip install ${shellWord(LANGGRAPH_PYTHON_SERVER_REQUIREMENT)}${pipArguments.length > 0 ? ` ${pipArguments.join(' ')}` : ''}`;
    // A venv at the source root keeps the app's packages away from the host's Python; its bin is on PATH.
    install =
      override(overrides.install_command) ??
      `python3 -m venv .venv && ${pipConfig ? `PIP_CONFIG_FILE=${shellWord(pipConfig)} ` : ''}${server}`;
  }

  if (issues.length > 0) throw new AppConfigError(`${file}: ${issues.join('; ')}`);
  // A JS build ends by reading the graphs' schemas once, for every instance to start with (the launcher's
  // `schemas` step; it never fails the build). The deployment's own build command runs first, in a
  // subshell of its own, so a `cd` of its own does not move the step.
  const build = override(overrides.build_command);
  // Even killed (the build's memory limit: the reader holds a whole TypeScript program), it fails nothing.
  // (In braces: after a build command that failed, it does not run, and the build fails as it should.)
  const schemas = `{ node ${LANGGRAPH_LAUNCHER_PATH} schemas ${configWord} || echo "${SCHEMAS_STEP_FAILED}"; }`;
  return {
    runtime: language === 'js' ? 'node' : 'python',
    install,
    build: language === 'js' ? (build === null ? schemas : `( ${build} ) && ${schemas}`) : build,
    start,
    worker: null,
    healthCheckPath:
      language === 'js' && isPlainObject(raw.auth) && typeof raw.auth.path === 'string'
        ? LANGGRAPH_AUTH_HEALTH_PATH
        : LANGGRAPH_HEALTH_PATH,
    env,
    // The JS server keeps assistants, threads, runs, checkpoints and the store in the deployment's
    // database; the Python one keeps them in memory and its own files: no database to make.
    database: language === 'js',
  };
}

/** The JS project's install, from its lockfile (in its directory or the nearest above it), plus the pinned server. */
function jsInstall(
  file: string,
  configDir: string,
  source: LangGraphSourceFacts,
  kind: (where: string) => PathKind,
  override: string | null,
  issues: string[],
): string | null {
  const dirs = ancestors(configDir);
  const withPackage = dirs.find((dir) => kind(at(dir, 'package.json')) === 'file');
  if (!withPackage) {
    issues.push(
      `a JavaScript LangGraph project needs a package.json beside ${file} (or above it, in a workspace) listing @langchain/langgraph`,
    );
    return null;
  }
  const packages = dirs.map((dir) =>
    packageFacts(source.texts[at(dir, 'package.json')], at(dir, 'package.json'), issues),
  );
  let installDir = configDir;
  let manager: PackageManager = packages[0]?.packageManager ?? 'npm';
  let locked = false;
  for (const dir of dirs) {
    const lock = LOCKFILES.find((l) => kind(at(dir, l.name)) === 'file');
    if (lock) {
      [installDir, manager, locked] = [dir, lock.manager, true];
      break;
    }
  }
  if (!locked) installDir = withPackage;
  if (manager === 'bun' && override === null) {
    issues.push(
      'bun is not available on this data plane: commit a package-lock.json, pnpm-lock.yaml or yarn.lock, or set source_config.install_command',
    );
    return null;
  }
  const steps = [override ?? inDir(installDir, installCommand(manager, locked))];
  const brings = (names: string[]) =>
    packages.slice(0, dirs.indexOf(installDir) + 1).some((p) => p !== null && names.some((name) => p.dependsOn(name)));
  const added = [
    ...(brings(JS_SERVER_PROVIDERS) ? [] : [`${LANGGRAPH_JS_SERVER_PACKAGE}@${LANGGRAPH_JS_SERVER_VERSION}`]),
    ...(brings([LANGGRAPH_POSTGRES_PACKAGE]) ? [] : [`${LANGGRAPH_POSTGRES_PACKAGE}@${LANGGRAPH_POSTGRES_VERSION}`]),
    ...(brings([MCP_SDK_PACKAGE]) ? [] : [`${MCP_SDK_PACKAGE}@${MCP_SDK_VERSION}`]),
    ...(brings([A2A_SDK_PACKAGE]) ? [] : [`${A2A_SDK_PACKAGE}@${A2A_SDK_VERSION}`]),
  ];
  if (added.length > 0) steps.push(inDir(configDir, addPackagesCommand(manager === 'bun' ? 'npm' : manager, added)));
  return steps.join(' && ');
}
