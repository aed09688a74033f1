/**
 * `resource_spec.min_scale: 0` on the own data plane pauses a deployment (docs/data-plane.md,
 * docs/lifecycle.md): no web instance runs, the deployment is UNUSED (reason `scaled_to_zero`), and its
 * stable URL answers 503 saying it is scaled to zero. Setting `min_scale` back to 1 starts an instance in
 * place (no revision) and makes it READY again (reason `scaled_up`). A revision deployed while it is 0
 * still proves itself: one instance is started and health-checked, then stopped; a broken one fails.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before } from 'node:test';
import {
  oneFileApp,
  processesMarked,
  requestApp,
  revisionLog,
  startTestService,
  uploadApp,
  waitForRevision,
  type TestService,
} from './data-plane-harness.ts';
import { eventually } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';

const SERVER = `
import http from 'node:http';
if (process.env.BROKEN === 'yes') process.exit(3);
http.createServer((req, res) => {
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ version: process.env.VERSION }));
}).listen(Number(process.env.PORT), process.env.HOST);
`;

/** The app's files; its process carries `marker` among its arguments, so that it can be counted. */
const app = (marker: string, env: Record<string, string>) =>
  oneFileApp(
    SERVER,
    { health_check_path: '/', database: false, env },
    {
      'package.json': JSON.stringify({
        name: 'tiny',
        private: true,
        type: 'module',
        scripts: { start: `node server.js ${marker}` },
      }),
    },
  );

let service: TestService;
before(async () => {
  service = await startTestService({ SLIPWAY_HEALTH_TIMEOUT_SECONDS: '10' });
});
after(async () => {
  await service.close();
});

interface StatusChange {
  type: string;
  from_status: string;
  to_status: string;
  data: { reason?: string };
}

async function statusChanges(deploymentId: string): Promise<StatusChange[]> {
  const answer = await service.api('GET', `/v2/deployments/${deploymentId}/events?limit=100`);
  assert.equal(answer.status, 200, JSON.stringify(answer.body));
  return (answer.body.resources as StatusChange[]).filter((e) => e.type === 'deployment.status_changed');
}

const statusOf = async (deploymentId: string): Promise<string> =>
  (await service.api('GET', `/v2/deployments/${deploymentId}`)).body.status;

test('min_scale 0 pauses the deployment (UNUSED, no instance, 503 saying so); back to 1 serves it again', async () => {
  const marker = `zero-${randomUUID()}`;
  const created = await service.api('POST', '/v2/deployments', {
    name: 'paused-agent',
    source: 'internal_source',
    source_config: { resource_spec: { min_scale: 1 } },
    source_revision_config: {
      source_tarball_path: await uploadApp(service, app(marker, { VERSION: 'one' })),
      framework_config_path: 'slipway.json',
    },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const id: string = created.body.id;
  const revision = await waitForRevision(service, id, created.body.latest_revision_id);
  assert.equal(revision.status, 'DEPLOYED', JSON.stringify(revision));
  const url: string = (await service.api('GET', `/v2/deployments/${id}`)).body.source_config.custom_url;
  const slug = new URL(url).hostname.split('.')[0]!;
  assert.equal(await statusOf(id), 'READY');
  assert.equal((await requestApp(service, url, '/')).status, 200);
  assert.equal((await processesMarked(marker)).length, 1);

  const paused = await service.api('PATCH', `/v2/deployments/${id}`, {
    source_config: { resource_spec: { min_scale: 0 } },
  });
  assert.equal(paused.status, 200, JSON.stringify(paused.body));
  assert.equal(paused.body.latest_revision_id, revision.id, 'no revision is made');
  await eventually('the deployment to be UNUSED', async () => (await statusOf(id)) === 'UNUSED');
  const toUnused = (await statusChanges(id)).filter((e) => e.to_status === 'UNUSED').at(-1);
  assert.deepEqual([toUnused!.from_status, toUnused!.data.reason], ['READY', 'scaled_to_zero']);
  assert.equal(service.edge.targets(slug).length, 0);
  await eventually('its process to be gone', async () => (await processesMarked(marker)).length === 0);
  const answer = await requestApp(service, url, '/');
  assert.equal(answer.status, 503, answer.body);
  const body = JSON.parse(answer.body);
  assert.equal(body.code, 'unavailable');
  assert.match(body.detail, /is scaled to zero: resource_spec\.min_scale is 0/);

  const resumed = await service.api('PATCH', `/v2/deployments/${id}`, {
    source_config: { resource_spec: { min_scale: 1 } },
  });
  assert.equal(resumed.status, 200, JSON.stringify(resumed.body));
  await eventually('the deployment to be READY again', async () => (await statusOf(id)) === 'READY');
  const toReady = (await statusChanges(id)).filter((e) => e.to_status === 'READY').at(-1);
  assert.deepEqual([toReady!.from_status, toReady!.data.reason], ['UNUSED', 'scaled_up']);
  assert.equal((await requestApp(service, url, '/')).status, 200);
  assert.equal((await processesMarked(marker)).length, 1);
  const revisions = await service.api('GET', `/v2/deployments/${id}/revisions`);
  assert.equal(revisions.body.resources.length, 1);
});

test('a revision deployed while min_scale is 0 is health-checked, then paused; a broken one fails', async () => {
  const marker = `zero-${randomUUID()}`;
  const created = await service.api('POST', '/v2/deployments', {
    name: 'born-paused',
    source: 'internal_source',
    source_config: { resource_spec: { min_scale: 0 } },
    source_revision_config: {
      source_tarball_path: await uploadApp(service, app(marker, { VERSION: 'one' })),
      framework_config_path: 'slipway.json',
    },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const id: string = created.body.id;
  const revision = await waitForRevision(service, id, created.body.latest_revision_id);
  assert.equal(revision.status, 'DEPLOYED', JSON.stringify(revision));
  await eventually('the deployment to be UNUSED', async () => (await statusOf(id)) === 'UNUSED');
  const changes = (await statusChanges(id)).map((e) => `${e.from_status}->${e.to_status}:${e.data.reason ?? ''}`);
  assert.ok(changes.includes('READY->UNUSED:scaled_to_zero'), changes.join(', '));
  await eventually('its process to be gone', async () => (await processesMarked(marker)).length === 0);
  const log = await eventually('the pause in the deploy log', async () => {
    const lines = await revisionLog(service, id, revision.id, 'deploy');
    return lines.some((line) => /Now running 0 web instance\(s\)/.test(line)) ? lines : null;
  });
  assert.ok(
    log.some((line) => /Health check passed/.test(line)),
    log.join('\n'),
  );
  const url: string = (await service.api('GET', `/v2/deployments/${id}`)).body.source_config.custom_url;
  assert.equal((await requestApp(service, url, '/')).status, 503);

  // A broken revision fails its health check although nothing would serve it.
  const broken = await service.api('PATCH', `/v2/deployments/${id}`, {
    source_revision_config: {
      source_tarball_path: await uploadApp(service, app(marker, { VERSION: 'two', BROKEN: 'yes' })),
      framework_config_path: 'slipway.json',
    },
  });
  assert.equal(broken.status, 200, JSON.stringify(broken.body));
  const failed = await waitForRevision(service, id, broken.body.latest_revision_id);
  assert.equal(failed.status, 'DEPLOY_FAILED', JSON.stringify(failed));
  assert.equal(await statusOf(id), 'UNUSED');
});
