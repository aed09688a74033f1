/**
 * A failed health check says which mistake it is, as a user reads it on the revision: an app listening
 * on a port of its own choosing instead of $PORT, a health path that answers but not 2xx. And it says
 * "the previous revision keeps serving" only when one does (here, on a first deploy, none does).
 */
import assert from 'node:assert/strict';
import { after, before } from 'node:test';
import { startTestService, uploadApp, waitForRevision, type TestService } from './data-plane-harness.ts';
import { test } from '../support/limited-test.ts';

let service: TestService;

before(async () => {
  service = await startTestService({ SLIPWAY_HEALTH_TIMEOUT_SECONDS: '5' });
});
after(async () => {
  await service?.close();
});

/** Deploys a one-file app whose start command is `start`, and waits for its first revision to end. */
async function firstDeploy(name: string, server: string, sourceConfig: Record<string, unknown> = {}): Promise<any> {
  const tarball = await uploadApp(service, {
    'package.json': JSON.stringify({ name, private: true }),
    'server.cjs': server,
    'slipway.json': JSON.stringify({
      install: null,
      build: null,
      start: 'node server.cjs',
      health_check_path: '/healthz',
    }),
  });
  const created = await service.api('POST', '/v2/deployments', {
    name,
    source: 'internal_source',
    source_config: sourceConfig,
    source_revision_config: { source_tarball_path: tarball, framework_config_path: 'slipway.json' },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  return waitForRevision(service, created.body.id, created.body.latest_revision_id);
}

test('an app that listens on a port of its own: the failure names PORT, and no previous revision', async () => {
  const revision = await firstDeploy(
    'wrong-port',
    `require('node:http').createServer((q, s) => s.end('ok')).listen(18_999, process.env.HOST);`,
  );
  assert.equal(revision.status, 'DEPLOY_FAILED');
  assert.equal(revision.failure_reason, 'health_check_failed');
  assert.match(
    revision.failure_message,
    /Nothing was listening on port \d+: the app must listen on the port in its PORT variable/,
  );
  assert.doesNotMatch(revision.failure_message, /previous revision/);
});

test('a health path that answers 500: the failure says so', async () => {
  const revision = await firstDeploy(
    'answers-500',
    `require('node:http').createServer((q, s) => { s.statusCode = 500; s.end('no'); }).listen(Number(process.env.PORT), process.env.HOST);`,
  );
  assert.equal(revision.status, 'DEPLOY_FAILED');
  assert.match(revision.failure_message, /It answered 500 on \/healthz: the health path must answer 2xx/);
  assert.doesNotMatch(revision.failure_message, /previous revision/);
});

test('two instances that both miss the deadline: the failure names both, and what the first did wrong', async () => {
  const revision = await firstDeploy(
    'two-wrong-ports',
    `require('node:http').createServer((q, s) => s.end('ok')).listen(Number(process.env.PORT) + 1, process.env.HOST);`,
    { resource_spec: { min_scale: 2 } },
  );
  assert.equal(revision.status, 'DEPLOY_FAILED');
  assert.match(
    revision.failure_message,
    /within \d+ s on 2 of its instances \(web-0, web-1\)\. Instance web-0: Nothing was listening on port \d+/,
  );
});
