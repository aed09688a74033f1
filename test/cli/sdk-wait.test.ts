/**
 * The client's wait and follow helpers against a real service with its data plane: they ride the log's
 * event stream, seeing every status the revision passes through and the build output as it comes, and
 * return the revision in its final state.
 */
import assert from 'node:assert/strict';
import { after, before } from 'node:test';
import { SlipwayClient, type LogEvent, type RevisionStatus } from '@slipway/sdk';
import { ADMIN_KEY } from '../helpers.ts';
import { startTestService, uploadApp, type TestService } from '../dataplane/data-plane-harness.ts';
import { test } from '../support/limited-test.ts';

let service: TestService;
let client: SlipwayClient;
before(async () => {
  service = await startTestService();
  client = new SlipwayClient({ baseUrl: service.base, apiKey: ADMIN_KEY });
});
after(() => service.close());

test('waitForRevision follows a build to its failure, with its status changes and lines on the way', async () => {
  const tarball = await uploadApp(service, {
    'package.json': JSON.stringify({ name: 'w', version: '1.0.0', scripts: { start: 'node server.js' } }),
    'slipway.json': JSON.stringify({ build: 'echo step one && echo step two && exit 7' }),
  });
  const deployment = await client.deployments.create({
    name: 'waits',
    source: 'internal_source',
    source_revision_config: { source_tarball_path: tarball, framework_config_path: 'slipway.json' },
  });
  const statuses: RevisionStatus[] = [];
  const lines: string[] = [];
  const revision = await client.waitForRevision(deployment.id, deployment.latest_revision_id!, {
    onStatus: (status) => statuses.push(status),
    onLine: (line) => lines.push(line.message),
  });
  assert.equal(revision.status, 'BUILD_FAILED');
  assert.equal(revision.failure_reason, 'build_command_failed');
  // The stream reports the status as it reads it (steps quicker than a read may be skipped): it starts
  // unfinished and ends with the failure.
  assert.ok(statuses.length >= 2, statuses.join(' '));
  assert.ok(!['BUILD_FAILED', 'DEPLOYED'].includes(statuses[0]!), statuses.join(' '));
  assert.equal(statuses.at(-1), 'BUILD_FAILED');
  assert.ok(lines.includes('step one') && lines.includes('step two'), lines.join('\n'));

  // On a final revision it answers at once.
  assert.equal((await client.waitForRevision(deployment.id, revision.id)).status, 'BUILD_FAILED');

  // Following the finished log from the start replays its lines, its status and its end.
  const events: LogEvent[] = [];
  for await (const event of client.logs.follow(deployment.id, revision.id)) events.push(event);
  assert.deepEqual(events.at(-1), { kind: 'end', status: 'BUILD_FAILED' });
  assert.ok(events.some((e) => e.kind === 'line' && e.line.message === 'step two'));
  // A cursor resumes after the line it names.
  const stepOne = events.find(
    (e): e is Extract<LogEvent, { kind: 'line' }> => e.kind === 'line' && e.line.message === 'step one',
  );
  const resumed: string[] = [];
  for await (const event of client.logs.follow(deployment.id, revision.id, { cursor: stepOne!.cursor! }))
    if (event.kind === 'line') resumed.push(event.line.message);
  assert.equal(resumed[0], 'step two');
});

test('waitForRevision returns a container revision that the own data plane cannot run', async () => {
  const deployment = await client.deployments.create({
    name: 'image',
    source: 'internal_container',
    source_revision_config: { image_uri: 'ghcr.io/acme/agent:1.0' },
  });
  const revision = await client.waitForRevision(deployment.id, deployment.latest_revision_id!);
  assert.equal(revision.status, 'DEPLOY_FAILED');
  assert.equal(revision.failure_reason, 'container_runtime_unavailable');
});
