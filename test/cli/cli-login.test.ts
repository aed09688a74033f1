/**
 * `slipway login`, the key and the service address as a user meets them: the saved login (0600), the
 * environment winning over it for CI, and clear messages with their exit codes for a refused key and a
 * service that is not there. Real HTTP against a real service on PostgreSQL.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import { after, before, test } from 'node:test';
import { ADMIN_KEY, createTestApp, type TestApp } from '../helpers.ts';
import { cliUser, freePort, type CliUser } from './cli-runner.ts';

let t: TestApp;
let base: string;
let user: CliUser;
before(async () => {
  t = await createTestApp();
  await t.app.listen({ port: 0, host: '127.0.0.1' });
  const address = t.app.server.address();
  assert.ok(address && typeof address === 'object');
  base = `http://127.0.0.1:${address.port}`;
  user = await cliUser();
});
after(async () => {
  await user.remove();
  await t.close();
});

test('login checks the key, saves it readable by the user only, and later commands use it', async () => {
  const login = await user.run(['login', '--url', base, '--api-key', ADMIN_KEY]);
  assert.equal(login.code, 0, login.stderr);
  assert.match(login.stdout, /Logged in to http:\/\/127\.0\.0\.1:\d+/);
  const stat = await fs.stat(user.configFile);
  assert.equal(stat.mode & 0o777, 0o600);
  assert.deepEqual(JSON.parse(await fs.readFile(user.configFile, 'utf8')), {
    url: base,
    api_key: ADMIN_KEY,
    tenant_id: null,
  });

  const listed = await user.run(['deployments', 'ls', '--json']);
  assert.equal(listed.code, 0, listed.stderr);
  assert.deepEqual(JSON.parse(listed.stdout), []);
  const empty = await user.run(['deployments', 'ls']);
  assert.match(empty.stderr, /No deployments\./);

  // The key can come on stdin (a script must not put it on a command line).
  const piped = await user.run(['login', '--url', base], { input: `${ADMIN_KEY}\n` });
  assert.equal(piped.code, 0, piped.stderr);
  assert.equal((await fs.stat(user.configFile)).mode & 0o777, 0o600);

  // SLIPWAY_API_KEY wins over the saved key (CI): a wrong one is refused even though the file is fine.
  const overridden = await user.run(['deployments', 'ls'], {
    env: { SLIPWAY_API_KEY: 'slw_wrong_key_000000000000000000' },
  });
  assert.equal(overridden.code, 3);

  const logout = await user.run(['logout']);
  assert.equal(logout.code, 0);
  await assert.rejects(fs.stat(user.configFile), { code: 'ENOENT' });
  const notLoggedIn = await user.run(['deployments', 'ls']);
  assert.equal(notLoggedIn.code, 3);
  assert.match(notLoggedIn.stderr, /not logged in/);
  assert.match(notLoggedIn.stderr, /slipway login/);
});

test('a refused key is named as such, exits 3, and is not saved', async () => {
  const login = await user.run(['login', '--url', base, '--api-key', 'slw_not_a_real_key_00000000000000']);
  assert.equal(login.code, 3);
  assert.match(login.stderr, /refused the API key/);
  assert.doesNotMatch(login.stderr, /\n\s+at /, 'no stack trace');
  await assert.rejects(fs.stat(user.configFile), { code: 'ENOENT' });

  const command = await user.run(['listeners', 'ls'], {
    env: { SLIPWAY_URL: base, SLIPWAY_API_KEY: 'slw_not_a_real_key_00000000000000' },
  });
  assert.equal(command.code, 3);
  assert.match(command.stderr, /refused the API key/);
});

test('an unreachable service is named with its address and exits 5', async () => {
  const nowhere = `http://127.0.0.1:${await freePort()}`;
  const result = await user.run(['deployments', 'ls'], { env: { SLIPWAY_URL: nowhere, SLIPWAY_API_KEY: ADMIN_KEY } });
  assert.equal(result.code, 5);
  assert.match(result.stderr, new RegExp(`cannot reach ${nowhere.replace(/[.:/]/g, '\\$&')}: connection refused`));
  assert.doesNotMatch(result.stderr, /\n\s+at /);
  const login = await user.run(['login', '--url', nowhere, '--api-key', ADMIN_KEY]);
  assert.equal(login.code, 5);
  await assert.rejects(fs.stat(user.configFile), { code: 'ENOENT' });
});

test('listeners and keys are managed from the command line, with --json for scripts', async () => {
  const env = { SLIPWAY_URL: base, SLIPWAY_API_KEY: ADMIN_KEY };
  const created = await user.run(['listeners', 'create', 'prod-eu-1', '--namespace', 'agents', 'tools', '--json'], {
    env,
  });
  assert.equal(created.code, 0, created.stderr);
  const listener = JSON.parse(created.stdout) as { id: string; compute_config: { k8s_namespaces: string[] } };
  assert.deepEqual(listener.compute_config.k8s_namespaces, ['agents', 'tools']);
  const duplicate = await user.run(['listeners', 'create', 'prod-eu-1', '--namespace', 'agents'], { env });
  assert.equal(duplicate.code, 2);
  assert.match(duplicate.stderr, /refused the request/);
  const table = await user.run(['listeners', 'ls'], { env });
  assert.match(table.stdout, /prod-eu-1/);
  // Not on a terminal, a delete without --yes is refused rather than done unasked.
  const unconfirmed = await user.run(['listeners', 'rm', listener.id], { env });
  assert.equal(unconfirmed.code, 2);
  assert.equal(JSON.parse((await user.run(['listeners', 'ls', '--json'], { env })).stdout).length, 1);
  const removed = await user.run(['listeners', 'rm', 'prod-eu-1', '--yes'], { env });
  assert.equal(removed.code, 0, removed.stderr);
  assert.deepEqual(JSON.parse((await user.run(['listeners', 'ls', '--json'], { env })).stdout), []);

  const key = await user.run(['keys', 'create', 'ci-deploy', '--json'], { env });
  assert.equal(key.code, 0, key.stderr);
  const { key: value, id } = JSON.parse(key.stdout) as { key: string; id: string };
  const withNewKey = await user.run(['deployments', 'ls', '--json'], {
    env: { SLIPWAY_URL: base, SLIPWAY_API_KEY: value },
  });
  assert.equal(withNewKey.code, 0, withNewKey.stderr);
  const keys = JSON.parse((await user.run(['keys', 'ls', '--json'], { env })).stdout) as { id: string; name: string }[];
  assert.ok(keys.some((k) => k.id === id && k.name === 'ci-deploy'));
  const noConfirm = await user.run(['keys', 'revoke', 'ci-deploy'], { env });
  assert.equal(noConfirm.code, 2);
  assert.match(noConfirm.stderr, /--yes/);
  const revoked = await user.run(['keys', 'revoke', 'ci-deploy', '--yes'], { env });
  assert.equal(revoked.code, 0, revoked.stderr);
  const afterRevoke = await user.run(['deployments', 'ls'], { env: { SLIPWAY_URL: base, SLIPWAY_API_KEY: value } });
  assert.equal(afterRevoke.code, 3);

  const integrations = await user.run(['integrations', 'ls', '--json'], { env });
  assert.equal(integrations.code, 0, integrations.stderr);
  assert.deepEqual(JSON.parse(integrations.stdout), []);
});
