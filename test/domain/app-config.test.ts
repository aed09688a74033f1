/**
 * The app config file's rules (docs/app-config.md), without a directory: what a revision ends up
 * running for a given file and source, and the message a user gets for a file that cannot work.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import {
  AppConfigError,
  resolveAppConfig,
  type AppConfig,
  type CommandOverrides,
  type SourceFiles,
} from '../../src/domain/app-config.ts';
import {
  A2A_SDK_VERSION,
  LANGGRAPH_JS_SERVER_VERSION,
  LANGGRAPH_POSTGRES_VERSION,
  MCP_SDK_VERSION,
  isLangGraphConfig,
  resolveLangGraphConfig,
  type LangGraphSourceFacts,
} from '../../src/domain/langgraph-config.ts';

const FILE = 'slipway.json';

function node(pkg: Record<string, unknown> | string | null, extraFiles: string[] = []): SourceFiles {
  const text = pkg === null ? null : typeof pkg === 'string' ? pkg : JSON.stringify(pkg);
  return { rootFiles: [...(text === null ? [] : ['package.json']), 'index.js', ...extraFiles], packageJson: text };
}
const python = (...rootFiles: string[]): SourceFiles => ({ rootFiles, packageJson: null });

const resolve = (raw: unknown, source: SourceFiles, overrides?: CommandOverrides): AppConfig =>
  resolveAppConfig(FILE, raw, source, overrides);

/** Asserts the file is refused with invalid_app_config and returns the message. */
function refused(
  raw: unknown,
  source: SourceFiles = node({ scripts: { start: 'node index.js' } }),
  overrides?: CommandOverrides,
): string {
  try {
    resolve(raw, source, overrides);
  } catch (error) {
    assert.ok(error instanceof AppConfigError, `expected an AppConfigError, got ${String(error)}`);
    assert.equal(error.reason, 'invalid_app_config');
    return error.message;
  }
  assert.fail(`expected ${JSON.stringify(raw)} to be refused`);
}

describe('zero configuration', () => {
  test('{} runs a Node app through its start script, with every default', () => {
    assert.deepEqual(resolve({}, node({ name: 'agent', scripts: { start: 'node index.js' } })), {
      runtime: 'node',
      install: null,
      build: null,
      start: 'node index.js',
      worker: null,
      healthCheckPath: '/',
      env: {},
      database: true,
    });
  });

  test('{} runs a Python app from main.py (or app.py) in its own venv', () => {
    const config = resolve({}, python('requirements.txt', 'main.py'));
    assert.equal(config.runtime, 'python');
    assert.equal(config.install, 'python3 -m venv .venv && .venv/bin/pip install -r requirements.txt');
    assert.equal(config.build, null);
    assert.equal(config.start, '.venv/bin/python main.py');
    assert.equal(resolve({}, python('app.py')).start, '.venv/bin/python app.py');
    assert.equal(resolve({}, python('app.py', 'main.py')).start, '.venv/bin/python main.py');
    assert.equal(resolve({}, python('app.py')).install, 'python3 -m venv .venv');
  });
});

describe('runtime detection', () => {
  test('package.json means node, even next to Python files', () => {
    assert.equal(resolve({}, node({ scripts: { start: 'x' } }, ['requirements.txt', 'tool.py'])).runtime, 'node');
  });

  test('requirements.txt, pyproject.toml or any .py file at the root means python', () => {
    assert.equal(resolve({ start: 'python3 -m agent' }, python('requirements.txt')).runtime, 'python');
    assert.equal(resolve({ start: 'python3 -m agent' }, python('pyproject.toml')).runtime, 'python');
    assert.equal(resolve({ start: 'python3 -m agent' }, python('agent.py')).runtime, 'python');
  });

  test('an explicit runtime wins over detection', () => {
    const config = resolve({ runtime: 'python' }, { rootFiles: ['package.json', 'main.py'], packageJson: '{}' });
    assert.equal(config.runtime, 'python');
    assert.equal(config.start, '.venv/bin/python main.py');
  });

  test('a source with nothing to go by asks for runtime', () => {
    const message = refused({}, { rootFiles: ['README.md'], packageJson: null });
    assert.match(message, /^slipway\.json: runtime is not set and cannot be detected/);
    assert.match(message, /set runtime to 'node' or 'python'/);
  });
});

