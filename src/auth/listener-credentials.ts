/**
 * Listener credentials: 32 random bytes shown once as `slwl_<base64url>`, stored as their SHA-256, like
 * API keys (src/auth/api-keys.ts). One opens the listener protocol endpoints of its own listener and
 * nothing else (docs/listener-protocol.md); the distinct prefix lets authentication tell it from an API
 * key without a lookup, and lets a leaked one be recognized.
 */
import { createHash, randomBytes } from 'node:crypto';

const LISTENER_CREDENTIAL_PREFIX = 'slwl_';

export function generateListenerCredential(): string {
  return `${LISTENER_CREDENTIAL_PREFIX}${randomBytes(32).toString('base64url')}`;
}

export function hashListenerCredential(credential: string): Buffer {
  return createHash('sha256').update(credential, 'utf8').digest();
}

export function listenerCredentialPrefix(credential: string): string {
  return credential.slice(0, LISTENER_CREDENTIAL_PREFIX.length + 6);
}

export function isListenerCredential(presented: string): boolean {
  return presented.startsWith(LISTENER_CREDENTIAL_PREFIX);
}
