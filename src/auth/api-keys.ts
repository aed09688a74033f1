/**
 * API keys: 32 random bytes shown once as `slw_<base64url>`, stored as their SHA-256 (the key has full
 * entropy, so a slow password hash would add latency to every request and no safety).
 */
import { createHash, randomBytes } from 'node:crypto';

export const KEY_PREFIX = 'slw_';

/**
 * Whether `key` has the prefix of the service's API keys. Only such a value is ever an API key: the app
 * edges recognise the service's credentials by their prefix and remove them before a request reaches an
 * app (src/dataplane/edge-haproxy-config.ts), so a key without it would be passed on to whatever app a
 * caller sends it to.
 */
export function hasKeyPrefix(key: string): boolean {
  return key.startsWith(KEY_PREFIX);
}

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
