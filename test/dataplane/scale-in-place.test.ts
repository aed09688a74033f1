/**
 * A patch of `source_config.resource_spec` alone makes no revision and is applied to the running app
 * in place: the example app goes from one web instance to two and back under a steady stream of
 * requests (none fails), each change is a `deployment.scaled` event and lines in the revision's
 * deploy log, and a restarted service starts the app with the deployment's current counts. Worker
 * instances follow `queue_min_scale`; new web instances that fail their health check are stopped and
 * the app keeps what it ran.
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before } from 'node:test';
import { fileURLToPath } from 'node:url';
import {
  FINAL,
  requestApp,
  revisionLog,
  startTestService,
  uploadApp,
  writeApp,
  waitForRevision,
  type TestService,
} from './data-plane-harness.ts';
import { eventually } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';

const EXAMPLE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../examples/agent-app');

let service: TestService;
before(async () => {
  service = await startTestService();
});
after(async () => {
  await service.close();
});

interface Event {
  type: string;
  data: { revision_id?: string; from?: { web: number; worker: number }; to?: { web: number; worker: number } };
}

async function scaledEvents(deploymentId: string): Promise<Event[]> {
  const answer = await service.api('GET', `/v2/deployments/${deploymentId}/events?limit=100`);
  assert.equal(answer.status, 200, JSON.stringify(answer.body));
  return (answer.body.resources as Event[]).filter((e) => e.type.startsWith('deployment.scale'));
}

/** The ports the app said it listens on in its deploy log, after the last line matching `since`. */
async function listeningPorts(deploymentId: string, revisionId: string, since: RegExp): Promise<string[]> {
  const lines = await revisionLog(service, deploymentId, revisionId, 'deploy');
  const start = lines.map((line) => since.test(line)).lastIndexOf(true);
  return lines
    .slice(start)
    .map((line) => /listening on http:\/\/[^:]+:(\d+)/.exec(line)?.[1])
    .filter((port): port is string => port !== undefined);
}

const lastLine = (lines: string[], pattern: RegExp): string => lines.filter((line) => pattern.test(line)).at(-1) ?? '';

/** Requests from four clients at once until stopped; counts what failed. */
function steadyLoad(url: string): { stop(): Promise<{ served: number; failures: number }> } {
  let keepGoing = true;
  let served = 0;
  let failures = 0;
  const clients = Array.from({ length: 4 }, async () => {
    while (keepGoing) {
      const answer = await requestApp(service, url, '/').catch(() => ({ status: 0, body: '' }));
      if (answer.status === 200) served++;
      else failures++;
    }
  });
  return {
    async stop() {
      keepGoing = false;
      await Promise.all(clients);
      return { served, failures };
    },
  };
}

