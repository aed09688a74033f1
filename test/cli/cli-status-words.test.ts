/**
 * Status words that would read as wrong on their own: a deployment whose only revision failed to
 * build, or whose listener has not picked it up, is AWAITING_DATABASE by the interface's values.
 * `slipway status` (= `deployments get`) and `slipway ls` keep the value and say why. Run as a child
 * process against a real service.
 */
import assert from 'node:assert/strict';
import { after, before } from 'node:test';
import { ADMIN_KEY } from '../helpers.ts';
import { startTestService, uploadApp, waitForRevision, type TestService } from '../dataplane/data-plane-harness.ts';
import { cliUser, type CliUser } from './cli-runner.ts';
import { test } from '../support/limited-test.ts';

let service: TestService;
let user: CliUser;
before(async () => {
  service = await startTestService();
  user = await cliUser({ SLIPWAY_URL: service.base, SLIPWAY_API_KEY: ADMIN_KEY });
});
after(async () => {
  await user.remove();
  await service.close();
});

test('a deployment whose only revision failed to build says so, not just "awaiting database"', async () => {
  // Made through the API, as another client would: the CLI itself would refuse this app config.
  const tarball = await uploadApp(service, { 'slipway.json': '{"database": "yes"}', 'main.py': '' });
  const created = await service.api('POST', '/v2/deployments', {
    name: 'never-built',
    source: 'internal_source',
    source_revision_config: { source_tarball_path: tarball, framework_config_path: 'slipway.json' },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const revision = await waitForRevision(service, created.body.id, created.body.latest_revision_id);
  assert.equal(revision.status, 'BUILD_FAILED');

  const shown = await user.run(['status', 'never-built']);
  assert.equal(shown.code, 0, shown.stderr);
  assert.match(shown.stdout, /status:\s+AWAITING_DATABASE\n/);
  const short = String(created.body.latest_revision_id).slice(0, 8);
  assert.match(
    shown.stdout,
    new RegExp(
      `why:\\s+latest revision ${short} BUILD_FAILED \\(invalid_app_config\\): slipway\\.json: database must be true or false`,
    ),
  );
  const json = JSON.parse((await user.run(['status', 'never-built', '--json'])).stdout) as { status_detail: string };
  assert.match(json.status_detail, /^latest revision .* BUILD_FAILED/);

  const listed = await user.run(['ls']);
  assert.equal(listed.code, 0, listed.stderr);
  assert.match(listed.stdout, /^NAME\s+STATUS\s+WHY/);
  assert.match(
    listed.stdout,
    /never-built\s+AWAITING_DATABASE\s+latest revision \w{8} BUILD_FAILED \(invalid_app_config\)/,
  );
});

test('a deployment that waits for its listener names the listener, and that its agent never called in', async () => {
  const registered = await user.run(['listeners', 'create', 'prod-eu-1', '--namespace', 'agents']);
  assert.equal(registered.code, 0, registered.stderr);
  const queued = await user.run([
    'deploy',
    '--image',
    'registry.example.com/agent:1.4',
    '--listener',
    'prod-eu-1',
    '--name',
    'on-cluster',
    '--no-wait',
  ]);
  assert.equal(queued.code, 0, queued.stderr);

  const shown = await user.run(['status', 'on-cluster']);
  assert.equal(shown.code, 0, shown.stderr);
  assert.match(shown.stdout, /status:\s+AWAITING_DATABASE\n/);
  assert.match(shown.stdout, /why:\s+waiting for listener prod-eu-1, whose agent has never called in/);
  const listed = await user.run(['ls']);
  assert.match(listed.stdout, /on-cluster\s+AWAITING_DATABASE\s+waiting for listener prod-eu-1/);
});
