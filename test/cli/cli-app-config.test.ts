/**
 * `slipway deploy` checks the app config (slipway.json) in the folder before it creates or uploads
 * anything, with the rules and words of the service's data plane (one module: src/dataplane/
 * app-config-file.ts), and prints a mistake once. Run as a child process against a real service.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import path from 'node:path';
import { after, before } from 'node:test';
import { ADMIN_KEY } from '../helpers.ts';
import { startTestService, writeApp, type TestService } from '../dataplane/data-plane-harness.ts';
import { AppConfigError, loadAppConfig } from '../../src/dataplane/app-config-file.ts';
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

const PACKAGE = JSON.stringify({ name: 'agent', version: '1.0.0', scripts: { start: 'node server.js' } });

const occurrences = (text: string, part: string) => text.split(part).length - 1;

/** What the service's data plane says of the same folder (the words the CLI must use). */
async function serverMessage(dir: string, configPath = 'slipway.json'): Promise<string> {
  const error = await loadAppConfig(dir, configPath, {}).then(
    () => null,
    (e: unknown) => e,
  );
  assert.ok(error instanceof AppConfigError, `the service refuses it too: ${String(error)}`);
  return error.message;
}

async function deploymentNames(): Promise<string[]> {
  const list = await service.api('GET', '/v2/deployments?limit=100');
  return (list.body.resources as { name: string }[]).map((d) => d.name);
}

async function refusedBeforeCreating(files: Record<string, string>, name: string, expected: RegExp) {
  const dir = await writeApp({ 'package.json': PACKAGE, 'server.js': '', ...files });
  try {
    const result = await user.run(['deploy', dir, '--name', name]);
    assert.equal(result.code, 2, result.stderr);
    assert.match(result.stderr, expected);
    const message = await serverMessage(dir);
    assert.equal(occurrences(result.stderr, message), 1, `printed once, in the service's words:\n${result.stderr}`);
    assert.doesNotMatch(result.stderr, /Packing|Created deployment|\n\s+at /);
    assert.equal(result.stdout, '');
    assert.ok(!(await deploymentNames()).includes(name), 'no deployment was created');
    return result;
  } finally {
    await fs.rm(dir, { recursive: true, force: true });
  }
}

test('a JSON syntax error names the line and column, once, and nothing is created', async () => {
  const result = await refusedBeforeCreating(
    { 'slipway.json': '{\n  "start": "node server.js",\n  "build": "true"\n  "env": {}\n}\n' },
    'syntax-error',
    /slipway\.json is not valid JSON: line 4, column 3/,
  );
  assert.match(result.stderr, /docs\/app-config\.md/);
});

test('a rule of the service (an unknown field, a platform variable) is found locally, in its words', async () => {
  await refusedBeforeCreating(
    { 'slipway.json': JSON.stringify({ heath_check_path: '/healthz' }) },
    'unknown-field',
    /heath_check_path.*did you mean 'health_check_path'/,
  );
  await refusedBeforeCreating(
    { 'slipway.json': JSON.stringify({ env: { PORT: '80' } }) },
    'platform-env',
    /env\.PORT is set by the platform/,
  );
  // Unterminated input: the end of the file is where it is missing.
  await refusedBeforeCreating({ 'slipway.json': '{"start": "node server.js"' }, 'cut-short', /line 1, column 27/);
});

test('an existing deployment gets no new revision from a broken app config', async () => {
  const dir = await writeApp({ 'package.json': PACKAGE, 'server.js': '', 'slipway.json': '{}' });
  try {
    const queued = await user.run(['deploy', dir, '--name', 'kept-as-is', '--no-wait']);
    assert.equal(queued.code, 0, queued.stderr);
    const before = (await service.api('GET', '/v2/deployments?name=kept-as-is')).body.resources[0];
    await fs.writeFile(path.join(dir, 'slipway.json'), '{"database": "yes"}');
    const refused = await user.run(['deploy', dir, '--name', 'kept-as-is', '--no-wait']);
    assert.equal(refused.code, 2, refused.stderr);
    assert.equal(occurrences(refused.stderr, 'slipway.json: database must be true or false'), 1, refused.stderr);
    const after = (await service.api('GET', `/v2/deployments/${before.id}`)).body;
    assert.equal(after.latest_revision_id, before.latest_revision_id);
  } finally {
    await fs.rm(dir, { recursive: true, force: true });
  }
});

test('attacker: an app config that is a link out of the folder is refused without reading the target', async () => {
  const outside = await writeApp({ 'secret.json': '{"start": "cat /etc/shadow", "token": "s3cr3t-outside"}' });
  const dir = await writeApp({ 'package.json': PACKAGE, 'server.js': '' });
  await fs.symlink(path.join(outside, 'secret.json'), path.join(dir, 'slipway.json'));
  try {
    const result = await user.run(['deploy', dir, '--name', 'link-out']);
    assert.equal(result.code, 2, result.stderr);
    assert.match(result.stderr, /slipway\.json is a link that leads outside the source directory/);
    assert.doesNotMatch(result.stderr, /s3cr3t-outside|shadow/);
    assert.ok(!(await deploymentNames()).includes('link-out'));
  } finally {
    await fs.rm(dir, { recursive: true, force: true });
    await fs.rm(outside, { recursive: true, force: true });
  }
});

test('edge: a config larger than the service reads, and a binary one, are refused before the upload', async () => {
  const big = await writeApp({
    'package.json': PACKAGE,
    'server.js': '',
    'slipway.json': `{"start": "node server.js", "env": {"PAD": "${'x'.repeat(1024 * 1024)}"}}`,
  });
  try {
    const result = await user.run(['deploy', big, '--name', 'too-big']);
    assert.equal(result.code, 2, result.stderr);
    assert.match(result.stderr, /slipway\.json is larger than 1024 KiB/);
    assert.ok(result.stderr.length < 2000, 'the file is not quoted');
  } finally {
    await fs.rm(big, { recursive: true, force: true });
  }
  const binary = await writeApp({ 'package.json': PACKAGE, 'server.js': '', 'slipway.json': '\u0000\u0001\u0002' });
  try {
    const result = await user.run(['deploy', binary, '--name', 'binary']);
    assert.equal(result.code, 2, result.stderr);
    assert.match(result.stderr, /slipway\.json is not valid JSON: line 1, column 1/);
    assert.ok(!(await deploymentNames()).includes('binary'));
  } finally {
    await fs.rm(binary, { recursive: true, force: true });
  }
});