describe('Node defaults', () => {
  test('install: npm ci with a lockfile, npm install without, nothing without dependencies', () => {
    const deps = { dependencies: { express: '^4' }, scripts: { start: 'node index.js' } };
    assert.equal(resolve({}, node(deps, ['package-lock.json'])).install, 'npm ci');
    assert.equal(resolve({}, node(deps, ['npm-shrinkwrap.json'])).install, 'npm ci');
    assert.equal(resolve({}, node(deps)).install, 'npm install');
    assert.equal(
      resolve({}, node({ devDependencies: { typescript: '^5' }, scripts: { start: 'x' } })).install,
      'npm install',
    );
    assert.equal(resolve({}, node({ dependencies: {}, scripts: { start: 'x' } }, ['package-lock.json'])).install, null);
  });

  test('build: npm run build only when there is a build script', () => {
    assert.equal(resolve({}, node({ scripts: { start: 'node dist/index.js', build: 'tsc' } })).build, 'npm run build');
    assert.equal(resolve({}, node({ scripts: { start: 'node index.js' } })).build, null);
  });

  test('start: the start script, else node <main>', () => {
    assert.equal(resolve({}, node({ main: 'dist/server.js' })).start, 'node dist/server.js');
    // An odd main is one word for sh -c, not a second command.
    assert.equal(resolve({}, node({ main: 'my server.js; rm -rf /' })).start, "node 'my server.js; rm -rf /'");
    assert.equal(resolve({}, node({ main: "it's.js" })).start, `node 'it'\\''s.js'`);
  });

  test('npm start runs its script directly, without npm staying in between', () => {
    const scripts = { start: 'npm run serve', serve: 'node dist/server.js --port $PORT', other: 'node other.js' };
    // The default, and npm's ways of naming a script, followed through scripts that name scripts.
    assert.equal(resolve({}, node({ scripts })).start, 'node dist/server.js --port $PORT');
    for (const start of ['npm start', 'npm run start', 'npm  run-script  start', ' npm run serve '])
      assert.equal(resolve({ start }, node({ scripts })).start, 'node dist/server.js --port $PORT', start);
    assert.equal(resolve({ start: 'npm run other' }, node({ scripts })).start, 'node other.js');
    // npm's own default without a start script.
    assert.equal(resolve({ start: 'npm start' }, node({ name: 'agent' }, ['server.js'])).start, 'node server.js');
  });

  test('npm stays where it does more than start the script', () => {
    // Scripts around it, arguments, a script that is not there, no package.json to go by.
    const around = { start: 'node index.js', prestart: 'node migrate.js' };
    assert.equal(resolve({}, node({ scripts: around })).start, 'npm start');
    assert.equal(
      resolve({ start: 'npm start' }, node({ scripts: { start: 'node a.js', poststart: 'x' } })).start,
      'npm start',
    );
    assert.equal(
      resolve({ start: 'npm start -- --port 1' }, node({ scripts: { start: 'node a.js' } })).start,
      'npm start -- --port 1',
    );
    assert.equal(
      resolve({ start: 'npm run missing' }, node({ scripts: { start: 'node a.js' } })).start,
      'npm run missing',
    );
    assert.equal(resolve({ start: 'npm start', install: null, build: null }, node('{ not json')).start, 'npm start');
    // A script reached through another keeps its own pre script: npm runs from there.
    const nested = { start: 'npm run serve', serve: 'node s.js', preserve: 'node p.js' };
    assert.equal(resolve({}, node({ scripts: nested })).start, 'npm run serve');
    assert.equal(resolve({ start: 'npm start', runtime: 'python' }, python('main.py')).start, 'npm start');
  });

  test('start without a start script, main or package.json is refused, naming start', () => {
    assert.match(
      refused({}, node({ name: 'agent' })),
      /^slipway\.json: start is not set and package\.json has neither a start script nor main/,
    );
    assert.match(
      refused({ runtime: 'node' }, { rootFiles: ['index.js'], packageJson: null }),
      /^slipway\.json: start is not set and there is no package\.json/,
    );
  });

  test('a broken package.json matters only when a default needs it', () => {
    assert.match(
      refused({}, node('{ not json')),
      /^slipway\.json: .* package\.json, which its default comes from, is not valid JSON/,
    );
    const config = resolve({ install: null, build: null, start: 'node index.js' }, node('{ not json'));
    assert.equal(config.start, 'node index.js');
  });
});

