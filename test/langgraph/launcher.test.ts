/**
 * The launcher the data plane writes into a LangGraph revision (runtime/langgraph-server.mjs),
 * run as the data plane runs it, without the servers themselves: how it starts `langgraph dev` for a
 * Python project (a stand-in `langgraph` in the venv, since no Python package index is reachable
 * here), what it keeps of `.langgraph_api/`, and what it says when the JS server is not installed.
 * The JS server itself runs in deploy-example.test.ts.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const run = promisify(execFile);
/** The launcher and its modules (runtime/langgraph/), as the data plane copies them into .slipway/. */
const RUNTIME = fileURLToPath(new URL('../../runtime/', import.meta.url));

let scratch: string;
before(async () => {
  scratch = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-launcher-'));
});
after(() => fs.rm(scratch, { recursive: true, force: true }));

let count = 0;
async function project(files: Record<string, string>): Promise<string> {
  const dir = path.join(scratch, `source-${++count}`);
  for (const [name, content] of Object.entries(files)) {
    await fs.mkdir(path.dirname(path.join(dir, name)), { recursive: true });
    await fs.writeFile(path.join(dir, name), content);
  }
  await fs.cp(RUNTIME, path.join(dir, '.slipway'), { recursive: true });
  return dir;
}

/** Runs the launcher from the source root, as the start command does, with the platform's variables. */
async function launch(dir: string, args: string[], env: Record<string, string> = {}) {
  try {
    const { stdout, stderr } = await run(process.execPath, ['.slipway/langgraph-server.mjs', ...args], {
      cwd: dir,
      env: { PATH: process.env.PATH ?? '', PORT: '43111', HOST: '127.0.0.1', SLIPWAY_REVISION_ID: 'rev-2', ...env },
      timeout: 20_000,
    });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const failed = error as { code: number; stdout: string; stderr: string };
    return { code: failed.code, stdout: failed.stdout, stderr: failed.stderr };
  }
}

// Prints what it was started with, as `langgraph dev` would receive it, and exits with 3.
const FAKE_LANGGRAPH =
  '#!/bin/sh\necho "args: $*"\necho "cwd: $(pwd)"\necho "analytics off: $LANGGRAPH_CLI_NO_ANALYTICS"\necho "port: $PORT"\nexit 3\n';

test("python: langgraph dev of the venv, in the config's directory, on PORT and HOST, without reload or browser", async () => {
  const dir = await project({
    'apps/agent/langgraph.json': JSON.stringify({ python_version: '3.11', graphs: { agent: './graph.py:graph' } }),
    '.venv/bin/langgraph': FAKE_LANGGRAPH,
  });
  await fs.chmod(path.join(dir, '.venv/bin/langgraph'), 0o755);
  const result = await launch(dir, ['python', 'apps/agent/langgraph.json']);
  assert.equal(result.code, 3, "the server's exit code is the launcher's, so the supervisor sees the crash");
  const agentDir = await fs.realpath(path.join(dir, 'apps/agent'));
  assert.match(
    result.stdout,
    new RegExp(`args: dev --config ${agentDir}/langgraph.json --host 127.0.0.1 --port 43111 --no-reload --no-browser`),
  );
  assert.match(result.stdout, new RegExp(`cwd: ${agentDir}\\n`));
  assert.match(result.stdout, /analytics off: 1/);
  assert.match(result.stdout, /port: 43111/);
});

test('the server state of another revision (copied by a redeploy) is dropped; the same revision keeps its own', async () => {
  const dir = await project({
    'langgraph.json': JSON.stringify({ python_version: '3.11', graphs: { agent: './graph.py:graph' } }),
    '.venv/bin/langgraph': FAKE_LANGGRAPH,
  });
  await fs.chmod(path.join(dir, '.venv/bin/langgraph'), 0o755);
  const state = path.join(dir, '.langgraph_api');
  await fs.mkdir(state);
  await fs.writeFile(path.join(state, '.slipway-revision'), 'rev-1');
  await fs.writeFile(path.join(state, 'threads.pckl'), 'threads of revision 1');
  await launch(dir, ['python', 'langgraph.json']);
  assert.deepEqual(await fs.readdir(state), ['.slipway-revision']);
  assert.equal(await fs.readFile(path.join(state, '.slipway-revision'), 'utf8'), 'rev-2');

  await fs.writeFile(path.join(state, 'threads.pckl'), 'threads of revision 2');
  await launch(dir, ['python', 'langgraph.json']);
  assert.equal(
    await fs.readFile(path.join(state, 'threads.pckl'), 'utf8'),
    'threads of revision 2',
    'a restart of the same revision finds its state',
  );
});

test('js: a project without the server installed fails with a message that says what to add', async () => {
  const dir = await project({
    'langgraph.json': JSON.stringify({ node_version: '20', graphs: { agent: './agent.ts:graph' } }),
    'package.json': '{}',
  });
  const result = await launch(dir, ['js', 'langgraph.json']);
  assert.equal(result.code, 1);
  assert.match(result.stderr, /@langchain\/langgraph-api is not installed for langgraph\.json/);
});

test('a wrong invocation says how to call it', async () => {
  const dir = await project({});
  const result = await launch(dir, ['ruby', 'langgraph.json']);
  assert.equal(result.code, 2);
  assert.match(result.stderr, /usage: node langgraph-server\.mjs js\|python/);
});
