/**
 * Idempotent retries (docs/api.md, "Idempotent retries"), over real HTTP: a POST or PATCH with an
 * Idempotency-Key is done once per key, whatever the number of retries and however they overlap. Time
 * passes by a clock the tests move (a key's 24 hours, a lease, a retry's wait), never by waiting.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import { after, before, describe } from 'node:test';
import { IDEMPOTENCY_WAIT_MS } from '../../src/http/idempotency.ts';
import { createLogger } from '../../src/logger.ts';
import { startRetentionSweeper } from '../../src/pipeline/retention.ts';
import { IDEMPOTENCY_KEY_TTL_HOURS, IDEMPOTENCY_LEASE_SECONDS } from '../../src/store/idempotency-keys.ts';
import { createTestClock } from '../support/clock.ts';
import { ADMIN_KEY, createTestApp, type TestApp, listen } from '../support/harness.ts';
import { httpCaller, type HttpCall } from '../support/http-caller.ts';
import { test } from '../support/limited-test.ts';
import { eventually } from '../support/wait.ts';

const HOUR_MS = 60 * 60 * 1000;

let t: TestApp;
let base: string;
let call: HttpCall;
const clock = createTestClock();

before(async () => {
  t = await createTestApp({}, { now: clock.now });
  base = await listen(t.app);
  call = httpCaller(base);
});
after(() => t.close());

const container = (name: string, image = 'registry.example.com/agent:1.0.0') => ({
  name,
  source: 'internal_container',
  source_revision_config: { image_uri: image },
});
const withKey = (key: string) => ({ 'idempotency-key': key });

async function deploymentsNamed(name: string, key?: string): Promise<{ id: string }[]> {
  const listed = await call('GET', `/v2/deployments?name=${name}&limit=100`, { key });
  assert.equal(listed.status, 200, listed.text);
  return listed.body.resources;
}

async function revisionCount(deploymentId: string): Promise<number> {
  const listed = await call('GET', `/v2/deployments/${deploymentId}/revisions?limit=100`);
  assert.equal(listed.status, 200, listed.text);
  return listed.body.resources.length;
}

describe('a create with an Idempotency-Key', () => {
  test('parallel requests with one key make exactly one deployment, and every client gets its answer', async () => {
    const key = randomUUID();
    const answers = await Promise.all(
      Array.from({ length: 8 }, () =>
        call('POST', '/v2/deployments', { body: container('parallel-create'), headers: withKey(key) }),
      ),
    );
    for (const answer of answers) assert.equal(answer.status, 201, answer.text);
    const first = answers[0]!;
    for (const answer of answers) {
      assert.equal(answer.text, first.text, 'every client gets the same body');
      assert.equal(answer.headers.get('etag'), first.headers.get('etag'));
    }
    assert.equal(
      answers.filter((a) => a.headers.get('idempotent-replayed') === 'true').length,
      7,
      'all but the one that did the work are replays',
    );
    const made = await deploymentsNamed('parallel-create');
    assert.deepEqual(
      made.map((d) => d.id),
      [first.body.id],
    );
    assert.equal(await revisionCount(first.body.id), 1);
  });

  test('a retry after the first finished gets the same answer again, marked as a replay', async () => {
    const key = randomUUID();
    const first = await call('POST', '/v2/deployments', { body: container('retried-create'), headers: withKey(key) });
    assert.equal(first.status, 201, first.text);
    assert.equal(first.headers.get('idempotent-replayed'), null);
    // Key order and whitespace do not make another request.
    const { source_revision_config, name, source } = container('retried-create');
    const retry = await call('POST', '/v2/deployments', {
      body: { source_revision_config, source, name },
      headers: withKey(key),
    });
    assert.equal(retry.status, 201);
    assert.equal(retry.text, first.text);
    assert.equal(retry.headers.get('idempotent-replayed'), 'true');
    assert.match(retry.headers.get('content-type') ?? '', /^application\/json/);
    assert.equal(retry.headers.get('etag'), first.headers.get('etag'));
    assert.equal((await deploymentsNamed('retried-create')).length, 1);
  });

  test('the same key with another body, path or method is 422 idempotency_key_mismatch and does nothing', async () => {
    const key = randomUUID();
    const first = await call('POST', '/v2/deployments', { body: container('mismatch-a'), headers: withKey(key) });
    assert.equal(first.status, 201, first.text);
    const other = await call('POST', '/v2/deployments', { body: container('mismatch-b'), headers: withKey(key) });
    assert.equal(other.status, 422);
    assert.equal(other.body.code, 'idempotency_key_mismatch');
    assert.deepEqual(other.body.detail[0].loc, ['header', 'idempotency-key']);
    assert.equal((await deploymentsNamed('mismatch-b')).length, 0);

    const patch = await call('PATCH', `/v2/deployments/${first.body.id}`, {
      body: { source_config: { build_command: 'make' } },
      headers: withKey(key),
    });
    assert.equal(patch.status, 422);
    assert.equal(patch.body.code, 'idempotency_key_mismatch');
    assert.equal(
      (await call('GET', `/v2/deployments/${first.body.id}`)).text,
      first.text,
      'the deployment did not change',
    );
  });

  test("another workspace's request with the same key is its own request", async () => {
    const workspace = await call('POST', '/v2/workspaces', { key: t.orgKey, body: { name: 'second-workspace' } });
    assert.equal(workspace.status, 201, workspace.text);
    const otherKey = await call('POST', '/v2/api-keys', {
      key: t.orgKey,
      headers: { 'x-tenant-id': workspace.body.id },
      body: { name: 'second', role: 'admin', workspace_id: workspace.body.id },
    });
    assert.equal(otherKey.status, 201, otherKey.text);

    const key = randomUUID();
    const mine = await call('POST', '/v2/deployments', { body: container('shared-key'), headers: withKey(key) });
    const theirs = await call('POST', '/v2/deployments', {
      key: otherKey.body.key,
      body: container('shared-key'),
      headers: withKey(key),
    });
    assert.equal(mine.status, 201, mine.text);
    assert.equal(theirs.status, 201, theirs.text);
    assert.equal(theirs.headers.get('idempotent-replayed'), null);
    assert.notEqual(theirs.body.id, mine.body.id);
    assert.equal(theirs.body.tenant_id, workspace.body.id);
    // Even with another body: the key of one workspace says nothing about the other's.
    const third = await call('POST', '/v2/listeners', {
      key: otherKey.body.key,
      body: { compute_type: 'k8s', compute_id: 'other-cluster' },
      headers: withKey(randomUUID()),
    });
    assert.equal(third.status, 201, third.text);
  });
});

describe('answers that are not kept', () => {
  test('a refused request (422, 400) leaves the key free: the corrected request runs with it', async () => {
    const key = randomUUID();
    const invalid = await call('POST', '/v2/deployments', {
      body: { name: 'Not A DNS Label', source: 'internal_container' },
      headers: withKey(key),
    });
    assert.equal(invalid.status, 422);
    assert.equal(invalid.body.code, 'validation_failed');
    const ruleBroken = await call('POST', '/v2/deployments', {
      body: { name: 'corrected', source: 'external_container', source_revision_config: { image_uri: 'a:1' } },
      headers: withKey(key),
    });
    assert.equal(ruleBroken.status, 400, ruleBroken.text);
    const corrected = await call('POST', '/v2/deployments', { body: container('corrected'), headers: withKey(key) });
    assert.equal(corrected.status, 201, corrected.text);
    assert.equal(corrected.headers.get('idempotent-replayed'), null);
    const retry = await call('POST', '/v2/deployments', { body: container('corrected'), headers: withKey(key) });
    assert.equal(retry.headers.get('idempotent-replayed'), 'true');
    assert.equal(retry.body.id, corrected.body.id);
  });

  test('a failure of the service (500) does not poison the key: the retry does the work', async () => {
    const db = t.database.db;
    await sql`create function refuse_deployments() returns trigger language plpgsql as $$ begin raise exception 'disk on fire'; end $$`.execute(
      db,
    );
    await sql`create trigger refuse_deployments before insert on deployments for each row execute function refuse_deployments()`.execute(
      db,
    );
    const key = randomUUID();
    try {
      const failed = await call('POST', '/v2/deployments', { body: container('after-outage'), headers: withKey(key) });
      assert.equal(failed.status, 500, failed.text);
    } finally {
      await sql`drop trigger refuse_deployments on deployments`.execute(db);
      await sql`drop function refuse_deployments()`.execute(db);
    }
    const retry = await call('POST', '/v2/deployments', { body: container('after-outage'), headers: withKey(key) });
    assert.equal(retry.status, 201, retry.text);
    assert.equal(retry.headers.get('idempotent-replayed'), null);
    assert.equal((await deploymentsNamed('after-outage')).length, 1);
  });

  test('an answer holding a credential shown once is not kept: the retry is told, and no second credential is made', async () => {
    const key = randomUUID();
    const first = await call('POST', '/v2/api-keys', { body: { name: 'ci', role: 'member' }, headers: withKey(key) });
    assert.equal(first.status, 201, first.text);
    const retry = await call('POST', '/v2/api-keys', { body: { name: 'ci', role: 'member' }, headers: withKey(key) });
    assert.equal(retry.status, 409);
    assert.equal(retry.body.code, 'idempotency_response_not_kept');
    assert.ok(!retry.text.includes(first.body.key));
    const listed = await call('GET', '/v2/api-keys?limit=100');
    assert.equal(listed.body.resources.filter((k: { name: string }) => k.name === 'ci').length, 1);
    const stored = await sql<{
      n: number;
    }>`select count(*)::int as n from idempotency_keys where response_body like ${`%${first.body.key}%`}`.execute(
      t.database.db,
    );
    assert.equal(stored.rows[0]!.n, 0, 'the key is stored nowhere in plaintext');
  });
  test('an upload URL is not kept: its single-use token is stored only hashed, never in a kept answer', async () => {
    const created = await call('POST', '/v2/deployments', { body: container('upload-url-retry') });
    assert.equal(created.status, 201, created.text);
    const key = randomUUID();
    const path = `/v2/deployments/${created.body.id}/upload-url`;
    const first = await call('POST', path, { headers: withKey(key) });
    assert.equal(first.status, 200, first.text);
    assert.equal(first.headers.get('cache-control'), 'no-store');
    const token = new URL(first.body.upload_url).searchParams.get('token')!;
    assert.ok(token.length > 20);
    const retry = await call('POST', path, { headers: withKey(key) });
    assert.equal(retry.status, 409);
    assert.equal(retry.body.code, 'idempotency_response_not_kept');
    assert.ok(!retry.text.includes(token));
    const stored = await sql<{
      n: number;
    }>`select count(*)::int as n from idempotency_keys where response_body like ${`%${token}%`}`.execute(t.database.db);
    assert.equal(stored.rows[0]!.n, 0, 'the token is stored nowhere in plaintext');
  });
  test('an authorization URL is not kept: its state is stored only hashed', async () => {
    const provider = await call('POST', '/v2/auth/providers', {
      key: t.orgKey,
      body: {
        provider_id: 'kept-nowhere',
        name: 'IdP',
        client_id: 'client',
        client_secret: 'secret',
        auth_url: 'https://idp.example.com/authorize',
        token_url: 'https://idp.example.com/token',
      },
    });
    assert.equal(provider.status, 201, provider.text);
    const key = randomUUID();
    const body = { provider_id: 'kept-nowhere', agent_id: 'agent' };
    const first = await call('POST', '/v2/auth/authenticate', { body, headers: withKey(key) });
    assert.equal(first.status, 200, first.text);
    assert.equal(first.headers.get('cache-control'), 'no-store');
    const state = new URL(first.body.url).searchParams.get('state')!;
    assert.ok(state.length > 10);
    const retry = await call('POST', '/v2/auth/authenticate', { body, headers: withKey(key) });
    assert.equal(retry.status, 409);
    assert.equal(retry.body.code, 'idempotency_response_not_kept');
    const stored = await sql<{
      n: number;
    }>`select count(*)::int as n from idempotency_keys where response_body like ${`%${state}%`}`.execute(t.database.db);
    assert.equal(stored.rows[0]!.n, 0);
  });
});

describe('patches and keys over time', () => {
  test('a retried patch makes one revision', async () => {
    const created = await call('POST', '/v2/deployments', { body: container('patched-twice') });
    assert.equal(created.status, 201, created.text);
    const key = randomUUID();
    const patch = { source_revision_config: { image_uri: 'registry.example.com/agent:2.0.0' } };
    const answers = await Promise.all(
      [1, 2, 3].map(() => call('PATCH', `/v2/deployments/${created.body.id}`, { body: patch, headers: withKey(key) })),
    );
    for (const answer of answers) assert.equal(answer.text, answers[0]!.text, answer.text);
    assert.equal(answers[0]!.status, 200);
    assert.equal(await revisionCount(created.body.id), 2, 'revision 1 and one more');
  });

  test('a key is kept 24 hours: a retry within them is a replay, one after them runs again, and the retention sweep deletes the key', async () => {
    const created = await call('POST', '/v2/deployments', { body: container('expiring-key') });
    const key = randomUUID();
    const patch = { source_revision_config: { image_uri: 'registry.example.com/agent:3.0.0' } };
    const patchWithKey = () =>
      call('PATCH', `/v2/deployments/${created.body.id}`, { body: patch, headers: withKey(key) });
    assert.equal((await patchWithKey()).status, 200);
    assert.equal(await revisionCount(created.body.id), 2);

    clock.advance((IDEMPOTENCY_KEY_TTL_HOURS - 1) * HOUR_MS);
    const within = await patchWithKey();
    assert.equal(within.status, 200, within.text);
    assert.equal(within.headers.get('idempotent-replayed'), 'true', 'an hour before the end of its day the key holds');
    assert.equal(await revisionCount(created.body.id), 2);

    clock.advance(2 * HOUR_MS);
    const later = await patchWithKey();
    assert.equal(later.status, 200);
    assert.equal(later.headers.get('idempotent-replayed'), null);
    assert.equal(await revisionCount(created.body.id), 3, 'the request ran again');

    // Another day and an hour: the key (claimed again by `later`) is old; one made now is young.
    clock.advance((IDEMPOTENCY_KEY_TTL_HOURS + 1) * HOUR_MS);
    const young = randomUUID();
    assert.equal(
      (await call('POST', '/v2/deployments', { body: container('young-key'), headers: withKey(young) })).status,
      201,
    );
    // The retention sweep, by the same clock (its first run happens at start; stop() waits for it).
    await startRetentionSweeper({
      db: t.database.db,
      dataDir: t.dataDir,
      policy: { eventRetentionDays: 0, uploadRetentionHours: 24 },
      logger: createLogger('silent'),
      intervalMs: 3_600_000,
      now: clock.now,
    }).stop();
    const left = await sql<{ key: string }>`select idempotency_key as key from idempotency_keys`.execute(t.database.db);
    assert.ok(!left.rows.some((r) => r.key === key), 'the old key went');
    assert.ok(
      left.rows.some((r) => r.key === young),
      'a young key stays',
    );
  });

  test('a key left running by a crashed replica answers 409 until its lease ends, then the retry runs', async () => {
    const key = randomUUID();
    const body = container('after-crash');
    const first = await call('POST', '/v2/deployments', { body, headers: withKey(key) });
    assert.equal(first.status, 201);
    // What a replica that died mid-request leaves: its work rolled back, and the key running with the
    // lease its claim took.
    await sql`delete from deployments where id = ${first.body.id}`.execute(t.database.db);
    await sql`update idempotency_keys set state = 'running', response_status = null, response_headers = null, response_body = null,
      locked_until = ${clock.now()}::timestamptz + make_interval(secs => ${IDEMPOTENCY_LEASE_SECONDS})
      where idempotency_key = ${key}`.execute(t.database.db);

    // A retry waits for the first attempt's answer, up to IDEMPOTENCY_WAIT_MS by the clock. The test holds
    // the key's row, so that it sees the retry inside its wait (its claim blocked on the row), and moves
    // the clock past the wait before it lets go.
    const holder = await t.database.pool.connect();
    try {
      await holder.query('begin');
      await holder.query('select 1 from idempotency_keys where idempotency_key = $1 for update', [key]);
      const holderPid = (await holder.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid;
      const answer = call('POST', '/v2/deployments', { body, headers: withKey(key) });
      await eventually(
        "the retry's claim to wait on the key's row",
        async () =>
          (
            await t.database.pool.query<{ n: number }>(
              'select count(*)::int as n from pg_stat_activity where $1 = any(pg_blocking_pids(pid))',
              [holderPid],
            )
          ).rows[0]!.n > 0,
      );
      clock.advance(IDEMPOTENCY_WAIT_MS);
      await holder.query('commit');
      const waiting = await answer;
      assert.equal(waiting.status, 409, waiting.text);
      assert.equal(waiting.body.code, 'idempotency_key_in_progress');
      assert.ok(Number(waiting.headers.get('retry-after')) > 0);
    } finally {
      // Closed, not given back to the pool: a failure above may have left its transaction open.
      holder.release(true);
    }

    clock.advance(IDEMPOTENCY_LEASE_SECONDS * 1000);
    const retry = await call('POST', '/v2/deployments', { body, headers: withKey(key) });
    assert.equal(retry.status, 201, retry.text);
    assert.equal(retry.headers.get('idempotent-replayed'), null);
  });
});

describe('the key itself', () => {
  test('a malformed key is 422 at the header, and nothing is done', async () => {
    for (const bad of ['x'.repeat(256), 'caf\u00e9']) {
      const answer = await fetch(`${base}/v2/deployments`, {
        method: 'POST',
        headers: {
          'x-api-key': ADMIN_KEY,
          'content-type': 'application/json',
          'idempotency-key': Buffer.from(bad, 'latin1').toString('latin1'),
        },
        body: JSON.stringify(container('bad-key')),
      });
      const body = (await answer.json()) as { code: string; detail: { loc: string[] }[] };
      assert.equal(answer.status, 422);
      assert.equal(body.code, 'validation_failed');
      assert.deepEqual(body.detail[0]!.loc, ['header', 'idempotency-key']);
    }
    assert.equal((await deploymentsNamed('bad-key')).length, 0);
  });

  test('without a key, requests behave as before: each one does the work', async () => {
    assert.equal((await call('POST', '/v2/deployments', { body: container('no-key') })).status, 201);
    const again = await call('POST', '/v2/deployments', { body: container('no-key') });
    assert.equal(again.status, 409);
    assert.equal(again.body.code, 'conflict');
  });

  test('the OpenAPI document shows the header and the answers it brings', async () => {
    const doc = (await call('GET', '/openapi.json')).body;
    const create = doc.paths['/v2/deployments'].post;
    const header = create.parameters.find(
      (p: { in: string; name: string }) => p.in === 'header' && p.name === 'idempotency-key',
    );
    assert.ok(header, 'Idempotency-Key is a header parameter');
    assert.equal(header.required, false);
    assert.ok(create.responses['409']);
    assert.ok(create.responses['422']);
    const patch = doc.paths['/v2/deployments/{deployment_id}'].patch;
    assert.ok(
      patch.parameters.some((p: { in: string; name: string }) => p.in === 'header' && p.name === 'idempotency-key'),
    );
    const get = doc.paths['/v2/deployments/{deployment_id}'].get;
    assert.ok(!(get.parameters ?? []).some((p: { name: string }) => p.name === 'idempotency-key'), 'not on reads');
  });
});
