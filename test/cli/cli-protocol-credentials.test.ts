/**
 * `slipway protocol-credentials create|ls|revoke` and the SDK's `protocolCredentials`, as a user runs
 * them against a real service (real HTTP and PostgreSQL): the credential printed once, lists that never
 * hold it, a deployment named by name or id. Attacker's view: a member key gets the API's refusal as a
 * clear message and changes nothing, another workspace's deployment is not found by name or id, and
 * the secret reaches no list, in a table or in JSON.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { SlipwayClient, SlipwayError, type ProtocolCredentialCreated } from '@slipway/sdk';
import { ADMIN_KEY, client, createTestApp, newWorkspace, type TestApp } from '../helpers.ts';
import { cliUser, type CliUser } from './cli-runner.ts';

let t: TestApp;
let base: string;
let user: CliUser;
let api: ReturnType<typeof client>;
before(async () => {
  t = await createTestApp();
  await t.app.listen({ port: 0, host: '127.0.0.1' });
  const address = t.app.server.address();
  assert.ok(address && typeof address === 'object');
  base = `http://127.0.0.1:${address.port}`;
  api = client(t.app);
  user = await cliUser({ SLIPWAY_URL: base, SLIPWAY_API_KEY: ADMIN_KEY });
});
after(async () => {
  await user.remove();
  await t.close();
});

const json = <T = any>(text: string): T => JSON.parse(text) as T;

async function createDeployment(as: ReturnType<typeof client>, name: string): Promise<string> {
  const made = await as.post('/v2/deployments', {
    name,
    source: 'internal_container',
    source_revision_config: { image_uri: 'reg.example.com/agent:1' },
  });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  return made.body.id;
}

async function activeCredentials(as: ReturnType<typeof client>, deploymentId: string) {
  const listed = await as.get(`/v2/deployments/${deploymentId}/protocol-credentials`);
  assert.equal(listed.status, 200, JSON.stringify(listed.body));
  return (listed.body.resources as { id: string; name: string; revoked_at: string | null }[]).filter(
    (c) => c.revoked_at === null,
  );
}

test('create prints the credential once, ls never shows it, revoke by name; the deployment by name or id', async () => {
  const deploymentId = await createDeployment(api, 'pc-agent');

  const created = await user.run(['protocol-credentials', 'create', 'pc-agent', '--name', 'claude-desktop']);
  assert.equal(created.code, 0, created.stderr);
  const secret = created.stdout.trim();
  assert.match(secret, /^slwp_[A-Za-z0-9_-]{43}$/, 'stdout holds the credential alone, for a script');
  assert.match(created.stderr, /Created protocol credential claude-desktop \(.+\) for pc-agent/);
  assert.match(created.stderr, /not shown again/);

  const asJson = await user.run(['--json', 'protocol-credentials', 'create', deploymentId]);
  assert.equal(asJson.code, 0, asJson.stderr);
  const second = json<{ id: string; name: string; credential: string; deployment_id: string }>(asJson.stdout);
  assert.match(second.credential, /^slwp_/);
  assert.equal(second.deployment_id, deploymentId);
  assert.equal(second.name, 'protocol credential', 'the name the service gives one without --name');

  const table = await user.run(['protocol-credentials', 'ls', 'pc-agent']);
  assert.equal(table.code, 0, table.stderr);
  assert.match(table.stdout, /^NAME\s+PREFIX\s+ID\s+CREATED\s+LAST USED\s+REVOKED/);
  assert.match(table.stdout, /claude-desktop\s+slwp_/);
  assert.match(table.stdout, new RegExp(second.id));
  const listed = await user.run(['protocol-credentials', 'list', deploymentId, '--json']);
  assert.equal(listed.code, 0, listed.stderr);
  const rows = json<{ id: string; name: string; credential_prefix: string }[]>(listed.stdout);
  assert.deepEqual(rows.map((r) => r.name).sort(), ['claude-desktop', 'protocol credential']);
  for (const output of [table.stdout, table.stderr, listed.stdout, listed.stderr]) {
    assert.ok(!output.includes(secret), 'the first credential is in no list');
    assert.ok(!output.includes(second.credential), 'the second credential is in no list');
  }

  // No terminal to ask at: nothing is revoked without --yes.
  const unconfirmed = await user.run(['protocol-credentials', 'revoke', 'pc-agent', 'claude-desktop']);
  assert.equal(unconfirmed.code, 2, unconfirmed.stderr);
  assert.match(unconfirmed.stderr, /not revoked \(confirm with --yes\)/);
  assert.equal((await activeCredentials(api, deploymentId)).length, 2);

  const revoked = await user.run(['protocol-credentials', 'revoke', 'pc-agent', 'claude-desktop', '--yes']);
  assert.equal(revoked.code, 0, revoked.stderr);
  assert.match(revoked.stdout, /Revoked protocol credential claude-desktop \(.+\) of pc-agent\./);
  const revokedById = await user.run(['--json', 'protocol-credentials', 'rm', deploymentId, second.id, '--yes']);
  assert.equal(revokedById.code, 0, revokedById.stderr);
  assert.deepEqual(json(revokedById.stdout), { id: second.id, revoked: true });
  assert.deepEqual(await activeCredentials(api, deploymentId), []);

  const empty = await user.run(['protocol-credentials', 'ls', 'pc-agent']);
  assert.equal(empty.code, 0, empty.stderr);
  assert.match(empty.stderr, /No protocol credentials of pc-agent\./);
  const all = await user.run(['protocol-credentials', 'ls', 'pc-agent', '--all', '--json']);
  assert.equal(all.code, 0, all.stderr);
  assert.equal(json<unknown[]>(all.stdout).length, 2);
  assert.ok(!all.stdout.includes(secret) && !all.stdout.includes(second.credential));

  const again = await user.run(['protocol-credentials', 'revoke', 'pc-agent', 'claude-desktop', '--yes']);
  assert.equal(again.code, 4, again.stderr);
  assert.match(
    again.stderr,
    /deployment 'pc-agent' has no active protocol credential with id or name 'claude-desktop'/,
  );
  assert.match(again.stderr, /slipway protocol-credentials ls pc-agent/);
});

test('a member key lists them, but creating and revoking get the refusal as a clear message and change nothing', async () => {
  const deploymentId = await createDeployment(api, 'pc-member');
  const made = await api.post(`/v2/deployments/${deploymentId}/protocol-credentials`, { name: 'kept' });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  const key = await client(t.app, t.orgKey).post('/v2/api-keys', {
    name: 'pc-member',
    role: 'member',
    workspace_id: t.workspaceId,
  });
  assert.equal(key.status, 201, JSON.stringify(key.body));
  const member = { env: { SLIPWAY_API_KEY: key.body.key as string } };

  const listed = await user.run(['protocol-credentials', 'ls', 'pc-member', '--json'], member);
  assert.equal(listed.code, 0, listed.stderr);
  assert.deepEqual(
    json<{ id: string }[]>(listed.stdout).map((c) => c.id),
    [made.body.id],
  );
  assert.ok(!listed.stdout.includes(made.body.credential));

  const create = await user.run(['protocol-credentials', 'create', 'pc-member', '--name', 'stolen'], member);
  assert.equal(create.code, 3, create.stderr);
  assert.match(create.stderr, /error: not allowed: This operation needs an admin API key\./);
  assert.equal(create.stdout, '', 'no credential on stdout');

  const revoke = await user.run(['protocol-credentials', 'revoke', 'pc-member', 'kept', '--yes'], member);
  assert.equal(revoke.code, 3, revoke.stderr);
  assert.match(revoke.stderr, /error: not allowed: This operation needs an admin API key\./);

  assert.deepEqual(
    (await activeCredentials(api, deploymentId)).map((c) => c.name),
    ['kept'],
    'nothing minted, nothing revoked',
  );
});

test("another workspace's deployment is not found by name or by id, and nothing is minted in it", async () => {
  const other = await newWorkspace(t, 'pc-other');
  const foreignId = await createDeployment(other.api, 'pc-foreign');
  const foreign = await other.api.post(`/v2/deployments/${foreignId}/protocol-credentials`, { name: 'theirs' });
  assert.equal(foreign.status, 201, JSON.stringify(foreign.body));

  for (const ref of ['pc-foreign', foreignId]) {
    for (const args of [
      ['protocol-credentials', 'create', ref, '--name', 'mine'],
      ['protocol-credentials', 'ls', ref],
      ['protocol-credentials', 'revoke', ref, foreign.body.id, '--yes'],
    ]) {
      const answer = await user.run(args);
      assert.equal(answer.code, 4, `${args.join(' ')}: ${answer.stderr}`);
      assert.match(answer.stderr, new RegExp(`error: no deployment named '${ref}' in this workspace`));
      assert.equal(answer.stdout, '');
    }
  }

  // The SDK, which takes the id as given, gets the service's 404 for each.
  const sdk = new SlipwayClient({ baseUrl: base, apiKey: ADMIN_KEY });
  for (const call of [
    () => sdk.protocolCredentials.create(foreignId, { name: 'mine' }),
    () => sdk.protocolCredentials.list(foreignId),
    () => sdk.protocolCredentials.revoke(foreignId, foreign.body.id),
  ])
    await assert.rejects(call(), (error: unknown) => error instanceof SlipwayError && error.status === 404);

  assert.deepEqual(
    (await activeCredentials(other.api, foreignId)).map((c) => c.name),
    ['theirs'],
    'nothing minted, nothing revoked',
  );
});

test('the SDK mints, lists page by page without the secret, and revokes', async () => {
  const deploymentId = await createDeployment(api, 'pc-sdk');
  const sdk = new SlipwayClient({ baseUrl: base, apiKey: ADMIN_KEY });
  const made: ProtocolCredentialCreated[] = [];
  for (const name of ['one', 'two', 'three']) made.push(await sdk.protocolCredentials.create(deploymentId, { name }));
  const unnamed = await sdk.protocolCredentials.create(deploymentId);
  assert.match(unnamed.credential, /^slwp_/);

  const listed = await sdk.protocolCredentials.list(deploymentId);
  assert.deepEqual(
    listed.map((c) => c.name),
    ['protocol credential', 'three', 'two', 'one'],
    'newest first',
  );
  assert.ok(listed.every((c) => !('credential' in c)));
  const paged = [];
  for await (const page of sdk.protocolCredentials.pages(deploymentId, { limit: 3 })) paged.push(page.resources.length);
  assert.deepEqual(paged, [3, 1]);

  await sdk.protocolCredentials.revoke(deploymentId, made[0]!.id);
  const afterRevoke = await sdk.protocolCredentials.list(deploymentId);
  assert.ok(afterRevoke.find((c) => c.id === made[0]!.id)?.revoked_at, 'revoked ones stay listed, with revoked_at');
  await assert.rejects(
    sdk.protocolCredentials.revoke(deploymentId, made[0]!.id),
    (error: unknown) => error instanceof SlipwayError && error.status === 404,
  );
});
