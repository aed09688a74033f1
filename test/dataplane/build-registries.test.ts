/**
 * Builds install from the operator's own registries: an npm registry on this machine's loopback that
 * wants a token (a real package tarball, a scoped package, as a corporate registry serves it) and a pip
 * simple index on loopback, both named only in the service's configuration (an npmrc and a pip.conf).
 * The build reaches them through a forward each (its own 127.0.0.1 is not the host's), and the build
 * log says which registries it used, never the token.
 *
 * Attacker's side: the app, at run time, looks for the registry token everywhere it can (its
 * environment, every file it can read under /home and /tmp, the build's registry directory inside and
 * on the host) and finds nothing; nor does another loopback server of the host become reachable to the
 * build because registries are forwarded.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before } from 'node:test';
import { test } from '../support/limited-test.ts';
import * as tar from 'tar';
import { findExecutable } from '../../src/dataplane/executables.ts';
import {
  requestApp,
  revisionLog,
  startTestService,
  uploadApp,
  waitForRevision,
  type TestService,
} from './data-plane-harness.ts';

const TOKEN = `npm_${randomBytes(18).toString('hex')}`;

/** What a server on loopback was asked, by path. */
interface LoopbackServer {
  port: number;
  requests: string[];
  close(): Promise<void>;
}

