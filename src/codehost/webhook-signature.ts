/**
 * GitHub's webhook signature: header `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the raw body>`
 * keyed with the webhook secret. The body must be the bytes as received: re-serialized JSON differs.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';

export type SignatureCheck =
  { ok: true } | { ok: false; reason: 'missing' | 'malformed' | 'mismatch'; message: string };

const SIGNATURE_FORMAT = /^sha256=([0-9a-f]{64})$/i;

/** The header value GitHub would send for `body`. */
export function signWebhookBody(secret: string, body: Uint8Array | string): string {
  return `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;
}

/**
 * Checks a delivery's signature. The comparison is over the 32 digest bytes in constant time (docs/codehost.md),
 * so the time taken does not tell an attacker how many leading bytes of a guess were right.
 */
export function verifyWebhookSignature(
  secret: string,
  body: Uint8Array | string,
  header: string | readonly string[] | undefined,
): SignatureCheck {
  // HMAC with an empty key is computable by anyone; an integration without a secret accepts nothing.
  if (secret === '') {
    return {
      ok: false,
      reason: 'mismatch',
      message: 'The integration has no webhook secret, so no signature can match.',
    };
  }
  if (header === undefined || header === '' || (Array.isArray(header) && header.length === 0)) {
    return { ok: false, reason: 'missing', message: 'The X-Hub-Signature-256 header is missing.' };
  }
  // A repeated header is ambiguous; refusing it is safer than picking one.
  if (typeof header !== 'string') {
    return { ok: false, reason: 'malformed', message: 'The X-Hub-Signature-256 header was sent more than once.' };
  }
  const match = SIGNATURE_FORMAT.exec(header.trim());
  if (match === null || match[1] === undefined) {
    return {
      ok: false,
      reason: 'malformed',
      message: 'The X-Hub-Signature-256 header is not of the form sha256=<64 hex digits>.',
    };
  }
  const given = Buffer.from(match[1], 'hex');
  const expected = createHmac('sha256', secret).update(body).digest();
  // timingSafeEqual throws on different lengths; the format check makes both 32 bytes, this keeps it so.
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
    return { ok: false, reason: 'mismatch', message: 'The X-Hub-Signature-256 signature does not match the body.' };
  }
  return { ok: true };
}
