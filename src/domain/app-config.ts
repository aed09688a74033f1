/**
 * The app config file a revision names in `source_revision_config.framework_config_path`
 * (docs/app-config.md): its fields, their checks, and the commands each runtime gets by default from
 * the files of the source. Pure: src/dataplane/app-config-file.ts reads the files and passes in what
 * it found, so every rule here is testable without a directory.
 *
 * Every problem is an `AppConfigError` whose message is for the user who wrote the file: it names the
 * file and the field, because it ends up as the revision's failure message and nobody reads a log.
 */
import { jsonMistake, parseJsonText } from './json-mistakes.ts';
import { nearestName } from './near-names.ts';

const RUNTIMES = ['node', 'python'] as const;
export type Runtime = (typeof RUNTIMES)[number];

export interface AppConfig {
  runtime: Runtime;
  /** Run as `sh -c` in the source directory; null skips the step. */
  install: string | null;
  build: string | null;
  start: string;
  /** A background command run alongside `start`; null when there is none. */
  worker: string | null;
  healthCheckPath: string;
  /** Non-secret variables of the app; never a name the platform sets (`isPlatformEnvName`). */
  env: Record<string, string>;
  /** Whether the app gets its own PostgreSQL database (DATABASE_URL). */
  database: boolean;
}

/** `reason` is the machine-readable failure reason a revision reports. */
export class AppConfigError extends Error {
  readonly reason = 'invalid_app_config';
  constructor(message: string) {
    super(message);
    this.name = 'AppConfigError';
  }
}

/** The parsed text of a JSON file of the source, or an error naming the file, the line and the column. */
export function parseJsonFile(text: string, shownAs: string): unknown {
  const parsed = parseJsonText(text);
  if (!parsed.ok) throw new AppConfigError(`${shownAs} is not valid JSON: ${jsonMistake(parsed)}`);
  return parsed.value;
}

/** What the reader found in the source directory; the rules need nothing else. */
export interface SourceFiles {
  /** Names of the files at the root of the source (regular files, or links to files inside it). */
  readonly rootFiles: readonly string[];
  /** The text of the root package.json, or null when there is none. Parsed only when a default needs it. */
  readonly packageJson: string | null;
}

/** `source_config.install_command` and `build_command`: set on the deployment, they win over the file. */
export interface CommandOverrides {
  install_command?: string | null;
  build_command?: string | null;
}

/** Variables the platform gives every running app; the file may not set (and so hide) them. */
const PLATFORM_ENV_NAMES: readonly string[] = ['PORT', 'HOST', 'DATABASE_URL'];
const PLATFORM_ENV_PREFIX = 'SLIPWAY_';

export function isPlatformEnvName(name: string): boolean {
  return PLATFORM_ENV_NAMES.includes(name) || name.startsWith(PLATFORM_ENV_PREFIX);
}

const FIELDS = ['runtime', 'install', 'build', 'start', 'worker', 'health_check_path', 'env', 'database'] as const;
type Field = (typeof FIELDS)[number];

/** The file's fields after their checks. `null` for install, build and worker means "none, not even the default". */
interface CheckedFile {
  runtime?: Runtime;
  install?: string | null;
  build?: string | null;
  start?: string;
  worker?: string | null;
  health_check_path?: string;
  env?: Record<string, string>;
  database?: boolean;
}

// Generous, but a bound: commands and paths end up in argv and in events.
const MAX_COMMAND_LENGTH = 4096;
const MAX_PATH_LENGTH = 2048;
export const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** A value as the user wrote it, short enough for a message. */
export function shown(value: unknown): string {
  if (typeof value === 'string') {
    const cut = value.length > 60 ? `${value.slice(0, 60)}…` : value;
    return `'${JSON.stringify(cut).slice(1, -1)}'`;
  }
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'object') return 'an object';
  // eslint-disable-next-line @typescript-eslint/no-base-to-string -- null, arrays and objects are answered above: what is left is a primitive
  return String(value);
}