describe('precedence', () => {
  const source = node({ dependencies: { a: '1' }, scripts: { start: 'node index.js', build: 'tsc' } }, [
    'package-lock.json',
  ]);

  test('the file wins over defaults, and null switches a step off', () => {
    const config = resolve(
      { install: 'npm ci --omit=dev', build: null, start: 'node dist/main.js', worker: 'node worker.js' },
      source,
    );
    assert.equal(config.install, 'npm ci --omit=dev');
    assert.equal(config.build, null);
    assert.equal(config.start, 'node dist/main.js');
    assert.equal(config.worker, 'node worker.js');
  });

  test("the deployment's install_command and build_command win over the file", () => {
    const config = resolve({ install: 'npm install', build: null }, source, {
      install_command: 'pnpm install',
      build_command: 'pnpm build',
    });
    assert.equal(config.install, 'pnpm install');
    assert.equal(config.build, 'pnpm build');
  });

  test('unset overrides leave the file and the defaults alone', () => {
    const config = resolve({ build: 'make' }, source, { install_command: null, build_command: undefined });
    assert.equal(config.install, 'npm ci');
    assert.equal(config.build, 'make');
  });
});

describe('the other fields', () => {
  test('health_check_path, env, database and worker are taken as written', () => {
    const config = resolve(
      {
        health_check_path: '/healthz?deep=1',
        env: { LOG_FORMAT: 'json', _x1: '' },
        database: false,
        worker: 'node worker.js',
      },
      node({ scripts: { start: 'node index.js' } }),
    );
    assert.equal(config.healthCheckPath, '/healthz?deep=1');
    assert.deepEqual(config.env, { LOG_FORMAT: 'json', _x1: '' });
    assert.equal(config.database, false);
    assert.equal(config.worker, 'node worker.js');
  });
});

describe('files that cannot work are refused, naming the file and the field', () => {
  test('a health path without a leading slash', () => {
    assert.equal(
      refused({ health_check_path: 'healthz' }),
      "slipway.json: health_check_path must start with '/', got 'healthz'",
    );
    assert.match(refused({ health_check_path: '//evil.example/x' }), /health_check_path must be a path on the app/);
    assert.match(refused({ health_check_path: '/a b' }), /health_check_path must not contain spaces/);
    assert.match(
      refused({ health_check_path: 200 }),
      /health_check_path must be a path string such as '\/healthz', got 200/,
    );
  });

  test('an unknown field, with the field it probably meant', () => {
    assert.equal(
      refused({ heath_check_path: '/healthz' }),
      "slipway.json: unknown field 'heath_check_path' (did you mean 'health_check_path'?)",
    );
    assert.equal(refused({ dockerfile: 'Dockerfile' }), "slipway.json: unknown field 'dockerfile'");
  });

  test('fields of the wrong type', () => {
    assert.equal(refused({ runtime: 'ruby' }), "slipway.json: runtime must be 'node' or 'python', got 'ruby'");
    assert.equal(
      refused({ start: ['node', 'index.js'] }),
      'slipway.json: start must be a command string, got an array',
    );
    assert.equal(refused({ start: null }), 'slipway.json: start must be a command string, got null');
    assert.equal(refused({ install: 1 }), 'slipway.json: install must be a command string or null, got 1');
    assert.equal(refused({ build: '  ' }), 'slipway.json: build must not be empty');
    assert.equal(refused({ database: 'yes' }), "slipway.json: database must be true or false, got 'yes'");
    assert.equal(refused({ env: ['A=1'] }), 'slipway.json: env must be an object of string values, got an array');
    assert.equal(refused({ env: { RETRIES: 3 } }), 'slipway.json: env.RETRIES must be a string, got 3');
  });

  test('env names that are not names, or that the platform sets', () => {
    assert.match(refused({ env: { 'MY-VAR': 'x' } }), /env: 'MY-VAR' is not a valid variable name/);
    assert.match(refused({ env: { '1ST': 'x' } }), /env: '1ST' is not a valid variable name/);
    for (const name of ['PORT', 'HOST', 'DATABASE_URL', 'SLIPWAY_AGENT_CREDENTIAL', 'SLIPWAY_ANYTHING']) {
      assert.equal(
        refused({ env: { [name]: 'x' } }),
        `slipway.json: env.${name} is set by the platform and cannot be set in the file`,
      );
    }
  });

  test('every problem at once, so one round of fixes is enough', () => {
    const message = refused({ runtime: 'go', health_check_path: 'x', colour: 'blue' });
    assert.match(message, /^slipway\.json: /);
    assert.match(message, /runtime must be/);
    assert.match(message, /health_check_path must start with '\/'/);
    assert.match(message, /unknown field 'colour'/);
  });

  test('a file that is not a JSON object', () => {
    assert.equal(refused([]), 'slipway.json must hold a JSON object (e.g. {}), got an array');
    assert.equal(refused(null), 'slipway.json must hold a JSON object (e.g. {}), got null');
    assert.equal(refused('slipway'), "slipway.json must hold a JSON object (e.g. {}), got 'slipway'");
  });

  test('messages name the path the revision gave', () => {
    assert.throws(() => resolveAppConfig('deploy/agent.json', { start: 3 }, node({})), {
      message: 'deploy/agent.json: start must be a command string, got 3',
    });
  });

  test('a Python app without main.py or app.py must say how to start', () => {
    assert.match(
      refused({}, python('requirements.txt')),
      /^slipway\.json: start is not set and the source has no main\.py or app\.py/,
    );
  });
});

