/**
 * `kill -9` of the real service (`src/main.ts` with its embedded PostgreSQL) never leaves a revision
 * stuck or an app down: after a restart, the app that was serving is started again from its build
 * output (no rebuild), and a build that was running is taken over and finished.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { after, before } from 'node:test';
import { fileURLToPath } from 'node:url';
import * as tar from 'tar';
import { removeTree } from '../../src/dataplane/build-snapshot.ts';
import { unmountUnder } from '../support/mounts.ts';
import { freePort } from '../../src/db/embedded-postgres.ts';
import { FINAL, writeApp } from './data-plane-harness.ts';
import { eventually } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const KEY = 'slw_crash_test_bootstrap_key_0123456789';

interface Service {
  child: ChildProcess;
  base: string;
  exited: Promise<unknown>;
  output(): string;
}

let dataDir: string;
let port: number;
/** The app edge's port: the same across restarts, as the apps' URLs name it. */
let appsPort: number;
let current: Service | null = null;

function serviceEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const name of Object.keys(env)) {
    if (
      name === 'DATABASE_URL' ||
      name.startsWith('SLIPWAY_') ||
      name === 'NODE_TEST_CONTEXT' ||
      name === 'PORT' ||
      name === 'HOST'
    )
      delete env[name];
  }
  return {
    ...env,
    PORT: String(port),
    SLIPWAY_APPS_PORT: String(appsPort),
    SLIPWAY_DATA_DIR: dataDir,
    SLIPWAY_BOOTSTRAP_API_KEY: KEY,
    LOG_LEVEL: 'warn',
    SLIPWAY_HEALTH_TIMEOUT_SECONDS: '30',
  };
}

async function start(): Promise<Service> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
    cwd: ROOT,
    env: serviceEnv(),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise((resolve) => child.once('exit', resolve));
  const service = { child, base: `http://127.0.0.1:${port}`, exited, output: () => output };
  current = service;
  await eventually(
    'the service to be ready',
    async () => {
      if (child.exitCode !== null) assert.fail(`the service exited during start: ${output}`);
      return fetch(`${service.base}/readyz`).then(
        (r) => r.status === 200,
        () => false,
      );
    },
    { everyMs: 250, describe: () => output },
  );
  return service;
}

async function kill9(service: Service): Promise<void> {
  service.child.kill('SIGKILL');
  await service.exited;
  current = null;
}

async function api(service: Service, method: string, url: string, body?: unknown): Promise<any> {
  const response = await fetch(`${service.base}${url}`, {
    method,
    headers: { 'x-api-key': KEY, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : undefined };
}

async function upload(service: Service, files: Record<string, string>): Promise<string> {
  const dir = await writeApp(files);
  const archive = path.join(os.tmpdir(), `crash-app-${process.pid}-${Date.now()}.tar.gz`);
  await tar.c({ gzip: true, file: archive, cwd: dir, portable: true }, await fs.readdir(dir));
  const response = await fetch(`${service.base}/v2/uploads`, {
    method: 'POST',
    headers: { 'x-api-key': KEY, 'content-type': 'application/gzip' },
    body: await fs.readFile(archive),
  });
  await fs.rm(archive, { force: true });
  return ((await response.json()) as { source_tarball_path: string }).source_tarball_path;
}

/** The revision once its status is one of `statuses`. */
function waitStatus(service: Service, deploymentId: string, revisionId: string, statuses: string[]): Promise<any> {
  let last: any;
  return eventually(
    `revision ${revisionId} to reach ${statuses.join('|')}`,
    async () => {
      last = (await api(service, 'GET', `/v2/deployments/${deploymentId}/revisions/${revisionId}`)).body;
      return statuses.includes(last?.status) && last;
    },
    { everyMs: 200, describe: () => `last seen ${JSON.stringify(last)}` },
  );
}

function getByHost(url: string, pathname = '/'): Promise<{ status: number; body: string }> {
  return new Promise((resolve) => {
    const request = http.get(
      // The app edge's port, which the URL names (and which stays the same across restarts).
      { host: '127.0.0.1', port: Number(new URL(url).port), path: pathname, headers: { host: new URL(url).host } },
      (response) => {
        let body = '';
        response.on('data', (chunk: Buffer) => (body += chunk.toString()));
        response.on('end', () => resolve({ status: response.statusCode ?? 0, body }));
      },
    );
    request.on('error', () => resolve({ status: 0, body: '' }));
  });
}

const APP = (install: string | null) => ({
  'package.json': JSON.stringify({ name: 'crashy', private: true, scripts: { start: 'node server.js' } }),
  // A random id per process start (PIDs repeat: each sandbox has its own PID namespace).
  'server.js':
    "const run = Math.random().toString(36).slice(2); require('node:http').createServer((q, s) => s.end('run ' + run)).listen(Number(process.env.PORT), process.env.HOST);",
  'slipway.json': JSON.stringify({ database: false, ...(install ? { install } : {}) }),
});

before(async () => {
  dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-crash-'));
  await fs.chmod(dataDir, 0o711);
  port = await freePort();
  appsPort = await freePort();
});

after(async () => {
  if (current) {
    current.child.kill('SIGTERM');
    await current.exited;
  }
  // The deployments' file systems (as root) stay mounted after the service; sealed builds have no
  // write bits, which only root ignores (CI runs this as an ordinary user too).
  await unmountUnder(dataDir);
  await removeTree(dataDir);
});

test('after kill -9 the serving app comes back without a rebuild, and a build in flight is taken over', async () => {
  let service = await start();
  const serving = await api(service, 'POST', '/v2/deployments', {
    name: 'steady',
    source: 'internal_source',
    source_revision_config: {
      source_tarball_path: await upload(service, APP(null)),
      framework_config_path: 'slipway.json',
    },
  });
  assert.equal(serving.status, 201, JSON.stringify(serving.body));
  assert.equal((await waitStatus(service, serving.body.id, serving.body.latest_revision_id, FINAL)).status, 'DEPLOYED');
  const url = (await api(service, 'GET', `/v2/deployments/${serving.body.id}`)).body.source_config.custom_url;
  const before = await getByHost(url);
  assert.equal(before.status, 200);

  // A second deployment whose install takes a while: kill the service while it builds.
  const slow = await api(service, 'POST', '/v2/deployments', {
    name: 'slow',
    source: 'internal_source',
    source_revision_config: {
      source_tarball_path: await upload(service, APP('sleep 2')),
      framework_config_path: 'slipway.json',
    },
  });
  await waitStatus(service, slow.body.id, slow.body.latest_revision_id, ['BUILDING']);
  await kill9(service);
  // The app died with the service (bubblewrap's die-with-parent, or the process group).
  assert.equal((await getByHost(url)).status, 0);

  service = await start();
  const after = await eventually(
    'the app to be started again',
    async () => {
      const answer = await getByHost(url);
      return answer.status === 200 && answer;
    },
    { everyMs: 250, describe: () => service.output() },
  );
  assert.notEqual(after.body, before.body, 'a new process serves');
  const builds = (
    await api(
      service,
      'GET',
      `/v2/deployments/${serving.body.id}/revisions/${serving.body.latest_revision_id}/logs?type=build&limit=1000`,
    )
  ).body.lines as { message: string }[];
  assert.equal(builds.filter((l) => /Build finished/.test(l.message)).length, 1, 'no rebuild');

  const taken = await waitStatus(service, slow.body.id, slow.body.latest_revision_id, FINAL);
  assert.equal(taken.status, 'DEPLOYED', JSON.stringify(taken));
  assert.equal((await api(service, 'GET', `/v2/deployments/${serving.body.id}`)).body.status, 'READY');
});
