/**
 * Conditional requests (docs/api.md, "Conditional requests"), over real HTTP: ETags on single
 * resources, If-Match on their writes (412 when the resource changed, atomically with the write),
 * If-None-Match on their reads (304).
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe } from 'node:test';
import { createTestApp, type TestApp, listen } from '../support/harness.ts';
import { httpCaller, type HttpAnswer, type HttpCall } from '../support/http-caller.ts';
import { eventually } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';

let t: TestApp;
let call: HttpCall;

before(async () => {
  t = await createTestApp();
  call = httpCaller(await listen(t.app));
});
after(() => t.close());

/** A patch of source_config: changes the deployment in place, without a revision. */
const tweak = (memoryMb: number) => ({ source_config: { resource_spec: { memory_mb: memoryMb } } });
const container = (name: string) => ({
  name,
  source: 'internal_container',
  source_revision_config: { image_uri: 'registry.example.com/agent:1.0.0' },
});

async function createDeployment(name: string): Promise<HttpAnswer> {
  const created = await call('POST', '/v2/deployments', { body: container(name) });
  assert.equal(created.status, 201, created.text);
  return created;
}

async function revisionCount(deploymentId: string): Promise<number> {
  return (await call('GET', `/v2/deployments/${deploymentId}/revisions?limit=100`)).body.resources.length;
}

describe('ETags', () => {
  test('a create, a GET and a PATCH each carry the ETag of the resource as it is then', async () => {
    const created = await createDeployment('tagged');
    const createdTag = created.headers.get('etag');
    assert.match(createdTag ?? '', /^"[A-Za-z0-9_-]{43}"$/, 'a strong ETag');
    const read = await call('GET', `/v2/deployments/${created.body.id}`);
    assert.equal(read.headers.get('etag'), createdTag, 'nothing changed between the create and the GET');
    assert.equal((await call('GET', `/v2/deployments/${created.body.id}`)).headers.get('etag'), createdTag, 'stable');

    const patched = await call('PATCH', `/v2/deployments/${created.body.id}`, { body: tweak(256) });
    assert.equal(patched.status, 200, patched.text);
    const patchedTag = patched.headers.get('etag');
    assert.ok(patchedTag);
    assert.notEqual(patchedTag, createdTag);
    assert.equal(
      (await call('GET', `/v2/deployments/${created.body.id}`)).headers.get('etag'),
      patchedTag,
      "the PATCH's ETag is the one a GET gives next",
    );
  });

  test('revisions, listeners and OAuth providers have ETags too; lists do not', async () => {
    const created = await createDeployment('tagged-revision');
    const revision = await call(
      'GET',
      `/v2/deployments/${created.body.id}/revisions/${created.body.latest_revision_id}`,
    );
    assert.ok(revision.headers.get('etag'));
    const listener = await call('POST', '/v2/listeners', {
      body: { compute_type: 'k8s', compute_id: 'tagged-cluster' },
    });
    assert.equal(
      listener.headers.get('etag'),
      (await call('GET', `/v2/listeners/${listener.body.id}`)).headers.get('etag'),
    );
    const provider = await call('POST', '/v2/auth/providers', {
      key: t.orgKey,
      body: {
        provider_id: 'tagged-idp',
        name: 'IdP',
        client_id: 'c',
        client_secret: 's',
        auth_url: 'https://idp.example.com/auth',
        token_url: 'https://idp.example.com/token',
      },
    });
    assert.equal(provider.status, 201, provider.text);
    assert.equal(
      provider.headers.get('etag'),
      (await call('GET', '/v2/auth/providers/tagged-idp')).headers.get('etag'),
    );
    assert.equal((await call('GET', '/v2/deployments')).headers.get('etag'), null);
  });

  test('If-None-Match with the current ETag is 304 without a body; after a change it is 200', async () => {
    const created = await createDeployment('cached');
    const url = `/v2/deployments/${created.body.id}`;
    const etag = (await call('GET', url)).headers.get('etag')!;
    const notModified = await call('GET', url, { headers: { 'if-none-match': etag } });
    assert.equal(notModified.status, 304);
    assert.equal(notModified.text, '');
    assert.equal(notModified.headers.get('etag'), etag);
    assert.equal(
      (await call('GET', url, { headers: { 'if-none-match': `W/${etag}` } })).status,
      304,
      'weak comparison',
    );
    assert.equal((await call('GET', url, { headers: { 'if-none-match': '"something-else"' } })).status, 200);
    const head = await call('HEAD', url);
    assert.equal(head.headers.get('etag'), etag, 'HEAD tells the ETag too');
    assert.equal((await call('HEAD', url, { headers: { 'if-none-match': etag } })).status, 304);
    await call('PATCH', url, { body: tweak(256) });
    const changed = await call('GET', url, { headers: { 'if-none-match': etag } });
    assert.equal(changed.status, 200);
    assert.notEqual(changed.headers.get('etag'), etag);
  });
});