describe('LangGraph projects (langgraph.json)', () => {
  /** What the reader would report for a source holding `files` (path -> text; directories are implied). */
  function tree(files: Record<string, string>): LangGraphSourceFacts {
    const kinds: Record<string, 'file' | 'dir'> = { '.': 'dir' };
    for (const name of Object.keys(files)) {
      kinds[name] = 'file';
      for (let dir = name.split('/').slice(0, -1); dir.length > 0; dir = dir.slice(0, -1)) kinds[dir.join('/')] = 'dir';
    }
    return { kinds, texts: files };
  }
  const PKG = JSON.stringify({
    name: 'agent',
    dependencies: { '@langchain/langgraph': '^1.7.3', '@langchain/core': '^1.4.0' },
  });
  const JS = { node_version: '20', graphs: { agent: './src/agent.ts:graph' } };
  const PROTOCOLS = `@modelcontextprotocol/sdk@${MCP_SDK_VERSION} @a2a-js/sdk@${A2A_SDK_VERSION}`;
  const PIN = `@langchain/langgraph-api@${LANGGRAPH_JS_SERVER_VERSION} @langchain/langgraph-checkpoint-postgres@${LANGGRAPH_POSTGRES_VERSION} ${PROTOCOLS}`;
  const SCHEMAS_FAILED =
    "The graphs' schemas were not read at build time (the step ended with status $?): the server reads them when first asked for";
  const resolveLg = (file: string, raw: unknown, files: Record<string, string>, overrides?: CommandOverrides) =>
    resolveLangGraphConfig(file, raw, tree(files), overrides);
  function refusedLg(file: string, raw: unknown, files: Record<string, string>): string {
    try {
      resolveLg(file, raw, files);
    } catch (error) {
      assert.ok(error instanceof AppConfigError, String(error));
      assert.equal(error.reason, 'invalid_app_config');
      return error.message;
    }
    assert.fail(`expected ${JSON.stringify(raw)} to be refused`);
  }

  test('a file named langgraph.json, or any config with graphs, is a LangGraph project; slipway.json is not', () => {
    assert.equal(isLangGraphConfig('langgraph.json', {}), true);
    assert.equal(isLangGraphConfig('apps/agent/langgraph.json', {}), true);
    assert.equal(isLangGraphConfig('deploy/agent.json', { graphs: {} }), true);
    assert.equal(isLangGraphConfig('slipway.json', { start: 'node index.js' }), false);
    // The service's own format keeps its checks: a typo is still refused, not taken for something else.
    assert.match(refused({ grpahs: {} }), /unknown field 'grpahs'/);
  });

  test('a JavaScript project: its lockfile installs, the pinned server is added, LangGraph.js serves it on /ok', () => {
    const config = resolveLg(
      'langgraph.json',
      { ...JS, env: { REPLY_PREFIX: 'Analysis' } },
      { 'langgraph.json': '', 'package.json': PKG, 'package-lock.json': '{}', 'src/agent.ts': '' },
    );
    assert.deepEqual(config, {
      runtime: 'node',
      install: `npm ci --no-audit --no-fund && npm install --no-save --no-audit --no-fund ${PIN}`,
      // The graphs' schemas, read once at build time rather than by every instance as it starts.
      build: `{ node .slipway/langgraph-server.mjs schemas langgraph.json || echo "${SCHEMAS_FAILED}"; }`,
      start: 'exec node .slipway/langgraph-server.mjs js langgraph.json',
      worker: null,
      healthCheckPath: '/ok',
      env: { REPLY_PREFIX: 'Analysis' },
      database: true,
    });
  });

  test('a project that brings the server itself (langgraph-api or langgraph-cli) gets no pinned one', () => {
    for (const name of ['@langchain/langgraph-api', '@langchain/langgraph-cli']) {
      const pkg = (more = {}) =>
        JSON.stringify({
          dependencies: { '@langchain/langgraph': '^1', ...more },
          devDependencies: { [name]: '^1.5.0' },
        });
      const files = (text: string) => ({ 'package.json': text, 'package-lock.json': '{}', 'src/agent.ts': '' });
      // The PostgreSQL checkpointer is still added, unless the project has it too.
      assert.equal(
        resolveLg('langgraph.json', JS, files(pkg())).install,
        `npm ci --no-audit --no-fund && npm install --no-save --no-audit --no-fund @langchain/langgraph-checkpoint-postgres@${LANGGRAPH_POSTGRES_VERSION} ${PROTOCOLS}`,
      );
      const all = {
        '@langchain/langgraph-checkpoint-postgres': '^1',
        '@modelcontextprotocol/sdk': '^1.32.0',
        '@a2a-js/sdk': '^1.3.0',
      };
      assert.equal(resolveLg('langgraph.json', JS, files(pkg(all))).install, 'npm ci --no-audit --no-fund');
    }
  });

  test('the package manager follows the lockfile, else packageManager, else npm', () => {
    const files = (lock: string | null, pkg = PKG) => ({
      'package.json': pkg,
      'src/agent.ts': '',
      ...(lock ? { [lock]: '' } : {}),
    });
    assert.equal(
      resolveLg('langgraph.json', JS, files('pnpm-lock.yaml')).install,
      `COREPACK_ENABLE_DOWNLOAD_PROMPT=0 corepack pnpm install --frozen-lockfile && COREPACK_ENABLE_DOWNLOAD_PROMPT=0 corepack pnpm add ${PIN}`,
    );
    assert.equal(
      resolveLg('langgraph.json', JS, files('yarn.lock')).install,
      `COREPACK_ENABLE_DOWNLOAD_PROMPT=0 corepack yarn install --frozen-lockfile && COREPACK_ENABLE_DOWNLOAD_PROMPT=0 corepack yarn add ${PIN}`,
    );
    assert.equal(
      resolveLg('langgraph.json', JS, files(null, JSON.stringify({ packageManager: 'pnpm@9.1.0' }))).install,
      `COREPACK_ENABLE_DOWNLOAD_PROMPT=0 corepack pnpm install && COREPACK_ENABLE_DOWNLOAD_PROMPT=0 corepack pnpm add ${PIN}`,
    );
    assert.equal(
      resolveLg('langgraph.json', JS, files(null)).install,
      `npm install --no-audit --no-fund && npm install --no-save --no-audit --no-fund ${PIN}`,
    );
    assert.match(refusedLg('langgraph.json', JS, files('bun.lockb')), /bun is not available on this data plane/);
  });

  test('a monorepo: the workspace lockfile above installs, the server is added beside the config, local dependencies must be in the archive', () => {
    const files = {
      'package.json': JSON.stringify({ private: true, workspaces: ['apps/*', 'libs/*'] }),
      'package-lock.json': '{}',
      'apps/agent/package.json': PKG,
      'apps/agent/src/agent.ts': '',
      'libs/shared/package.json': '{}',
    };
    const raw = { ...JS, dependencies: ['.', '../../libs/shared'] };
    const config = resolveLg('apps/agent/langgraph.json', raw, files);
    assert.equal(
      config.install,
      `npm ci --no-audit --no-fund && (cd apps/agent && npm install --no-save --no-audit --no-fund ${PIN})`,
    );
    assert.equal(config.start, 'exec node .slipway/langgraph-server.mjs js apps/agent/langgraph.json');
    // Without a lockfile anywhere, the config's own directory installs.
    const { 'package-lock.json': _lock, ...unlocked } = files;
    assert.match(
      resolveLg('apps/agent/langgraph.json', raw, unlocked).install!,
      /^\(cd apps\/agent && npm install --no-audit --no-fund\)/,
    );
    assert.match(
      refusedLg('apps/agent/langgraph.json', { ...JS, dependencies: ['../../../outside'] }, files),
      /dependencies: '\.\.\/\.\.\/\.\.\/outside' is outside the source; the archive must hold every local dependency/,
    );
    assert.match(
      refusedLg('apps/agent/langgraph.json', { ...JS, dependencies: ['../../libs/missing'] }, files),
      /dependencies: '\.\.\/\.\.\/libs\/missing' is not a directory in the source \(looked for libs\/missing\)/,
    );
  });

  test('graphs must name files in the source', () => {
    const files = { 'package.json': PKG, 'package-lock.json': '{}', 'src/agent.ts': '' };
    assert.match(
      refusedLg('langgraph.json', { node_version: '20' }, files),
      /^langgraph\.json: graphs must be an object/,
    );
    assert.match(refusedLg('langgraph.json', { node_version: '20', graphs: {} }, files), /graphs is empty/);
    assert.match(
      refusedLg('langgraph.json', { node_version: '20', graphs: { agent: './src/missing.ts:graph' } }, files),
      /graphs\.agent: '\.\/src\/missing\.ts' is not a file in the source \(looked for src\/missing\.ts\)/,
    );
    assert.match(
      refusedLg('langgraph.json', { node_version: '20', graphs: { agent: '../elsewhere.ts:graph' } }, files),
      /graphs\.agent: '\.\.\/elsewhere\.ts' is outside the source/,
    );
    assert.match(
      refusedLg('langgraph.json', { node_version: '20', graphs: { agent: 42 } }, files),
      /graphs\.agent must be a "path:export" string/,
    );
    assert.equal(
      resolveLg(
        'langgraph.json',
        { node_version: '20', graphs: { agent: { path: './src/agent.ts:graph', description: 'x' } } },
        files,
      ).healthCheckPath,
      '/ok',
    );
  });

  test('env: an object, or a .env file read as dotenv does; names the platform sets are refused in the object, skipped in the file', () => {
    const files = { 'package.json': PKG, 'package-lock.json': '{}', 'src/agent.ts': '' };
    const dotenv = [
      '# a comment',
      'export OPENAI_API_KEY=sk-123 # trailing comment',
      "SINGLE='kept # as it is'",
      'DOUBLE="two\\nlines"',
      'HASH=a#b',
      'EMPTY=',
      'PORT=3000',
      '',
    ].join('\n');
    assert.deepEqual(resolveLg('langgraph.json', { ...JS, env: '.env' }, { ...files, '.env': dotenv }).env, {
      OPENAI_API_KEY: 'sk-123',
      SINGLE: 'kept # as it is',
      DOUBLE: 'two\nlines',
      HASH: 'a#b',
      EMPTY: '',
    });
    // The CLI leaves .env out of the archive (it is in .gitignore) and sends it as secrets instead.
    assert.deepEqual(resolveLg('langgraph.json', { ...JS, env: '.env' }, files).env, {});
    assert.match(
      refusedLg('langgraph.json', { ...JS, env: { PORT: '3000' } }, files),
      /env\.PORT is set by the platform/,
    );
    assert.match(
      refusedLg('langgraph.json', { ...JS, env: '../.env' }, files),
      /env: '\.\.\/\.env' is outside the source/,
    );
  });

  test('a Python project: a venv with the in-memory server and its dependencies, started with langgraph dev', () => {
    const files = { 'agent/graph.py': '', 'agent/pyproject.toml': '', 'tools/requirements.txt': '' };
    const config = resolveLg(
      'langgraph.json',
      {
        python_version: '3.11',
        graphs: { agent: './agent/graph.py:graph', other: 'agent.graph:other' },
        dependencies: ['./agent', './tools', 'langchain-openai>=0.3'],
      },
      files,
    );
    assert.equal(config.runtime, 'python');
    assert.equal(
      config.install,
      `python3 -m venv .venv && .venv/bin/pip install 'langgraph-cli[inmem]>=0.4' -e agent -r tools/requirements.txt 'langchain-openai>=0.3'`,
    );
    assert.equal(config.start, 'exec node .slipway/langgraph-server.mjs python langgraph.json');
    assert.equal(config.healthCheckPath, '/ok');
    // No package.json beside it and no version named: Python, as LangChain's CLI assumes.
    assert.equal(resolveLg('langgraph.json', { graphs: { agent: 'agent.graph:graph' } }, files).runtime, 'python');
  });

  test('a JavaScript project with custom auth is health-checked on /info, the one path its auth handler lets by', () => {
    const files = { 'package.json': PKG, 'src/agent.ts': '', 'src/auth.ts': '' };
    assert.equal(resolveLg('langgraph.json', JS, files).healthCheckPath, '/ok');
    const guarded = { ...JS, auth: { path: './src/auth.ts:auth' } };
    assert.equal(resolveLg('langgraph.json', guarded, files).healthCheckPath, '/info');
  });

  test("the deployment's install and build commands run in the directory of langgraph.json", () => {
    const files = { 'apps/agent/package.json': PKG, 'apps/agent/src/agent.ts': '' };
    const config = resolveLg('apps/agent/langgraph.json', JS, files, {
      install_command: 'npm install --omit=dev',
      build_command: 'npm run build',
    });
    assert.equal(
      config.install,
      `(cd apps/agent && npm install --omit=dev) && (cd apps/agent && npm install --no-save --no-audit --no-fund ${PIN})`,
    );
    // Then, from the source root whatever the command's own `cd`, the schemas of the graphs it built.
    assert.equal(
      config.build,
      `( (cd apps/agent && npm run build) ) && { node .slipway/langgraph-server.mjs schemas apps/agent/langgraph.json || echo "${SCHEMAS_FAILED}"; }`,
    );
  });

  test('the schemas step fails no build, even killed; a failing build command still fails the build', async () => {
    // The build's commands as sh runs them, with a `node` that is killed as the memory limit would kill it.
    const bin = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-schemas-step-'));
    try {
      await fs.writeFile(path.join(bin, 'node'), '#!/bin/sh\nkill -KILL $$\n', { mode: 0o755 });
      const files = { 'package.json': PKG, 'src/agent.ts': '' };
      const buildOf = (build_command?: string) => resolveLg('langgraph.json', JS, files, { build_command }).build!;
      const sh = (command: string) =>
        spawnSync('/bin/sh', ['-c', command], { env: { PATH: `${bin}:/usr/bin:/bin` }, encoding: 'utf8' });
      for (const command of [buildOf(), buildOf('true')]) {
        const ran = sh(command);
        assert.equal(ran.status, 0, command);
        assert.equal(ran.stdout.trim(), SCHEMAS_FAILED.replace('$?', '137'));
      }
      const failed = sh(buildOf('exit 3'));
      assert.equal(failed.status, 3, "the build command's failure is the build's");
      assert.equal(failed.stdout, '', 'and the schemas step does not run');
    } finally {
      await fs.rm(bin, { recursive: true, force: true });
    }
  });

  test('every problem at once, naming the file', () => {
    const message = refusedLg(
      'agent/langgraph.json',
      { node_version: 20.5, graphs: { a: './x.ts:g' }, env: { 'BAD-NAME': 'x' }, dependencies: 'oops' },
      { 'agent/package.json': PKG },
    );
    assert.match(message, /^agent\/langgraph\.json: /);
    assert.match(message, /graphs\.a: '\.\/x\.ts' is not a file/);
    assert.match(message, /env: 'BAD-NAME' is not a valid variable name/);
    assert.match(message, /dependencies must be a list of strings/);
  });
});
