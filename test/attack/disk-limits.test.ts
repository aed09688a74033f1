/**
 * Attacker's test of the disk limits (issue 33, item 4): an app that writes forever into its data
 * directory, and a build that writes forever into its directory, on a service whose limits are small.
 * Both stop at their limit, the app's end is an event on its deployment, the build fails saying why,
 * and the service and its PostgreSQL keep writing: a new deployment is still accepted. An endpoint's
 * instances write the same data directory as their deployment's: when they fill it, they stop with it.
 *
 * What main did before: nothing measured or limited either, so the app wrote its whole 1 GiB (and
 * would have written until the host's disk, which holds PostgreSQL, was full) with no event, and the
 * build wrote its 1 GiB and was built (its app, which does not listen, then failed its health check).
 *
 * The writers stop at 1 GiB by themselves, so that the test cannot fill a host's disk when the
 * limits do not hold; they write 1 MiB every 20 ms, which the limits' checks must catch well before half of it.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before } from 'node:test';
import {
  oneFileApp,
  requestApp,
  startTestService,
  uploadApp,
  waitForRevision,
  type TestService,
} from '../dataplane/data-plane-harness.ts';
import { eventually, pause } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';

const LIMIT_MB = 24;
const WRITE_MB = 1024;
const MIB = 1024 * 1024;

/** Writes 1 MiB every 20 ms into the file `process.argv[2]` until WRITE_MB, or until a write fails. */
const FILL = `
import fs from 'node:fs';
const file = process.argv[2];
const chunk = Buffer.alloc(${MIB}, 7);
let written = 0;
const fd = fs.openSync(file, 'a');
const tick = () => {
  try { fs.writeSync(fd, chunk); written++; } catch (e) { console.log('write failed after', written, 'MiB:', e.code); return; }
  if (written < ${WRITE_MB}) setTimeout(tick, 20); else console.log('wrote', written, 'MiB');
};
tick();
`;

const SERVER = `
import http from 'node:http';
import { spawn } from 'node:child_process';
http.createServer((req, res) => { res.writeHead(200); res.end('ok'); })
  .listen(Number(process.env.PORT), process.env.HOST, () => {
    // Healthy first: the limit must catch a serving app, not only one that never starts.
    setTimeout(() => spawn(process.execPath, ['fill.mjs', process.env.SLIPWAY_DATA_DIR + '/fill'], { stdio: 'inherit' }), 1500);
  });
`;

let service: TestService;
let counter = 0;

before(async () => {
  service = await startTestService({
    SLIPWAY_APP_DISK_MB: String(LIMIT_MB),
    SLIPWAY_BUILD_DISK_MB: String(LIMIT_MB * 2),
    SLIPWAY_DISK_CHECK_SECONDS: '1',
  });
});
after(async () => {
  await service?.close();
});