async function serve(
  handler: (url: string, request: http.IncomingMessage) => { status: number; type: string; body: Buffer | string },
): Promise<LoopbackServer> {
  const requests: string[] = [];
  const server = http.createServer((request, response) => {
    requests.push(request.url ?? '');
    const answer = handler(request.url ?? '', request);
    response.writeHead(answer.status, { 'content-type': answer.type });
    response.end(answer.body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    requests,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

/** The tarball of a real npm package (package/package.json, package/index.js). */
async function packageTarball(scratch: string): Promise<Buffer> {
  const dir = path.join(scratch, 'pkg');
  await fs.mkdir(path.join(dir, 'package'), { recursive: true });
  await fs.writeFile(
    path.join(dir, 'package', 'package.json'),
    JSON.stringify({ name: '@acme/greeting', version: '1.0.0', main: 'index.js' }),
  );
  await fs.writeFile(path.join(dir, 'package', 'index.js'), "module.exports = 'hello from the acme registry';\n");
  const file = path.join(scratch, 'greeting-1.0.0.tgz');
  await tar.c({ gzip: true, file, cwd: dir, portable: true }, ['package']);
  return fs.readFile(file);
}

/** A wheel of a real Python package, made with the host's Python (zipfile: a wheel is a zip). */
async function wheel(scratch: string): Promise<Buffer> {
  const file = path.join(scratch, 'slipway_hello-1.0-py3-none-any.whl');
  const script = `
import zipfile, sys
with zipfile.ZipFile(sys.argv[1], 'w') as z:
    z.writestr('slipway_hello/__init__.py', 'GREETING = "hello from the acme index"\\n')
    z.writestr('slipway_hello-1.0.dist-info/METADATA', 'Metadata-Version: 2.1\\nName: slipway-hello\\nVersion: 1.0\\n')
    z.writestr('slipway_hello-1.0.dist-info/WHEEL', 'Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n')
    z.writestr('slipway_hello-1.0.dist-info/RECORD', '')
`;
  await promisify(execFile)('python3', ['-c', script, file]);
  return fs.readFile(file);
}

/** The app: its build installs from both; at run time it looks for the token anywhere it can read. */
const SERVER = `
const fs = require('node:fs');
const http = require('node:http');
const found = [];
// Built from parts, so that this file does not match itself.
const secret = new RegExp('_auth' + 'Token *=|npm' + '_[0-9a-f]{36}');
const look = (dir, depth) => {
  if (depth > 8) return;
  let entries = [];
  try { entries = fs.readdirSync(dir, { withFileTypes: true }); } catch { return; }
  for (const entry of entries) {
    const file = dir + '/' + entry.name;
    if (entry.isDirectory()) look(file, depth + 1);
    else if (entry.isFile()) {
      try { if (secret.test(fs.readFileSync(file, 'utf8'))) found.push(file); } catch {}
    }
  }
};
const scan = () => {
  found.length = 0;
  for (const [name, value] of Object.entries(process.env))
    if (secret.test(value) || /userconfig/i.test(name)) found.push('env ' + name);
  look('/home', 0);
  look('/tmp', 0);
  for (const guess of ['/home/.registry/npmrc', process.env.HOST_DATA_DIR + '/revisions/' + process.env.SLIPWAY_REVISION_ID + '/registry/npmrc'])
    try { fs.readFileSync(guess); found.push(guess); } catch {}
  return found;
};
http.createServer((req, res) => res.end(JSON.stringify({
  npm: require('@acme/greeting'),
  pip: fs.readFileSync('pip-result.txt', 'utf8').trim(),
  found: scan(),
}))).listen(Number(process.env.PORT), process.env.HOST);
`;

let service: TestService;
let npmRegistry: LoopbackServer;
let pipIndex: LoopbackServer;
let unconfigured: LoopbackServer;
let scratch: string;

before(async () => {
  scratch = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-registries-'));
  const tarball = await packageTarball(scratch);
  const integrity = `sha512-${createHash('sha512').update(tarball).digest('base64')}`;
  npmRegistry = await serve((url, request) => {
    if (request.headers.authorization !== `Bearer ${TOKEN}`) return { status: 401, type: 'text/plain', body: 'token' };
    const base = `http://127.0.0.1:${npmRegistry.port}`;
    if (url === '/@acme%2fgreeting' || url === '/@acme%2Fgreeting' || url === '/@acme/greeting')
      return {
        status: 200,
        type: 'application/json',
        body: JSON.stringify({
          name: '@acme/greeting',
          'dist-tags': { latest: '1.0.0' },
          versions: {
            '1.0.0': {
              name: '@acme/greeting',
              version: '1.0.0',
              main: 'index.js',
              dist: { tarball: `${base}/@acme/greeting/-/greeting-1.0.0.tgz`, integrity },
            },
          },
        }),
      };
    if (url === '/@acme/greeting/-/greeting-1.0.0.tgz')
      return { status: 200, type: 'application/octet-stream', body: tarball };
    return { status: 404, type: 'application/json', body: '{"error":"not found"}' };
  });
  const wheelFile = await wheel(scratch);
  pipIndex = await serve((url) => {
    if (url === '/simple/slipway-hello/')
      return {
        status: 200,
        type: 'text/html',
        body: '<html><body><a href="/files/slipway_hello-1.0-py3-none-any.whl">slipway_hello-1.0-py3-none-any.whl</a></body></html>',
      };
    if (url === '/files/slipway_hello-1.0-py3-none-any.whl')
      return { status: 200, type: 'application/octet-stream', body: wheelFile };
    return { status: 404, type: 'text/plain', body: 'not found' };
  });
  unconfigured = await serve(() => ({ status: 200, type: 'text/plain', body: 'reached' }));
  const npmrc = path.join(scratch, 'npmrc');
  await fs.writeFile(
    npmrc,
    `; the operator's npm settings\n@acme:registry=http://127.0.0.1:${npmRegistry.port}/\n//127.0.0.1:${npmRegistry.port}/:_authToken=${TOKEN}\n`,
    { mode: 0o600 },
  );
  const pipConf = path.join(scratch, 'pip.conf');
  await fs.writeFile(pipConf, `[global]\nindex-url = http://127.0.0.1:${pipIndex.port}/simple/\n`);
  service = await startTestService({ SLIPWAY_BUILD_NPMRC: npmrc, SLIPWAY_BUILD_PIP_CONF: pipConf });
});
after(async () => {
  await service?.close();
  await Promise.all([npmRegistry, pipIndex, unconfigured].map((s) => s?.close()));
  await fs.rm(scratch, { recursive: true, force: true });
});

test("a build installs from the operator's npm registry and pip index on loopback; the app cannot read the token", async () => {
  const tarball = await uploadApp(service, {
    'package.json': JSON.stringify({ name: 'registry-app', dependencies: { '@acme/greeting': '1.0.0' } }),
    'server.js': SERVER,
    'slipway.json': JSON.stringify({
      database: false,
      install:
        'npm install --no-audit --no-fund && python3 -m venv .venv && .venv/bin/pip install --no-cache-dir slipway-hello',
      build:
        `.venv/bin/python -c "import slipway_hello; print(slipway_hello.GREETING)" > pip-result.txt && ` +
        `node -e "fetch('http://127.0.0.1:${unconfigured.port}/').then(() => console.log('UNCONFIGURED REACHED'), () => console.log('unconfigured unreachable'))"`,
      start: 'node server.js',
    }),
  });
  const created = await service.api('POST', '/v2/deployments', {
    name: 'registry-app',
    source: 'internal_source',
    source_revision_config: { source_tarball_path: tarball, framework_config_path: 'slipway.json' },
    secrets: [{ name: 'HOST_DATA_DIR', value: service.dataDir }],
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const id = created.body.id as string;
  const revisionId = created.body.latest_revision_id as string;
  const revision = await waitForRevision(service, id, revisionId, undefined, 300);
  const buildLog = (await revisionLog(service, id, revisionId, 'build')).join('\n');
  assert.equal(revision.status, 'DEPLOYED', `${JSON.stringify(revision)}\n${buildLog}`);

  // Installed from there, with the token.
  assert.ok(
    npmRegistry.requests.some((r) => r.endsWith('greeting-1.0.0.tgz')),
    JSON.stringify(npmRegistry.requests),
  );
  assert.ok(pipIndex.requests.includes('/simple/slipway-hello/'), JSON.stringify(pipIndex.requests));
  const url = (await service.api('GET', `/v2/deployments/${id}`)).body.source_config.custom_url;
  const answer = await requestApp(service, url, '/');
  assert.equal(answer.status, 200, answer.body);
  const body = JSON.parse(answer.body) as { npm: string; pip: string; found: string[] };
  assert.equal(body.npm, 'hello from the acme registry');
  assert.equal(body.pip, 'hello from the acme index');

  // The log names the registries, never the token.
  assert.match(buildLog, new RegExp(`@acme: http://127\\.0\\.0\\.1:${npmRegistry.port}/`));
  assert.match(buildLog, new RegExp(`credentials for //127\\.0\\.0\\.1:${npmRegistry.port}/ \\(not shown\\)`));
  assert.match(buildLog, new RegExp(`pip index: http://127\\.0\\.0\\.1:${pipIndex.port}/simple/`));
  const deployLog = (await revisionLog(service, id, revisionId, 'deploy')).join('\n');
  const events = JSON.stringify((await service.api('GET', `/v2/deployments/${id}/events?limit=100`)).body);
  for (const [where, text] of [
    ['build log', buildLog],
    ['deploy log', deployLog],
    ['events', events],
  ] as const)
    assert.ok(!text.includes(TOKEN), `the token is in the ${where}`);

  // The app at run time finds the token nowhere.
  assert.deepEqual(body.found, [], `the app found the registry settings: ${answer.body}`);
  // And the build's copies are gone from the host once it ended.
  await assert.rejects(fs.access(path.join(service.dataDir, 'revisions', revisionId, 'registry')));

  // Forwarding the registries opens nothing else of the host's loopback to a build with its own network.
  if (
    (await findExecutable('bwrap')) &&
    (await findExecutable('slirp4netns')) &&
    buildLog.includes('through a forward')
  ) {
    assert.match(buildLog, /unconfigured unreachable/);
    assert.deepEqual(unconfigured.requests, []);
  }
});
