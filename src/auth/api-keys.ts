/**
 * API keys: 32 random bytes shown once as `slw_<base64url>`, stored as their SHA-256 (the key has full
 * entropy, so a slow password hash would add latency to every request and no safety).
 */
import { createHash, randomBytes } from 'node:crypto';

const KEY_PREFIX = 'slw_';

export function generateApiKey(): string {
  return `${KEY_PREFIX}${randomBytes(32).toString('base64url')}`;
}

export function hashApiKey(key: string): Buffer {
  return createHash('sha256').update(key, 'utf8').digest();
}

/** What is shown of a key after creation, so that a user can tell keys apart. */
export function displayPrefix(key: string): string {
  return key.slice(0, KEY_PREFIX.length + 6);
}