async function deploy(files: Record<string, string>): Promise<{ id: string; revisionId: string }> {
  const tarball = await uploadApp(service, files);
  const created = await service.api('POST', '/v2/deployments', {
    name: `disk-${++counter}`,
    source: 'internal_source',
    source_revision_config: { source_tarball_path: tarball, framework_config_path: 'slipway.json' },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  return { id: created.body.id, revisionId: created.body.latest_revision_id };
}

/** Bytes a tree takes on its disk (blocks, links not followed), as the host's `du` counts them. */
async function usage(dir: string): Promise<number> {
  const { stdout } = await promisify(execFile)('du', ['-sxB1', dir]).catch((error: { stdout?: string }) => ({
    stdout: error.stdout ?? '0',
  }));
  return Number.parseInt(stdout, 10);
}

async function events(deploymentId: string): Promise<{ type: string; data: Record<string, unknown> }[]> {
  const answer = await service.api('GET', `/v2/deployments/${deploymentId}/events?limit=100`);
  return answer.body.resources ?? answer.body;
}

test('the start log says how app and build disks are limited', () => {
  assert.match(service.worker?.isolation ?? '', /disk: (loop-mounted|measured)/);
});

test('an app that writes forever into its data directory stops at its limit, with an event, and the service keeps writing', async () => {
  const app = await deploy({ ...oneFileApp(SERVER, { health_check_path: '/' }), 'fill.mjs': FILL });
  assert.equal((await waitForRevision(service, app.id, app.revisionId)).status, 'DEPLOYED');
  const full = await eventually('the disk_full event', async () =>
    (await events(app.id)).find((e) => e.type === 'deployment.disk_full'),
  );
  assert.equal(full.data.limit_bytes, LIMIT_MB * MIB);
  assert.equal(full.data.revision_id, app.revisionId);
  // It writes no more: what its directory takes stays put, well below what it set out to write.
  const dataDir = path.join(service.dataDir, 'deployments', app.id, 'data');
  const first = await usage(dataDir);
  await pause(3_000, 'the stopped app would have written on (it writes every 20 ms)');
  const second = await usage(dataDir);
  assert.ok(second <= first + MIB, `the app still writes: ${first} then ${second} bytes`);
  assert.ok(second < (WRITE_MB / 2) * MIB, `the app wrote ${second} bytes past its ${LIMIT_MB} MiB`);
  // The deployment says so, and the service and its PostgreSQL still take writes.
  const deployment = (await service.api('GET', `/v2/deployments/${app.id}`)).body;
  assert.equal(deployment.status, 'UNKNOWN');
  // A rescale of the stopped app fails saying why, rather than as an instance that failed its health check.
  const scaled = await service.api('PATCH', `/v2/deployments/${app.id}`, {
    source_config: { resource_spec: { min_scale: 2 } },
  });
  assert.equal(scaled.status, 200, JSON.stringify(scaled.body));
  const failed = await eventually('the scale_failed event', async () =>
    (await events(app.id)).find((e) => e.type === 'deployment.scale_failed'),
  );
  assert.match(String(failed.data.message), /data and home directories are full/);
  const created = await service.api('POST', '/v2/deployments', { name: 'after-full-app', source: 'internal_source' });
  assert.equal(created.status, 201, JSON.stringify(created.body));
});

/** Fills the data directory only when asked, so that an endpoint's instance is the writer. */
const FILL_ON_REQUEST = `
import http from 'node:http';
import { spawn } from 'node:child_process';
http.createServer((req, res) => {
  if (req.url === '/fill') spawn(process.execPath, ['fill.mjs', process.env.SLIPWAY_DATA_DIR + '/fill'], { stdio: 'inherit' });
  res.writeHead(200);
  res.end('ok');
}).listen(Number(process.env.PORT), process.env.HOST);
`;

test("an endpoint's instance that fills the deployment's data directory stops with the deployment", async () => {
  const app = await deploy({ ...oneFileApp(FILL_ON_REQUEST, { health_check_path: '/' }), 'fill.mjs': FILL });
  assert.equal((await waitForRevision(service, app.id, app.revisionId)).status, 'DEPLOYED');
  const put = await service.api('PUT', `/v2/deployments/${app.id}/endpoints/canary`, { revision_id: app.revisionId });
  assert.equal(put.status, 201, JSON.stringify(put.body));
  await eventually('the endpoint served', async () => {
    const got = await service.api('GET', `/v2/deployments/${app.id}/endpoints/canary`);
    return got.body.served_revision_id === app.revisionId;
  });
  const slug = new URL(
    (await service.api('GET', `/v2/deployments/${app.id}`)).body.source_config.custom_url,
  ).hostname.split('.')[0]!;
  const endpointInstances = async () =>
    (await service.worker!.appStats()).filter((r) => r.deploymentId === app.id && r.endpoint === 'canary');
  assert.equal((await endpointInstances()).length, 1);
  // The writer is the endpoint's instance, not the deployment's own.
  assert.equal((await requestApp(service, put.body.url, '/fill')).status, 200);
  const full = await eventually('the disk_full event', async () =>
    (await events(app.id)).find((e) => e.type === 'deployment.disk_full'),
  );
  assert.equal(full.data.revision_id, app.revisionId);
  // The endpoint's instances are gone and its route with them; the writer writes no more.
  await eventually("the endpoint's instances stopped", async () => (await endpointInstances()).length === 0);
  assert.deepEqual(service.edge.targets(`${slug}--canary`), []);
  assert.equal((await requestApp(service, put.body.url, '/')).status, 404);
  const dataDir = path.join(service.dataDir, 'deployments', app.id, 'data');
  const first = await usage(dataDir);
  await pause(3_000, "the stopped endpoint's instance would have written on (it writes every 20 ms)");
  const second = await usage(dataDir);
  assert.ok(second <= first + MIB, `the endpoint's instance still writes: ${first} then ${second} bytes`);
  assert.ok(second < (WRITE_MB / 2) * MIB, `it wrote ${second} bytes past the ${LIMIT_MB} MiB`);
});

test('a build that writes forever stops at its limit and fails saying so', async () => {
  const build = await deploy({
    ...oneFileApp(`console.log('never started')`, { build: 'node fill.mjs ./fill' }),
    'fill.mjs': FILL,
  });
  const revision = await waitForRevision(service, build.id, build.revisionId);
  assert.equal(revision.status, 'BUILD_FAILED', JSON.stringify(revision));
  assert.equal(revision.failure_reason, 'disk_limit', JSON.stringify(revision));
  assert.match(revision.failure_message, new RegExp(`${LIMIT_MB * 2} MiB`));
  const created = await service.api('POST', '/v2/deployments', { name: 'after-full-build', source: 'internal_source' });
  assert.equal(created.status, 201, JSON.stringify(created.body));
});
