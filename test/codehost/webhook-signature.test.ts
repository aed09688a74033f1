import { test } from 'node:test';
import assert from 'node:assert/strict';
import { signWebhookBody, verifyWebhookSignature } from '../../src/codehost/webhook-signature.ts';

const SECRET = 'whsec-test-5f2c9a';
const BODY = Buffer.from(JSON.stringify({ ref: 'refs/heads/main', after: 'a'.repeat(40) }));

test("the signature matches GitHub's documented example", () => {
  // From docs.github.com, "Validating webhook deliveries".
  assert.equal(
    signWebhookBody("It's a Secret to Everybody", 'Hello, World!'),
    'sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17',
  );
});

test('a body signed with the secret is accepted', () => {
  assert.deepEqual(verifyWebhookSignature(SECRET, BODY, signWebhookBody(SECRET, BODY)), { ok: true });
  // Hex digits in either case, as some proxies rewrite them.
  assert.deepEqual(
    verifyWebhookSignature(SECRET, BODY, signWebhookBody(SECRET, BODY).toUpperCase().replace('SHA256', 'sha256')),
    { ok: true },
  );
});

test('a tampered body is refused', () => {
  const signature = signWebhookBody(SECRET, BODY);
  const tampered = Buffer.from(BODY.toString().replace('main', 'prod'));
  const check = verifyWebhookSignature(SECRET, tampered, signature);
  assert.equal(check.ok, false);
  assert.equal(!check.ok && check.reason, 'mismatch');
});

test('a body signed with another secret is refused', () => {
  const check = verifyWebhookSignature(SECRET, BODY, signWebhookBody('another-secret', BODY));
  assert.equal(!check.ok && check.reason, 'mismatch');
});

test('a missing signature is refused', () => {
  assert.equal(verifyWebhookSignature(SECRET, BODY, undefined).ok, false);
  const check = verifyWebhookSignature(SECRET, BODY, '');
  assert.equal(!check.ok && check.reason, 'missing');
});

test('a malformed signature header is refused', () => {
  const digest = signWebhookBody(SECRET, BODY).slice('sha256='.length);
  for (const header of [
    digest,
    `sha1=${digest}`,
    `sha256=${digest.slice(2)}`,
    `sha256=${digest}00`,
    'sha256=zz' + digest.slice(2),
  ]) {
    const check = verifyWebhookSignature(SECRET, BODY, header);
    assert.equal(!check.ok && check.reason, 'malformed', header);
  }
  const repeated = verifyWebhookSignature(SECRET, BODY, [signWebhookBody(SECRET, BODY), signWebhookBody(SECRET, BODY)]);
  assert.equal(!repeated.ok && repeated.reason, 'malformed');
});

test('an integration without a secret accepts no signature, not even the one for an empty key', () => {
  const check = verifyWebhookSignature('', BODY, signWebhookBody('', BODY));
  assert.equal(check.ok, false);
});
