/**
 * A tenant squatting the port another deployment's instance is given, on a data plane whose apps share
 * the host's network (no slirp4netns; SLIPWAY_SANDBOX=none here, where each deployment runs as a uid of
 * its own). The squatter (another user's process) binds the port in the moment between the data plane
 * choosing it and the instance listening, and answers every request 200.
 *
 * The invariant: a port answered by another user's process never makes an instance healthy, so the
 * deployment's URL is never routed to the squatter; the revision fails saying that another user holds
 * its port. (With apps running as the service's own user, nothing tells them apart: docs/data-plane.md.)
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import http from 'node:http';
import { after, before } from 'node:test';
import {
  requestApp,
  startTestService,
  uploadApp,
  waitForRevision,
  type TestService,
} from '../dataplane/data-plane-harness.ts';
import { eventually } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';

let service: TestService;
const squatters: http.Server[] = [];

before(async () => {
  service = await startTestService({ SLIPWAY_SANDBOX: 'none', SLIPWAY_HEALTH_TIMEOUT_SECONDS: '20' });
});
after(async () => {
  for (const server of squatters) server.close();
  await service?.close();
});

/** The PORT of a running process of the deployment, from its environment (/proc, read as root). */
function instancePort(deploymentId: string): number | null {
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const env = readFileSync(`/proc/${entry}/environ`, 'utf8').split('\0');
      if (!env.includes(`SLIPWAY_DEPLOYMENT_ID=${deploymentId}`)) continue;
      const port = env.find((line) => line.startsWith('PORT='));
      if (port) return Number(port.slice('PORT='.length));
    } catch {
      // Ended meanwhile.
    }
  }
  return null;
}

test("a port squatted by another user's process never makes the instance healthy: the revision fails naming it", async () => {
  const tarball = await uploadApp(service, {
    'package.json': JSON.stringify({ name: 'slow-listener', private: true }),
    // It takes its time before it listens: the moment the squatter uses.
    'server.cjs': `setTimeout(() => require('node:http').createServer((q, s) => s.end('the real app')).listen(Number(process.env.PORT), process.env.HOST), 3000);`,
    'slipway.json': JSON.stringify({
      install: null,
      build: null,
      start: 'node server.cjs',
      health_check_path: '/healthz',
    }),
  });
  const created = await service.api('POST', '/v2/deployments', {
    name: 'slow-listener',
    source: 'internal_source',
    source_revision_config: { source_tarball_path: tarball, framework_config_path: 'slipway.json' },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const deploymentId: string = created.body.id;
  const port = await eventually("the instance's process to start", () => instancePort(deploymentId), { everyMs: 5 });
  const squatter = http.createServer((request, response) => response.end('squatted'));
  squatters.push(squatter);
  await new Promise<void>((resolve, reject) => {
    squatter.once('error', reject);
    squatter.listen(port, '127.0.0.1', resolve);
  });

  const revision = await waitForRevision(service, deploymentId, created.body.latest_revision_id);
  assert.equal(revision.status, 'DEPLOY_FAILED', `the squatter made it healthy: ${JSON.stringify(revision)}`);
  assert.equal(revision.failure_reason, 'health_check_failed');
  assert.match(revision.failure_message, new RegExp(`Port ${port} is held by another user's process \\(uid \\d+\\)`));
  const url: string | undefined = (await service.api('GET', `/v2/deployments/${deploymentId}`)).body.source_config
    ?.custom_url;
  if (url) assert.doesNotMatch((await requestApp(service, url, '/')).body, /squatted/);
});
