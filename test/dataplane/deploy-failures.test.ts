/**
 * What a user sees when a deploy goes wrong on the local data plane: each failure lands in a final
 * state with a machine-readable reason and a message that says what happened, and what served
 * before keeps serving.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import path from 'node:path';
import { after, before } from 'node:test';
import {
  oneFileApp,
  requestApp,
  startTestService,
  uploadApp,
  waitForRevision,
  writeApp,
  type TestService,
} from './data-plane-harness.ts';
import { eventually } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';

/** A tiny app without dependencies; `MODE` (from slipway.json's env) makes it misbehave. */
const SERVER = `
import http from 'node:http';
const mode = process.env.MODE ?? 'ok';
http.createServer((req, res) => {
  if (req.url === '/healthz') { res.writeHead(mode === 'unhealthy' ? 500 : 200); res.end(mode); return; }
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ version: process.env.VERSION ?? 'none' }));
}).listen(Number(process.env.PORT), process.env.HOST);
if (mode === 'crash') setTimeout(() => process.exit(3), 500);
`;

function tinyApp(config: Record<string, unknown>, extra: Record<string, string> = {}): Record<string, string> {
  return oneFileApp(SERVER, { health_check_path: '/healthz', ...config }, extra);
}

let service: TestService;
let counter = 0;
before(async () => {
  service = await startTestService({ SLIPWAY_HEALTH_TIMEOUT_SECONDS: '20' });
});
after(async () => {
  await service.close();
});

