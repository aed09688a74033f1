/**
 * Agent credentials: 32 random bytes shown once as `slwa_<base64url>`, stored as their SHA-256, like
 * API keys (src/auth/api-keys.ts). The distinct prefix lets a leaked one be recognized (and never be
 * mistaken for an API key: the two are looked up in different tables).
 */
import { createHash, randomBytes } from 'node:crypto';

const AGENT_CREDENTIAL_PREFIX = 'slwa_';

export function generateAgentCredential(): string {
  return `${AGENT_CREDENTIAL_PREFIX}${randomBytes(32).toString('base64url')}`;
}

export function hashAgentCredential(credential: string): Buffer {
  return createHash('sha256').update(credential, 'utf8').digest();
}

export function agentCredentialPrefix(credential: string): string {
  return credential.slice(0, AGENT_CREDENTIAL_PREFIX.length + 6);
}
