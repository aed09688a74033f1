/**
 * `slipway deploy` and the commands around it, run as a child process against a real service (real
 * HTTP, real PostgreSQL, the local data plane building and running the app).
 */
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import path from 'node:path';
import { after, before } from 'node:test';
import { ADMIN_KEY } from '../helpers.ts';
import { requestApp, startTestService, writeApp, type TestService } from '../dataplane/data-plane-harness.ts';
import { ROOT, cliUser, type CliUser } from './cli-runner.ts';
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

const lastLine = (text: string) => text.trimEnd().split('\n').at(-1) ?? '';

test('deploy examples/agent-app ends with the stable URL, and the app answers there', async () => {
  const deployed = await user.run([
    'deploy',
    'examples/agent-app',
    '--name',
    'support-agent',
    '--secret',
    'GREETING=hello-from-cli',
  ]);
  assert.equal(deployed.code, 0, deployed.stderr);
  const url = lastLine(deployed.stdout);
  assert.match(url, /^http:\/\/support-agent-[0-9a-f]{8}\.localhost:\d+$/);
  // The progress display showed the build log and the final state on stderr. (States that last less
  // than the stream's read interval, BUILDING of a build without a command, may not be shown.)
  assert.match(deployed.stderr, /Extracting the uploaded source/);
  assert.match(deployed.stderr, /DEPLOYED|Deployed support-agent/);
  const home = await requestApp(service, url, '/');
  assert.equal(home.status, 200, home.body);
  assert.equal(JSON.parse(home.body).greeting, 'hello-from-cli');

  // What the user reads of it, each command on its own (side by side, as a user's terminals may).
  const [listed, shown, table, buildLog, scaleShown] = await Promise.all([
    user.run(['deployments', 'ls', '--json']),
    user.run(['--json', 'deployments', 'get', 'support-agent']),
    user.run(['deployments', 'ls']),
    user.run(['logs', 'support-agent', '--build']),
    user.run(['scale', 'support-agent']),
  ]);
  // --json output parses, for scripts.
  assert.equal(listed.code, 0, listed.stderr);
  const deployments = JSON.parse(listed.stdout) as { name: string; status: string; id: string }[];
  assert.deepEqual(
    deployments.map((d) => d.name),
    ['support-agent'],
  );
  assert.equal(JSON.parse(shown.stdout).latest_revision.status, 'DEPLOYED');
  assert.match(table.stdout, /^NAME\s+STATUS/);
  assert.match(table.stdout, /support-agent\s+READY/);

  // The build log, as the user reads it.
  assert.equal(buildLog.code, 0, buildLog.stderr);
  assert.match(buildLog.stdout, /Build finished/);

  // Scaling in place: no revision, the running app gets a second instance and keeps answering.
  assert.equal(lastLine(scaleShown.stdout), 'support-agent: 1 web instance(s)');
  const scaled = await user.run(['scale', 'support-agent', '--web', '2']);
  assert.equal(scaled.code, 0, scaled.stderr);
  assert.equal(lastLine(scaled.stdout), 'support-agent runs 2 web instance(s).');
  assert.equal((await requestApp(service, url, '/')).status, 200);
  const [rescaledShown, refused] = await Promise.all([
    user.run(['scale', 'support-agent']),
    user.run(['scale', 'support-agent', '--web', '1001']),
  ]);
  assert.equal(lastLine(rescaledShown.stdout), 'support-agent: 2 web instance(s)');
  assert.equal(refused.code, 2);
  assert.match(refused.stderr, /expected a whole number from 0 to 1000/);
  // --web 0 pauses it: its URL answers 503 until it is scaled up again.
  const paused = await user.run(['scale', 'support-agent', '--web', '0']);
  assert.equal(paused.code, 0, paused.stderr);
  assert.equal(lastLine(paused.stdout), 'support-agent runs 0 web instance(s).');
  assert.equal((await requestApp(service, url, '/')).status, 503);
  const resumed = await user.run(['scale', 'support-agent', '--web', '2']);
  assert.equal(resumed.code, 0, resumed.stderr);
  assert.equal((await requestApp(service, url, '/')).status, 200);

  // A second deploy of the same name patches it: one more revision; a new secret keeps the others.
  const again = await user.run([
    'deploy',
    'examples/agent-app',
    '--name',
    'support-agent',
    '--secret',
    'OTHER=1',
    '--json',
  ]);
  assert.equal(again.code, 0, again.stderr);
  const result = JSON.parse(again.stdout) as {
    url: string;
    revision: { id: string; status: string };
    deployment: { secrets: { name: string }[] };
  };
  assert.equal(result.url, url);
  assert.equal(result.revision.status, 'DEPLOYED');
  assert.deepEqual(result.deployment.secrets.map((s) => s.name).sort(), ['GREETING', 'OTHER']);
  assert.equal(JSON.parse((await requestApp(service, url, '/')).body).greeting, 'hello-from-cli');

  const revisions = JSON.parse((await user.run(['revisions', 'ls', 'support-agent', '--json'])).stdout) as {
    id: string;
    status: string;
  }[];
  assert.equal(revisions.length, 2);
  const first = revisions[1]!;

  // Roll back to the first revision by the start of its id: a third revision, followed to DEPLOYED.
  const rolled = await user.run(['rollback', first.id.slice(0, 8), '--deployment', 'support-agent']);
  assert.equal(rolled.code, 0, rolled.stderr);
  assert.equal(lastLine(rolled.stdout), url);
  const [revisionsAfter, scaleAfter] = await Promise.all([
    user.run(['revisions', 'ls', 'support-agent', '--json']),
    user.run(['scale', 'support-agent']),
  ]);
  assert.equal(JSON.parse(revisionsAfter.stdout).length, 3);
  // The first revision ran before `scale --web 2`: the rollback says what it restores, and keeps the
  // two instances (docs/lifecycle.md, "What a redeploy restores").
  assert.match(rolled.stderr, /Restored from it: the source, secrets, install and build commands, cpu and memory/);
  assert.match(rolled.stderr, /Kept: 2 web instance\(s\) \(change with: slipway scale support-agent\)/);
  assert.equal(lastLine(scaleAfter.stdout), 'support-agent: 2 web instance(s)');

  const removed = await user.run(['deployments', 'rm', 'support-agent', '--yes']);
  assert.equal(removed.code, 0, removed.stderr);
  // Deleted: being torn down (AWAITING_DELETE) or already gone.
  const gone = await user.run(['deployments', 'get', 'support-agent', '--json']);
  if (gone.code === 0) assert.equal(JSON.parse(gone.stdout).status, 'AWAITING_DELETE');
  else assert.equal(gone.code, 4, gone.stderr);
});

