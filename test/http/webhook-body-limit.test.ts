/**
 * GitHub sends push payloads of up to 25 MB: the webhook route takes them although every other JSON
 * route stops at the global body limit (1 MiB by default).
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import {
  createCodehostDeployment,
  createTokenIntegration,
  deliver,
  pushPayload,
  startCodehostFixture,
  type CodehostFixture,
  type CreatedIntegration,
} from '../codehost/codehost-fixture.ts';

let f: CodehostFixture;
let integration: CreatedIntegration;

before(async () => {
  f = await startCodehostFixture();
  integration = await createTokenIntegration(f, 'big-pushes');
});
after(() => f.close());

/** A signed push whose commit list makes it about `bytes` long. */
function bigPush(bytes: number, after: string): Record<string, unknown> {
  const payload = pushPayload(f, { repo: 'repo-020', after });
  const message = 'm'.repeat(10_000);
  const count = Math.ceil(bytes / message.length);
  payload.commits = Array.from({ length: count }, (_, i) => ({ id: String(i).padStart(40, '0'), message }));
  return payload;
}

test('a signed push of several MiB creates its revision', async () => {
  await createCodehostDeployment(f, integration.id, 'big-push', { repo: 'repo-020' });
  const payload = bigPush(5 * 1024 * 1024, 'b'.repeat(40));
  assert.ok(JSON.stringify(payload).length > 5 * 1024 * 1024);
  const res = await deliver(f, integration.id, payload, { secret: integration.webhook_secret });
  assert.equal(res.status, 200, JSON.stringify(res.body)?.slice(0, 300));
  assert.equal(res.body.outcome, 'revision_created');
});

test('a delivery over 25 MiB is still refused with 413', async () => {
  const res = await deliver(f, integration.id, bigPush(25 * 1024 * 1024 + 1024, 'c'.repeat(40)), {
    secret: integration.webhook_secret,
  });
  assert.equal(res.status, 413);
  assert.equal(res.body.code, 'payload_too_large');
});

test('other JSON routes keep the global limit', async () => {
  const res = await f.api.post('/v2/deployments', { name: 'x', padding: 'x'.repeat(2 * 1024 * 1024) });
  assert.equal(res.status, 413);
});