async function deploy(
  files: Record<string, string> | string,
  name = `app-${++counter}`,
  extra: Record<string, unknown> = {},
) {
  const tarball = await uploadApp(service, files);
  const created = await service.api('POST', '/v2/deployments', {
    name,
    source: 'internal_source',
    source_revision_config: { source_tarball_path: tarball, framework_config_path: 'slipway.json' },
    ...extra,
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  return { id: created.body.id as string, revisionId: created.body.latest_revision_id as string };
}

async function patchSource(deploymentId: string, files: Record<string, string>) {
  const tarball = await uploadApp(service, files);
  const patched = await service.api('PATCH', `/v2/deployments/${deploymentId}`, {
    source_revision_config: { source_tarball_path: tarball },
  });
  assert.equal(patched.status, 200, JSON.stringify(patched.body));
  return patched.body.latest_revision_id as string;
}

test('a failing install command: BUILD_FAILED build_command_failed with the exit code and the last output', async () => {
  const { id, revisionId } = await deploy(
    tinyApp({ install: 'echo resolving packages; echo no such package >&2; exit 3' }),
  );
  const revision = await waitForRevision(service, id, revisionId);
  assert.equal(revision.status, 'BUILD_FAILED');
  assert.equal(revision.failure_reason, 'build_command_failed');
  assert.match(revision.failure_message, /exited with code 3/);
  assert.match(revision.failure_message, /no such package/);
});

test('an invalid app config: BUILD_FAILED invalid_app_config naming the file and the field', async () => {
  const { id, revisionId } = await deploy(tinyApp({ health_check_path: 'healthz' }));
  const revision = await waitForRevision(service, id, revisionId);
  assert.equal(revision.status, 'BUILD_FAILED');
  assert.equal(revision.failure_reason, 'invalid_app_config');
  assert.match(revision.failure_message, /slipway\.json/);
  assert.match(revision.failure_message, /health_check_path/);
});

test('an archive with a link out of its tree: BUILD_FAILED unsafe_archive, nothing extracted', async () => {
  const dir = await writeApp(tinyApp({}));
  await fs.symlink('/etc/passwd', path.join(dir, 'passwd'));
  const { id, revisionId } = await deploy(dir);
  const revision = await waitForRevision(service, id, revisionId);
  assert.equal(revision.status, 'BUILD_FAILED');
  assert.equal(revision.failure_reason, 'unsafe_archive');
  assert.match(revision.failure_message, /passwd/);
});

test('a health check that never passes: DEPLOY_FAILED health_check_failed, and the previous revision keeps serving', async () => {
  const { id, revisionId } = await deploy(tinyApp({ env: { VERSION: 'one' } }));
  assert.equal((await waitForRevision(service, id, revisionId)).status, 'DEPLOYED');
  const url = (await service.api('GET', `/v2/deployments/${id}`)).body.source_config.custom_url;

  const bad = await patchSource(id, tinyApp({ env: { VERSION: 'two', MODE: 'unhealthy' } }));
  const revision = await waitForRevision(service, id, bad);
  assert.equal(revision.status, 'DEPLOY_FAILED');
  assert.equal(revision.failure_reason, 'health_check_failed');
  assert.match(revision.failure_message, /\/healthz/);
  const deployment = (await service.api('GET', `/v2/deployments/${id}`)).body;
  assert.equal(deployment.active_revision_id, revisionId);
  assert.equal(deployment.status, 'READY');
  assert.equal(JSON.parse((await requestApp(service, url, '/')).body).version, 'one');
});

test('an app that keeps crashing is restarted, each exit is an event, and the deployment turns UNKNOWN', async () => {
  const { id, revisionId } = await deploy(tinyApp({ env: { MODE: 'crash' } }));
  assert.equal((await waitForRevision(service, id, revisionId)).status, 'DEPLOYED');
  await eventually(
    'the deployment to be UNKNOWN',
    async () => (await service.api('GET', `/v2/deployments/${id}`)).body.status === 'UNKNOWN',
  );
  const events = (await service.api('GET', `/v2/deployments/${id}/events?limit=100`)).body;
  const list = (events.resources ?? events) as {
    type: string;
    data: Record<string, unknown>;
    to_status: string | null;
  }[];
  // Every exit while the revision serves is an event, numbered by the instance's crashes in a row, up to
  // the one that made it a crash loop. (An exit in the moment between its health check and the switch
  // to it is in the deploy log only: the revision did not serve yet, though the crash counts.)
  const crashes = list
    .filter((e) => e.type === 'deployment.app_exited')
    .map((e) => Number(e.data.crashes))
    .sort((a, b) => a - b);
  assert.ok(crashes[0]! <= 2 && crashes.at(-1)! >= 5, JSON.stringify(list.map((e) => [e.type, e.data])));
  assert.deepEqual(
    crashes,
    crashes.map((_, i) => crashes[0]! + i),
    'one event per exit, none missing between the first recorded and the last',
  );
  const unknown = list.find((e) => e.type === 'deployment.status_changed' && e.to_status === 'UNKNOWN');
  assert.equal(unknown?.data.reason, 'crash_loop');
});

test('interrupting a running build stops it at once: INTERRUPTED, its processes gone', async () => {
  const marker = `${process.pid}.${Date.now() % 100000}`;
  const { id, revisionId } = await deploy(tinyApp({ install: `sleep 1${marker}` }));
  await waitForRevision(service, id, revisionId, ['BUILDING']);
  const sleeping = async () => {
    const pids = await fs.readdir('/proc');
    for (const pid of pids.filter((p) => /^\d+$/.test(p))) {
      const cmdline = await fs.readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
      if (cmdline.includes(`1${marker}`) && !cmdline.includes('bwrap') && !cmdline.includes('/bin/sh')) return true;
    }
    return false;
  };
  await eventually('the install command to run', sleeping);
  const interrupted = await service.api('POST', `/v2/deployments/${id}/revisions/${revisionId}/interrupt`);
  assert.ok(interrupted.status < 300, JSON.stringify(interrupted.body));
  assert.equal((await waitForRevision(service, id, revisionId)).status, 'INTERRUPTED');
  await eventually('the install command to be gone', async () => !(await sleeping()));
});

test('a container image on the own data plane fails at once with container_runtime_unavailable', async () => {
  const created = await service.api('POST', '/v2/deployments', {
    name: `image-${++counter}`,
    source: 'internal_container',
    source_revision_config: { image_uri: 'ghcr.io/acme/agent:1' },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const revision = await waitForRevision(service, created.body.id, created.body.latest_revision_id);
  assert.equal(revision.status, 'DEPLOY_FAILED');
  assert.equal(revision.failure_reason, 'container_runtime_unavailable');
  assert.match(revision.failure_message, /listener/);
});

test("an app cannot read the service's data directory (its encryption key)", async () => {
  const keyFile = path.join(service.dataDir, 'encryption.key');
  await fs.writeFile(keyFile, 'top-secret-key-material', { mode: 0o600 });
  const out = '"$SLIPWAY_DATA_DIR/probe.txt"';
  const probe = `cat ${keyFile} > ${out} 2>&1; ls ${service.dataDir} >> ${out} 2>&1; node server.js`;
  const { id, revisionId } = await deploy(tinyApp({ start: probe }));
  assert.equal((await waitForRevision(service, id, revisionId)).status, 'DEPLOYED');
  // The deployment's own writable directory, as the host sees it.
  const probeFile = path.join(service.dataDir, 'deployments', id, 'data', 'probe.txt');
  const seen = await eventually('the probe to run', () => fs.readFile(probeFile, 'utf8').catch(() => null));
  assert.doesNotMatch(seen, /top-secret-key-material/);
  assert.doesNotMatch(seen, /uploads|postgres|node-id/);
});

test('a build that replaces its source directory with a link to the data directory fails, and no instance starts from it', async () => {
  // The build may write /home/app; an instance mounts <app>/src read-only from the host, where a link
  // would be followed to wherever it points.
  const swap = `cd /home/app && mv src src.old && ln -s ${service.dataDir} src`;
  const { id, revisionId } = await deploy(tinyApp({ build: swap }));
  const revision = await waitForRevision(service, id, revisionId);
  assert.equal(revision.status, 'BUILD_FAILED', JSON.stringify(revision));
  assert.equal(revision.failure_reason, 'build_command_failed');
  assert.match(revision.failure_message, /replaced \/home\/app\/src/);
});
