/**
 * After a restart the worker starts again the apps that should run here (adoption). An app whose health
 * check hangs after the restart must not hold up every other tenant: a new revision is claimed and
 * deployed while that app is still being waited for. What the old code did: adoption ran inside the
 * worker's pass, one app at a time, each waiting for its health check (here 30 s), and no revision was
 * claimed meanwhile: the new deployment waited until the hanging app was given up.
 */
import assert from 'node:assert/strict';
import { after, before } from 'node:test';
import { startTestService, uploadApp, waitForRevision, type TestService } from './data-plane-harness.ts';
import { eventually } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';

let service: TestService;

before(async () => {
  service = await startTestService();
});
after(async () => {
  await service?.close();
});

/** Answers its health check on its first start; on any later one (a marker in its data) never answers. */
const HANGS_AFTER_RESTART = String.raw`
const fs = require('node:fs');
const path = require('node:path');
const marker = path.join(process.env.SLIPWAY_DATA_DIR, 'started-once');
const again = fs.existsSync(marker);
fs.writeFileSync(marker, 'x');
require('node:http')
  .createServer((q, s) => { if (!again) s.end('ok'); })
  .listen(Number(process.env.PORT), process.env.HOST);
`;

const ANSWERS = `require('node:http').createServer((q, s) => s.end('ok')).listen(Number(process.env.PORT), process.env.HOST);`;

async function create(name: string, server: string): Promise<{ id: string; revisionId: string }> {
  const tarball = await uploadApp(service, {
    'package.json': JSON.stringify({ name, private: true }),
    'server.cjs': server,
    'slipway.json': JSON.stringify({ install: null, build: null, start: 'node server.cjs', health_check_path: '/' }),
  });
  const created = await service.api('POST', '/v2/deployments', {
    name,
    source: 'internal_source',
    source_revision_config: { source_tarball_path: tarball, framework_config_path: 'slipway.json' },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  return { id: created.body.id, revisionId: created.body.latest_revision_id };
}

test('a restart with an app whose health check hangs still claims and deploys a new revision meanwhile', async () => {
  const hanging = await create('hangs-after-restart', HANGS_AFTER_RESTART);
  assert.equal((await waitForRevision(service, hanging.id, hanging.revisionId)).status, 'DEPLOYED');

  await service.stopWorker();
  await service.startWorker();
  // The worker is starting the hanging app again (its health check will run out of time).
  await eventually('the hanging app to be started again', async () => {
    const events = await service.api(
      'GET',
      `/v2/deployments/${hanging.id}/revisions/${hanging.revisionId}/logs?type=deploy&limit=1000`,
    );
    return (
      events.status === 200 &&
      (events.body.lines as { message: string }[]).filter((l) => /^Starting /.test(l.message)).length === 2
    );
  });

  const fresh = await create('fresh-after-restart', ANSWERS);
  const deployed = await waitForRevision(service, fresh.id, fresh.revisionId);
  assert.equal(deployed.status, 'DEPLOYED', JSON.stringify(deployed));
  // Meanwhile the hanging app was still being waited for: it has not been given up yet.
  const stillWaited = await service.api('GET', `/v2/deployments/${hanging.id}`);
  assert.notEqual(
    stillWaited.body.status,
    'UNKNOWN',
    'the new revision was deployed only after the hanging app was given up',
  );

  // And it is given up in the end, with the reason.
  await eventually('the hanging app to be reported', async () => {
    const deployment = await service.api('GET', `/v2/deployments/${hanging.id}`);
    return deployment.body.status === 'UNKNOWN';
  });
});