export function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function suggestion(unknown: string): string {
  const near = nearestName(unknown, FIELDS);
  return near ? ` (did you mean '${near}'?)` : '';
}

/** A problem with a command string, or null. */
export function commandProblem(value: string): string | null {
  if (value.trim() === '') return 'must not be empty';
  if (value.includes('\0')) return 'must not contain a NUL character';
  if (value.length > MAX_COMMAND_LENGTH) return `must be at most ${MAX_COMMAND_LENGTH} characters`;
  return null;
}

function healthPathProblem(value: string): string | null {
  if (!value.startsWith('/')) return `must start with '/', got ${shown(value)}`;
  // '//host/x' reads as another host to URL parsers: the check must stay on the app.
  if (value.startsWith('//')) return `must be a path on the app, not start with '//', got ${shown(value)}`;
  // eslint-disable-next-line no-control-regex -- refusing control characters in the path is the point
  if (/[\s\x00-\x1f\x7f]/.test(value)) return `must not contain spaces or control characters, got ${shown(value)}`;
  if (value.length > MAX_PATH_LENGTH) return `must be at most ${MAX_PATH_LENGTH} characters`;
  return null;
}

/** The `env` object of a config file, checked; each problem goes to `issues`. */
export function checkEnv(value: unknown, issues: string[]): Record<string, string> | undefined {
  if (!isPlainObject(value)) {
    issues.push(`env must be an object of string values, got ${shown(value)}`);
    return undefined;
  }
  const env: Record<string, string> = {};
  for (const [name, v] of Object.entries(value)) {
    if (!ENV_NAME.test(name)) {
      issues.push(
        `env: ${shown(name)} is not a valid variable name (letters, digits and '_', not starting with a digit)`,
      );
    } else if (isPlatformEnvName(name)) {
      issues.push(`env.${name} is set by the platform and cannot be set in the file`);
    } else if (typeof v !== 'string') {
      issues.push(`env.${name} must be a string, got ${shown(v)}`);
    } else if (v.includes('\0')) {
      issues.push(`env.${name} must not contain a NUL character`);
    } else {
      env[name] = v;
    }
  }
  return env;
}

/** Checks every field of the parsed file and collects every problem, so one fix round is enough. */
function checkFile(file: string, raw: unknown): CheckedFile {
  if (!isPlainObject(raw)) throw new AppConfigError(`${file} must hold a JSON object (e.g. {}), got ${shown(raw)}`);
  const issues: string[] = [];
  const out: CheckedFile = {};
  for (const [key, value] of Object.entries(raw)) {
    if (!(FIELDS as readonly string[]).includes(key)) {
      issues.push(`unknown field ${shown(key)}${suggestion(key)}`);
      continue;
    }
    const field = key as Field;
    switch (field) {
      case 'runtime':
        if (typeof value === 'string' && (RUNTIMES as readonly string[]).includes(value))
          out.runtime = value as Runtime;
        else issues.push(`runtime must be ${RUNTIMES.map((r) => `'${r}'`).join(' or ')}, got ${shown(value)}`);
        break;
      case 'install':
      case 'build':
      case 'worker':
      case 'start': {
        const nullable = field !== 'start';
        if (value === null && nullable) {
          out[field] = null;
        } else if (typeof value !== 'string') {
          issues.push(`${field} must be a command string${nullable ? ' or null' : ''}, got ${shown(value)}`);
        } else {
          const problem = commandProblem(value);
          if (problem) issues.push(`${field} ${problem}`);
          else out[field] = value;
        }
        break;
      }
      case 'health_check_path': {
        const problem =
          typeof value === 'string'
            ? healthPathProblem(value)
            : `must be a path string such as '/healthz', got ${shown(value)}`;
        if (problem) issues.push(`health_check_path ${problem}`);
        else out.health_check_path = value as string;
        break;
      }
      case 'env': {
        const env = checkEnv(value, issues);
        if (env) out.env = env;
        break;
      }
      case 'database':
        if (typeof value === 'boolean') out.database = value;
        else issues.push(`database must be true or false, got ${shown(value)}`);
        break;
    }
  }
  if (issues.length > 0) throw new AppConfigError(`${file}: ${issues.join('; ')}`);
  return out;
}

