/**
 * Loading a revision's app config file from a real source directory: zero configuration, a file in a
 * subdirectory, and the paths and files that must be refused (missing, not JSON, outside the source).
 */
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { AppConfigError, loadAppConfig } from '../../src/dataplane/app-config-file.ts';

let scratch: string;
before(async () => {
  scratch = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-app-config-'));
});
after(() => fs.rm(scratch, { recursive: true, force: true }));

let count = 0;
/** A source directory holding `files` (relative path -> content). */
async function source(files: Record<string, string>): Promise<string> {
  const dir = path.join(scratch, `source-${++count}`);
  for (const [name, content] of Object.entries(files)) {
    await fs.mkdir(path.dirname(path.join(dir, name)), { recursive: true });
    await fs.writeFile(path.join(dir, name), content);
  }
  await fs.mkdir(dir, { recursive: true });
  return dir;
}

const START = JSON.stringify({ name: 'agent', scripts: { start: 'node index.js' } });

async function refusal(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof AppConfigError, `expected an AppConfigError, got ${String(error)}`);
    assert.equal(error.reason, 'invalid_app_config');
    return error.message;
  }
  assert.fail('expected the config to be refused');
}

describe('loading', () => {
  test('zero configuration: {} next to a package.json with a start script', async () => {
    const dir = await source({ 'slipway.json': '{}', 'package.json': START, 'index.js': '' });
    assert.deepEqual(await loadAppConfig(dir, 'slipway.json', {}), {
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

  test('defaults come from the files at the root of the source', async () => {
    const dir = await source({
      'slipway.json': '{"worker": "node worker.js"}',
      'package.json': JSON.stringify({
        dependencies: { ws: '^8' },
        scripts: { start: 'node dist/index.js', build: 'tsc' },
      }),
      'package-lock.json': '{}',
    });
    const config = await loadAppConfig(dir, 'slipway.json', {});
    assert.equal(config.install, 'npm ci');
    assert.equal(config.build, 'npm run build');
    assert.equal(config.worker, 'node worker.js');
  });

  test('a Python source is detected and started from main.py', async () => {
    const dir = await source({
      'slipway.json': '{"health_check_path": "/ok"}',
      'requirements.txt': 'fastapi\n',
      'main.py': '',
    });
    const config = await loadAppConfig(dir, 'slipway.json', {});
    assert.equal(config.runtime, 'python');
    assert.equal(config.install, 'python3 -m venv .venv && .venv/bin/pip install -r requirements.txt');
    assert.equal(config.start, '.venv/bin/python main.py');
    assert.equal(config.healthCheckPath, '/ok');
  });

  test('a file in a subdirectory, with a byte-order mark; the defaults still come from the root', async () => {
    const dir = await source({ 'deploy/agent.json': '\uFEFF{"env": {"MODE": "prod"}}', 'package.json': START });
    const config = await loadAppConfig(dir, './deploy/agent.json', {});
    assert.equal(config.start, 'node index.js');
    assert.deepEqual(config.env, { MODE: 'prod' });
  });

  test("the deployment's install_command and build_command win over the file", async () => {
    const dir = await source({
      'slipway.json': '{"install": "npm install", "build": "npm run build"}',
      'package.json': START,
    });
    const config = await loadAppConfig(dir, 'slipway.json', {
      install_command: 'pnpm install --frozen-lockfile',
      build_command: null,
    });
    assert.equal(config.install, 'pnpm install --frozen-lockfile');
    assert.equal(config.build, 'npm run build');
  });

  test('a link inside the source is followed', async () => {
    const dir = await source({ 'config/real.json': '{"health_check_path": "/live"}', 'package.json': START });
    await fs.symlink('config/real.json', path.join(dir, 'slipway.json'));
    assert.equal((await loadAppConfig(dir, 'slipway.json', {})).healthCheckPath, '/live');
  });

  test('the example agent app loads as it is shipped', async () => {
    const example = fileURLToPath(new URL('../../examples/agent-app', import.meta.url));
    const config = await loadAppConfig(example, 'slipway.json', {});
    assert.equal(config.runtime, 'node');
    assert.equal(config.install, null);
    assert.equal(config.start, 'node server.js');
    assert.equal(config.healthCheckPath, '/healthz');
    assert.equal(config.database, true);
  });
});

describe('refusals name the file', () => {
  test('a missing file', async () => {
    const dir = await source({ 'package.json': START });
    assert.equal(
      await refusal(loadAppConfig(dir, 'slipway.json', {})),
      'slipway.json was not found in the source; framework_config_path must name a file in it',
    );
    assert.match(await refusal(loadAppConfig(dir, 'package.json/x.json', {})), /^package\.json\/x\.json was not found/);
  });

  test('a file that is not JSON', async () => {
    const dir = await source({ 'slipway.json': '{"start": "node index.js",}', 'package.json': START });
    assert.equal(
      await refusal(loadAppConfig(dir, 'slipway.json', {})),
      'slipway.json is not valid JSON: line 1, column 27: a comma before the closing } (JSON allows no trailing comma)',
    );
    // Where JSON.parse gives no position (an unexpected token), the line and column are still named.
    const token = await source({
      'slipway.json': '{\n  "start": "node index.js",\n  "database": yes\n}',
      'package.json': START,
    });
    assert.equal(
      await refusal(loadAppConfig(token, 'slipway.json', {})),
      "slipway.json is not valid JSON: line 3, column 15: unexpected 'y' where a value is expected",
    );
  });

  test('a file that is JSON but not an object', async () => {
    const dir = await source({ 'slipway.json': '["node index.js"]', 'package.json': START });
    assert.equal(
      await refusal(loadAppConfig(dir, 'slipway.json', {})),
      'slipway.json must hold a JSON object (e.g. {}), got an array',
    );
  });

  test('a field the file does not know', async () => {
    const dir = await source({ 'slipway.json': '{"heathcheck": "/healthz"}', 'package.json': START });
    assert.match(await refusal(loadAppConfig(dir, 'slipway.json', {})), /^slipway\.json: unknown field 'heathcheck'/);
  });

  test('a directory', async () => {
    const dir = await source({ 'conf/a.json': '{}', 'package.json': START });
    assert.equal(await refusal(loadAppConfig(dir, 'conf', {})), 'conf is not a file');
  });
});

describe('the path must stay inside the source', () => {
  test('absolute paths and .. segments', async () => {
    const dir = await source({ 'slipway.json': '{}', 'package.json': START });
    for (const bad of [
      '/etc/passwd',
      path.join(dir, 'slipway.json'),
      '../slipway.json',
      'deploy/../../slipway.json',
      '..',
    ]) {
      assert.match(
        await refusal(loadAppConfig(dir, bad, {})),
        /^framework_config_path ".*" must be a relative path inside the source/,
        bad,
      );
    }
    assert.match(await refusal(loadAppConfig(dir, '', {})), /^framework_config_path is empty/);
  });

  test('a link that leads outside the source, directly or through a directory', async () => {
    const outside = await source({ 'secret.json': '{"start": "cat /etc/shadow"}' });
    const dir = await source({ 'package.json': START });
    await fs.symlink(path.join(outside, 'secret.json'), path.join(dir, 'slipway.json'));
    await fs.symlink(outside, path.join(dir, 'conf'));
    assert.equal(
      await refusal(loadAppConfig(dir, 'slipway.json', {})),
      'slipway.json is a link that leads outside the source directory',
    );
    assert.equal(
      await refusal(loadAppConfig(dir, 'conf/secret.json', {})),
      'conf/secret.json is a link that leads outside the source directory',
    );
  });

  test('a package.json that links outside the source is not read, so it is not there', async () => {
    const outside = await source({ 'package.json': START });
    const dir = await source({ 'slipway.json': '{"runtime": "node"}' });
    await fs.symlink(path.join(outside, 'package.json'), path.join(dir, 'package.json'));
    assert.match(
      await refusal(loadAppConfig(dir, 'slipway.json', {})),
      /^slipway\.json: start is not set and there is no package\.json/,
    );
  });
});

describe('a LangGraph project (langgraph.json)', () => {
  const PKG = JSON.stringify({ dependencies: { '@langchain/langgraph': '^1.7.3' } });
  const CONFIG = JSON.stringify({
    node_version: '20',
    graphs: { agent: './src/agent.ts:graph' },
    env: '.env',
    dependencies: ['.', '../../libs/shared'],
  });

  test('a monorepo config is resolved from the files around it, and the launcher of its server is written into the source', async () => {
    const dir = await source({
      'package.json': JSON.stringify({ private: true, workspaces: ['apps/*', 'libs/*'] }),
      'package-lock.json': '{}',
      'apps/agent/langgraph.json': CONFIG,
      'apps/agent/package.json': PKG,
      'apps/agent/src/agent.ts': 'export const graph = null;',
      'apps/agent/.env': 'OPENAI_API_KEY="sk-from-dotenv"\nPORT=3000\n',
      'libs/shared/index.ts': '',
    });
    const config = await loadAppConfig(dir, 'apps/agent/langgraph.json', {});
    assert.equal(config.runtime, 'node');
    assert.match(config.install!, /^npm ci --no-audit --no-fund && \(cd apps\/agent && npm install --no-save/);
    assert.equal(config.start, 'exec node .slipway/langgraph-server.mjs js apps/agent/langgraph.json');
    assert.deepEqual(config.env, { OPENAI_API_KEY: 'sk-from-dotenv' });
    assert.equal(config.healthCheckPath, '/ok');
    const launcher = await fs.readFile(path.join(dir, '.slipway', 'langgraph-server.mjs'), 'utf8');
    assert.equal(
      launcher,
      await fs.readFile(fileURLToPath(new URL('../../runtime/langgraph-server.mjs', import.meta.url)), 'utf8'),
    );
  });

  test('a graph, a dependency or the env file that leads outside the source is refused', async () => {
    const outside = await source({ 'agent.ts': '', '.env': 'SECRET=host' });
    const dir = await source({
      'langgraph.json': JSON.stringify({
        node_version: '20',
        graphs: { agent: './linked/agent.ts:graph' },
        env: './linked/.env',
        dependencies: ['./linked'],
      }),
      'package.json': PKG,
    });
    await fs.symlink(outside, path.join(dir, 'linked'));
    const message = await refusal(loadAppConfig(dir, 'langgraph.json', {}));
    assert.match(message, /graphs\.agent: '\.\/linked\/agent\.ts' is a link that leads outside the source/);
    assert.match(message, /env: '\.\/linked\/\.env' is a link that leads outside the source/);
    assert.match(message, /dependencies: '\.\/linked' is a link that leads outside the source/);
    assert.equal(message.includes('SECRET=host'), false);
  });

  test('a .slipway link in the archive cannot make the launcher land outside the source', async () => {
    const outside = await source({ 'keep.txt': 'x' });
    const dir = await source({
      'langgraph.json': JSON.stringify({ node_version: '20', graphs: { agent: './agent.ts:graph' } }),
      'package.json': PKG,
      'agent.ts': '',
    });
    await fs.symlink(outside, path.join(dir, '.slipway'));
    assert.match(
      await refusal(loadAppConfig(dir, 'langgraph.json', {})),
      /\.slipway\/langgraph-server\.mjs could not be written into the source/,
    );
    assert.deepEqual(await fs.readdir(outside), ['keep.txt']);
  });
});