describe('If-Match', () => {
  test('a PATCH with the current ETag is done; with a stale one it is 412 and changes nothing', async () => {
    const created = await createDeployment('guarded');
    const url = `/v2/deployments/${created.body.id}`;
    const etag = created.headers.get('etag')!;
    const first = await call('PATCH', url, {
      headers: { 'if-match': etag },
      body: { source_revision_config: { image_uri: 'registry.example.com/agent:2.0.0' } },
    });
    assert.equal(first.status, 200, first.text);
    const before = await call('GET', url);

    const stale = await call('PATCH', url, {
      headers: { 'if-match': etag },
      body: { source_revision_config: { image_uri: 'registry.example.com/agent:3.0.0' } },
    });
    assert.equal(stale.status, 412);
    assert.equal(stale.body.code, 'precondition_failed');
    assert.equal(typeof stale.body.detail, 'string');
    const after = await call('GET', url);
    assert.equal(after.text, before.text, 'nothing changed');
    assert.equal(await revisionCount(created.body.id), 2, 'no revision was made');

    assert.equal(
      (await call('PATCH', url, { headers: { 'if-match': `W/${first.headers.get('etag')}` }, body: tweak(512) }))
        .status,
      412,
      'a weak ETag never matches',
    );
    assert.equal(
      (await call('PATCH', url, { headers: { 'if-match': `"other", ${first.headers.get('etag')}` }, body: tweak(512) }))
        .status,
      200,
      'any ETag of a list may match',
    );
    assert.equal(
      (await call('PATCH', url, { headers: { 'if-match': '*' }, body: tweak(768) })).status,
      200,
      '* matches an existing resource',
    );
  });

  test('two concurrent PATCHes with the same If-Match: exactly one is done, the other is 412', async () => {
    const created = await createDeployment('raced');
    const url = `/v2/deployments/${created.body.id}`;
    for (let round = 0; round < 3; round++) {
      const etag = (await call('GET', url)).headers.get('etag')!;
      const answers = await Promise.all(
        ['a', 'b'].map((v) =>
          call('PATCH', url, {
            headers: { 'if-match': etag },
            body: { source_revision_config: { image_uri: `registry.example.com/agent:${round}-${v}` } },
          }),
        ),
      );
      assert.deepEqual(answers.map((a) => a.status).sort(), [200, 412], answers.map((a) => a.text).join('\n'));
      const winner = answers.find((a) => a.status === 200)!;
      assert.equal(
        (await call('GET', url)).headers.get('etag'),
        winner.headers.get('etag'),
        "the winner's change is what is there",
      );
    }
    assert.equal(await revisionCount(created.body.id), 4, 'one revision per round');
  });

  /**
   * Holds the deployment's row lock in a transaction of the test's own, as another writer would (a user's
   * unconditional PATCH, the worker moving its status), until `change` has run in it and committed.
   */
  async function whileRowLocked(deploymentId: string, write: () => Promise<HttpAnswer>, change: string) {
    const other = await t.database.pool.connect();
    try {
      await other.query('begin');
      await other.query('select 1 from deployments where id = $1 for update', [deploymentId]);
      const answer = write();
      // The write waits for the lock (a condition, not a delay): some backend of this database waits on one.
      await eventually(
        'the write to wait for the lock',
        async () => {
          const waiting = await t.database.pool.query(
            "select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'",
          );
          return waiting.rows[0].n > 0;
        },
        { everyMs: 0 },
      );
      await other.query(change, [deploymentId]);
      await other.query('commit');
      return await answer;
    } finally {
      other.release();
    }
  }

  test('If-Match is checked under the row lock: a change committed while the write waits for it makes the write 412', async () => {
    for (const method of ['PATCH', 'DELETE'] as const) {
      const created = await createDeployment(`locked-${method.toLowerCase()}`);
      const url = `/v2/deployments/${created.body.id}`;
      const etag = created.headers.get('etag')!;
      const answer = await whileRowLocked(
        created.body.id,
        () =>
          call(method, url, {
            headers: { 'if-match': etag },
            ...(method === 'PATCH' ? { body: tweak(2048) } : {}),
          }),
        // Another writer's change, committed before the conditional write can take the lock.
        "update deployments set status = 'UNKNOWN' where id = $1",
      );
      assert.equal(answer.status, 412, `${method}: ${answer.text}`);
      const now = await call('GET', url);
      assert.equal(now.status, 200, `${method}: the deployment stays`);
      assert.equal(now.body.status, 'UNKNOWN', `${method}: the other change stays`);
      assert.notEqual(now.body.source_config.resource_spec?.memory_mb, 2048, `${method}: nothing of the write`);
    }
  });

  test('concurrent conditional PATCHes of a listener: one wins', async () => {
    const listener = await call('POST', '/v2/listeners', {
      body: { compute_type: 'k8s', compute_id: 'raced-cluster' },
    });
    const url = `/v2/listeners/${listener.body.id}`;
    const etag = listener.headers.get('etag')!;
    const answers = await Promise.all(
      ['1.0', '2.0', '3.0'].map((version) => call('PATCH', url, { headers: { 'if-match': etag }, body: { version } })),
    );
    assert.deepEqual(answers.map((a) => a.status).sort(), [200, 412, 412]);
    const winner = answers.find((a) => a.status === 200)!;
    assert.equal((await call('GET', url)).body.version, winner.body.version);
  });

  test('DELETE with a stale If-Match is 412 and the resource stays; with the current one it goes', async () => {
    const created = await createDeployment('deleted-carefully');
    const url = `/v2/deployments/${created.body.id}`;
    const stale = created.headers.get('etag')!;
    await call('PATCH', url, { body: tweak(256) });
    const refused = await call('DELETE', url, { headers: { 'if-match': stale } });
    assert.equal(refused.status, 412);
    assert.equal(refused.body.code, 'precondition_failed');
    assert.equal((await call('GET', url)).status, 200, 'still there');
    const current = (await call('GET', url)).headers.get('etag')!;
    assert.equal((await call('DELETE', url, { headers: { 'if-match': current } })).status, 204);
    const gone = await call('DELETE', url, { headers: { 'if-match': current } });
    assert.equal(gone.status, 404, 'a resource that is gone is 404, as without If-Match');
    assert.equal(gone.body.code, 'not_found');
  });

  test('without If-Match, writes behave as before', async () => {
    const created = await createDeployment('unguarded');
    const url = `/v2/deployments/${created.body.id}`;
    assert.equal((await call('PATCH', url, { body: tweak(1024) })).status, 200);
    assert.equal((await call('PATCH', url, { body: tweak(1280) })).status, 200);
    assert.equal((await call('DELETE', url)).status, 204);
    assert.equal(
      (await call('GET', `/v2/deployments/${randomUUID()}`, { headers: { 'if-match': '"x"' } })).status,
      404,
      'If-Match means nothing to a GET',
    );
  });

  test('If-Match where the resource has no ETag (no GET of its own) is refused rather than ignored', async () => {
    const key = await call('POST', '/v2/tags/keys', { body: { key: 'team' } });
    assert.equal(key.status, 201, key.text);
    const refused = await call('DELETE', `/v2/tags/keys/${key.body.id}`, { headers: { 'if-match': '"anything"' } });
    assert.equal(refused.status, 412);
    assert.equal(refused.body.code, 'precondition_failed');
    assert.equal((await call('DELETE', `/v2/tags/keys/${key.body.id}`, { headers: { 'if-match': '*' } })).status, 204);
  });

  test('a retried conditional PATCH with an Idempotency-Key replays its answer rather than failing its own If-Match', async () => {
    const created = await createDeployment('guarded-retry');
    const url = `/v2/deployments/${created.body.id}`;
    const headers = { 'if-match': created.headers.get('etag')!, 'idempotency-key': randomUUID() };
    const body = { source_revision_config: { image_uri: 'registry.example.com/agent:9.0.0' } };
    const first = await call('PATCH', url, { headers, body });
    assert.equal(first.status, 200, first.text);
    const retry = await call('PATCH', url, { headers, body });
    assert.equal(retry.status, 200, retry.text);
    assert.equal(retry.headers.get('idempotent-replayed'), 'true');
    assert.equal(retry.text, first.text);
    assert.equal(await revisionCount(created.body.id), 2);
  });
});

test('the OpenAPI document shows If-Match, If-None-Match, ETag and their answers', async () => {
  const doc = (await call('GET', '/openapi.json')).body;
  const item = doc.paths['/v2/deployments/{deployment_id}'];
  const header = (op: { parameters?: { in: string; name: string }[] }, name: string) =>
    (op.parameters ?? []).some((p) => p.in === 'header' && p.name === name);
  assert.ok(header(item.get, 'if-none-match'));
  assert.ok(item.get.responses['304']);
  assert.ok(item.get.responses['200'].headers.ETag);
  assert.ok(header(item.patch, 'if-match'));
  assert.ok(item.patch.responses['412']);
  assert.ok(item.patch.responses['200'].headers.ETag);
  assert.ok(header(item.delete, 'if-match'));
  assert.ok(item.delete.responses['412']);
  assert.ok(doc.paths['/v2/deployments'].post.responses['201'].headers.ETag);
  assert.equal(doc.paths['/v2/deployments'].get.responses['200'].headers?.ETag, undefined, 'a list has no ETag');
});