function detectRuntime(source: SourceFiles): Runtime | null {
  const files = source.rootFiles;
  if (files.includes('package.json')) return 'node';
  if (files.includes('requirements.txt') || files.includes('pyproject.toml') || files.some((f) => f.endsWith('.py')))
    return 'python';
  return null;
}

/** The parts of package.json the Node defaults look at. */
interface PackageFacts {
  scripts: Record<string, string>;
  main: string | null;
  hasDependencies: boolean;
}

function packageFacts(text: string | null, file: string, field: Field): PackageFacts | null {
  if (text === null) return null;
  const result = parseJsonText(text);
  if (!result.ok)
    throw new AppConfigError(
      `${file}: ${field} is not set, and package.json, which its default comes from, is not valid JSON: ${jsonMistake(result)}`,
    );
  const parsed = result.value;
  if (!isPlainObject(parsed))
    throw new AppConfigError(
      `${file}: ${field} is not set, and package.json, which its default comes from, is not a JSON object`,
    );
  const scripts: Record<string, string> = {};
  if (isPlainObject(parsed.scripts)) {
    for (const [name, script] of Object.entries(parsed.scripts))
      if (typeof script === 'string' && script.trim() !== '') scripts[name] = script;
  }
  const nonEmpty = (v: unknown) => isPlainObject(v) && Object.keys(v).length > 0;
  return {
    scripts,
    main: typeof parsed.main === 'string' && parsed.main.trim() !== '' ? parsed.main.trim() : null,
    hasDependencies: nonEmpty(parsed.dependencies) || nonEmpty(parsed.devDependencies),
  };
}