test('a failing build exits non-zero with the reason and the last log lines', async () => {
  const dir = await writeApp({
    'package.json': JSON.stringify({ name: 'broken', version: '1.0.0', scripts: { start: 'node server.js' } }),
    'slipway.json': JSON.stringify({
      build: 'echo compiling the agent && echo "error: missing module ./tools" >&2 && exit 3',
    }),
    'server.js': '',
  });
  try {
    const failed = await user.run(['deploy', dir, '--name', 'broken-agent']);
    assert.equal(failed.code, 1, failed.stderr);
    assert.match(failed.stderr, /BUILD_FAILED \(build_command_failed\)/);
    assert.match(failed.stderr, /error: missing module \.\/tools/);
    // Shown once, as the build log came: not repeated under the failure.
    const said = (text: string) => failed.stderr.split('\n').filter((line) => line.trim() === text).length;
    assert.equal(said('error: missing module ./tools'), 1, failed.stderr);
    assert.equal(said('compiling the agent'), 1, failed.stderr);
    assert.doesNotMatch(failed.stderr, /\n\s+at /, 'no stack trace');
    assert.equal(failed.stdout, '');
  } finally {
    await fs.rm(dir, { recursive: true, force: true });
  }
});

test('bad input is named, with a non-zero exit and no stack trace', async () => {
  const empty = await writeApp({ 'index.js': 'console.log(1)\n' });
  // Each refused on its own, so side by side.
  const [noConfig, notFolder, badSecret, unknown, badOption] = await Promise.all([
    user.run(['deploy', empty, '--name', 'no-config']),
    user.run(['deploy', path.join(ROOT, 'README.md')]),
    user.run(['deploy', 'examples/agent-app', '--secret', '1BAD=x']),
    user.run(['logs', 'no-such-agent']),
    user.run(['deployments', 'ls', '--frobnicate']),
  ]).finally(() => fs.rm(empty, { recursive: true, force: true }));
  assert.equal(noConfig.code, 2);
  assert.match(noConfig.stderr, /has no app config/);
  assert.equal(notFolder.code, 2);
  assert.match(notFolder.stderr, /is not a folder/);

  assert.equal(badSecret.code, 2);
  assert.match(badSecret.stderr, /--secret 1BAD/);

  assert.equal(unknown.code, 4);
  assert.match(unknown.stderr, /no deployment named 'no-such-agent'/);

  assert.equal(badOption.code, 2);
  assert.match(badOption.stderr, /unknown option '--frobnicate'/);

  for (const result of [badSecret, unknown, badOption]) assert.doesNotMatch(result.stderr, /\n\s+at /);
});