test('min_scale patched 1 → 2 → 1 scales the running app in place, without a revision or a failed request', async () => {
  const tarball = await uploadApp(service, EXAMPLE);
  const created = await service.api('POST', '/v2/deployments', {
    name: 'scaled-agent',
    source: 'internal_source',
    source_config: { resource_spec: { min_scale: 1 } },
    source_revision_config: { source_tarball_path: tarball, framework_config_path: 'slipway.json' },
    secrets: [{ name: 'GREETING', value: 'hello' }],
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const deploymentId: string = created.body.id;
  const revision = await waitForRevision(service, deploymentId, created.body.latest_revision_id);
  assert.equal(revision.status, 'DEPLOYED', JSON.stringify(revision));
  const url: string = (await service.api('GET', `/v2/deployments/${deploymentId}`)).body.source_config.custom_url;
  const slug = new URL(url).hostname.split('.')[0]!;
  await eventually(
    'the app to say it listens',
    async () => (await listeningPorts(deploymentId, revision.id, /Starting/)).length === 1,
  );
  assert.equal(service.edge.targets(slug).length, 1);

  // Up to two web instances while requests keep coming.
  let load = steadyLoad(url);
  const up = await service.api('PATCH', `/v2/deployments/${deploymentId}`, {
    source_config: { resource_spec: { min_scale: 2 } },
  });
  assert.equal(up.status, 200, JSON.stringify(up.body));
  assert.equal(up.body.latest_revision_id, revision.id, 'no revision is made');
  assert.equal(up.body.source_config.resource_spec.min_scale, 2);
  const [scaledUp] = await eventually('the deployment.scaled event to two', async () => {
    const events = await scaledEvents(deploymentId);
    return events.length === 1 ? events : null;
  });
  assert.equal(scaledUp!.type, 'deployment.scaled', JSON.stringify(scaledUp));
  assert.deepEqual(scaledUp!.data.from, { web: 1, worker: 0 });
  assert.deepEqual(scaledUp!.data.to, { web: 2, worker: 0 });
  assert.equal(scaledUp!.data.revision_id, revision.id);
  // The deploy log shows a second instance listening on its own port, and both get requests.
  const ports = await eventually('the second instance in the deploy log', async () => {
    const found = await listeningPorts(deploymentId, revision.id, /Starting/);
    return found.length === 2 ? found : null;
  });
  assert.notEqual(ports[0], ports[1]);
  assert.deepEqual(
    service.edge
      .targets(slug)
      .map((t) => String(t.port))
      .sort(),
    [...ports].sort(),
  );
  let counts = await load.stop();
  assert.equal(counts.failures, 0, `${counts.failures} of ${counts.served + counts.failures} requests failed`);
  assert.ok(counts.served > 0);

  // A restarted service starts the app with the deployment's counts, not those of the revision's snapshot.
  await service.stopWorker();
  await service.startWorker();
  await eventually('the app to be started again', async () => (await requestApp(service, url, '/')).status === 200);
  // The deploy log is written in batches: wait for the second start's line.
  const restarted = await eventually('the restart in the deploy log', async () => {
    const lines = await revisionLog(service, deploymentId, revision.id, 'deploy');
    return lines.filter((line) => /^Starting /.test(line)).length === 2 ? lines : null;
  });
  assert.match(lastLine(restarted, /^Starting /), /^Starting 2 web instance\(s\)/);
  await eventually('both instances routed', async () => service.edge.targets(slug).length === 2);

  // Back to one: the second instance is drained and stopped, and no request fails.
  load = steadyLoad(url);
  const down = await service.api('PATCH', `/v2/deployments/${deploymentId}`, {
    source_config: { resource_spec: { min_scale: 1 } },
  });
  assert.equal(down.status, 200, JSON.stringify(down.body));
  const scaledDown = await eventually('the deployment.scaled event back to one', async () => {
    const events = await scaledEvents(deploymentId);
    return events.length === 2 ? events[1] : null;
  });
  assert.equal(scaledDown.type, 'deployment.scaled');
  assert.deepEqual(scaledDown.data.from, { web: 2, worker: 0 });
  assert.deepEqual(scaledDown.data.to, { web: 1, worker: 0 });
  counts = await load.stop();
  assert.equal(counts.failures, 0, `${counts.failures} of ${counts.served + counts.failures} requests failed`);
  assert.equal(service.edge.targets(slug).length, 1);
  // Written in order: once the last line is there, so is the drained instance's.
  const log = await eventually('the new count in the deploy log', async () => {
    const lines = await revisionLog(service, deploymentId, revision.id, 'deploy');
    return /Now running 1 web instance\(s\)$/.test(lastLine(lines, /^Now running/)) ? lines : null;
  });
  assert.ok(
    log.some((line) => /Web instance\(s\) web-1 drained and stopped/.test(line)),
    log.join('\n'),
  );

  // Still the one revision, serving.
  const revisions = await service.api('GET', `/v2/deployments/${deploymentId}/revisions`);
  assert.equal(revisions.body.resources.length, 1);
  const deployment = (await service.api('GET', `/v2/deployments/${deploymentId}`)).body;
  assert.equal(deployment.status, 'READY');
  assert.equal(deployment.active_revision_id, revision.id);
});

/**
 * Only the first web instance ever started can run: any other exits at once (it finds the port of the
 * first in a file of the deployment's own directory, SLIPWAY_DATA_DIR). Its worker prints a line and stays.
 */
const ONE_WEB_ONLY = {
  'package.json': JSON.stringify({ name: 'one-web', private: true, type: 'module' }),
  'server.js': `
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
const marker = path.join(process.env.SLIPWAY_DATA_DIR, 'first-port');
if (fs.existsSync(marker) && fs.readFileSync(marker, 'utf8') !== process.env.PORT) {
  console.log('another web instance runs already; exiting');
  process.exit(4);
}
fs.writeFileSync(marker, process.env.PORT);
http.createServer((req, res) => res.end('ok')).listen(Number(process.env.PORT), process.env.HOST);
`,
  'worker.js': `console.log('queue worker ' + process.pid + ' ready'); setInterval(() => {}, 60_000);`,
  'slipway.json': JSON.stringify({
    start: 'node server.js',
    worker: 'node worker.js',
    health_check_path: '/',
    database: false,
  }),
};

test('queue_min_scale starts and stops worker instances; web instances that fail their health check are stopped and the app keeps serving', async () => {
  const tarball = await uploadApp(service, await writeApp(ONE_WEB_ONLY));
  const created = await service.api('POST', '/v2/deployments', {
    name: 'queue-app',
    source: 'internal_source',
    source_revision_config: { source_tarball_path: tarball, framework_config_path: 'slipway.json' },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const deploymentId: string = created.body.id;
  const revision = await waitForRevision(service, deploymentId, created.body.latest_revision_id, FINAL);
  assert.equal(revision.status, 'DEPLOYED', JSON.stringify(revision));
  const url: string = (await service.api('GET', `/v2/deployments/${deploymentId}`)).body.source_config.custom_url;

  const patch = async (resourceSpec: Record<string, number>) => {
    const answer = await service.api('PATCH', `/v2/deployments/${deploymentId}`, {
      source_config: { resource_spec: resourceSpec },
    });
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
  };
  const nthEvent = (n: number) =>
    eventually(`scale event ${n}`, async () => {
      const events = await scaledEvents(deploymentId);
      return events.length >= n ? events[n - 1] : null;
    });

  await patch({ queue_min_scale: 3 });
  const workersUp = await nthEvent(1);
  assert.equal(workersUp.type, 'deployment.scaled');
  assert.deepEqual(workersUp.data.from, { web: 1, worker: 1 });
  assert.deepEqual(workersUp.data.to, { web: 1, worker: 3 });
  await eventually('three workers saying they are ready', async () => {
    const lines = await revisionLog(service, deploymentId, revision.id, 'deploy');
    return lines.filter((line) => /queue worker \d+ ready/.test(line)).length === 3;
  });

  await patch({ queue_min_scale: 0 });
  const workersDown = await nthEvent(2);
  assert.deepEqual(workersDown.data.to, { web: 1, worker: 0 });
  await eventually('the stopped workers in the deploy log', async () =>
    (await revisionLog(service, deploymentId, revision.id, 'deploy')).some((line) =>
      /Worker instance\(s\) worker-0, worker-1, worker-2 stopped/.test(line),
    ),
  );

  // A second web instance cannot start here: the change fails, and the first keeps serving alone.
  await patch({ queue_min_scale: 0, min_scale: 2 });
  const failed = await nthEvent(3);
  assert.equal(failed.type, 'deployment.scale_failed', JSON.stringify(failed));
  assert.deepEqual(failed.data.to, { web: 2, worker: 0 });
  assert.match((failed.data as { message: string }).message, /keeps running 1 web instance/);
  assert.equal((await requestApp(service, url, '/')).status, 200);
  const slug = new URL(url).hostname.split('.')[0]!;
  assert.equal(service.edge.targets(slug).length, 1);
  const deployment = (await service.api('GET', `/v2/deployments/${deploymentId}`)).body;
  assert.equal(deployment.status, 'READY');
  assert.equal(deployment.latest_revision_id, revision.id);
});