/** Quotes a word for `sh -c` unless it is plainly safe, so that an odd `main` cannot run anything. */
export function shellWord(word: string): string {
  return /^[A-Za-z0-9_./@%+=:,-]+$/.test(word) ? word : `'${word.replaceAll("'", `'\\''`)}'`;
}

const given = <T>(value: T | null | undefined): value is T => value !== undefined && value !== null;

/** A runtime's default commands, each worked out only when asked: a set field never needs package.json. */
interface Defaults {
  install(): string | null;
  build(): string | null;
  start(): string;
}

function nodeDefaults(file: string, source: SourceFiles): Defaults {
  const pkg = (field: Field) => packageFacts(source.packageJson, file, field);
  return {
    install() {
      const locked = source.rootFiles.includes('package-lock.json') || source.rootFiles.includes('npm-shrinkwrap.json');
      // Nothing to install is common for small agents, and `npm ci` would even fail without a lockfile.
      if (!pkg('install')?.hasDependencies) return null;
      return locked ? 'npm ci' : 'npm install';
    },
    build: () => (pkg('build')?.scripts.build !== undefined ? 'npm run build' : null),
    start() {
      const facts = pkg('start');
      if (facts?.scripts.start !== undefined) return directNpmScript('npm start', facts, source) ?? 'npm start';
      if (facts?.main) return `node ${shellWord(facts.main)}`;
      const why = facts ? 'package.json has neither a start script nor main' : 'there is no package.json';
      throw new AppConfigError(
        `${file}: start is not set and ${why}; set start (e.g. "node server.js") or a start script`,
      );
    },
  };
}

/** `npm start`, `npm run <script>`, `npm run-script <script>`, with nothing else on the line. */
const NPM_RUN = /^npm\s+(?:(start)|run(?:-script)?\s+([A-Za-z0-9:_.-]+))$/;

/** package.json's facts, or null when it is missing or unreadable (npm itself then says what is wrong). */
function quietPackageFacts(text: string | null): PackageFacts | null {
  try {
    return packageFacts(text, 'package.json', 'start');
  } catch {
    return null;
  }
}

/**
 * The script an `npm start` (or `npm run <name>`) runs, so that an instance runs it directly: npm would
 * otherwise stay the app's parent for its whole life (a Node.js process of about 55 MB per instance)
 * for nothing but starting it. Followed through scripts that run other scripts the same way. Null when
 * npm must run it itself: a `pre`/`post` script around it, a script that is not there, arguments. npm's
 * own `npm_*` variables are not set then (docs/app-config.md); PATH has node_modules/.bin as under npm.
 */
function directNpmScript(command: string, facts: PackageFacts | null, source: SourceFiles): string | null {
  let current = command.trim();
  for (let depth = 0; depth < 8 && facts; depth++) {
    const match = NPM_RUN.exec(current);
    if (!match) return depth === 0 ? null : current;
    const name = match[1] ?? match[2]!;
    if (facts.scripts[`pre${name}`] !== undefined || facts.scripts[`post${name}`] !== undefined)
      return depth === 0 ? null : current;
    const script = facts.scripts[name];
    // npm's own default for a start script that is not there.
    if (script === undefined && name === 'start' && source.rootFiles.includes('server.js')) return 'node server.js';
    if (script === undefined) return depth === 0 ? null : current;
    current = script.trim();
  }
  return facts && current !== command.trim() ? current : null;
}

function pythonDefaults(file: string, source: SourceFiles): Defaults {
  const has = (name: string) => source.rootFiles.includes(name);
  return {
    // A venv in the source keeps the app's packages away from the host's Python.
    install: () =>
      has('requirements.txt')
        ? 'python3 -m venv .venv && .venv/bin/pip install -r requirements.txt'
        : 'python3 -m venv .venv',
    build: () => null,
    start() {
      const entry = ['main.py', 'app.py'].find(has);
      if (!entry)
        throw new AppConfigError(
          `${file}: start is not set and the source has no main.py or app.py at its root; set start (e.g. ".venv/bin/python -m my_agent")`,
        );
      return `.venv/bin/python ${entry}`;
    },
  };
}

/**
 * Checks the parsed file and resolves it against the source: file values over runtime defaults, and
 * the deployment's `install_command` / `build_command` over both. `file` is the path the revision
 * named, used in every message.
 */
export function resolveAppConfig(
  file: string,
  raw: unknown,
  source: SourceFiles,
  overrides: CommandOverrides = {},
): AppConfig {
  const checked = checkFile(file, raw);
  const runtime = checked.runtime ?? detectRuntime(source);
  if (runtime === null) {
    throw new AppConfigError(
      `${file}: runtime is not set and cannot be detected (no package.json, requirements.txt, ` +
        `pyproject.toml or .py file at the root of the source); set runtime to 'node' or 'python'`,
    );
  }
  const defaults = (runtime === 'node' ? nodeDefaults : pythonDefaults)(file, source);
  // The deployment's command, else the file's (null included: it switches the step off), else the default.
  const pick = (field: 'install' | 'build', override: string | null | undefined): string | null => {
    if (given(override)) return override;
    const set = checked[field];
    return set === undefined ? defaults[field]() : set;
  };
  const install = pick('install', overrides.install_command);
  const build = pick('build', overrides.build_command);
  const start =
    checked.start !== undefined && runtime === 'node'
      ? (directNpmScript(checked.start, quietPackageFacts(source.packageJson), source) ?? checked.start)
      : (checked.start ?? defaults.start());
  return {
    runtime,
    install,
    build,
    start,
    worker: checked.worker ?? null,
    healthCheckPath: checked.health_check_path ?? '/',
    env: checked.env ?? {},
    database: checked.database ?? true,
  };
}
