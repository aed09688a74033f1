/**
 * Every kind of credential the service issues or accepts, in one table: 32 random bytes shown once as
 * `<prefix><base64url>` and stored as their SHA-256 (a credential has full entropy, so a slow password
 * hash would add latency to every request and no safety), except the metrics token, which the operator
 * chooses and the configuration holds.
 *
 * The prefixes matter beyond telling kinds apart without a lookup: the app edges recognise the service's
 * credentials by them and remove them before a request reaches an app (SERVICE_CREDENTIAL_PATTERN in
 * src/dataplane/edge-haproxy-config.ts is made from this table), so a credential without one would be
 * passed on to whatever app a caller sends it to, and a new kind is stripped as soon as it is listed here.
 */
import { createHash, randomBytes } from 'node:crypto';

export const CREDENTIAL_PREFIXES = {
  /** API keys (src/service/api-keys.ts); the bootstrap key too. */
  apiKey: 'slw_',
  /** A listener's credential: the listener protocol endpoints of its own listener, nothing else. */
  listener: 'slwl_',
  /** An agent's credential: its OAuth connections' tokens (src/service/agent-credentials.ts). */
  agent: 'slwa_',
  /** The scraper's bearer token for /metrics (SLIPWAY_METRICS_TOKEN). */
  metrics: 'slwm_',
} as const;

export type CredentialKind = keyof typeof CREDENTIAL_PREFIXES;

/** A credential just made: the value (shown once), its hash (stored) and what is shown of it later. */
export interface NewCredential {
  value: string;
  hash: Buffer;
  prefix: string;
}

export function hashCredential(value: string): Buffer {
  return createHash('sha256').update(value, 'utf8').digest();
}

/** What is shown of a credential after its creation, so that a user can tell credentials apart. */
export function shownPrefix(kind: CredentialKind, value: string): string {
  return value.slice(0, CREDENTIAL_PREFIXES[kind].length + 6);
}

export function newCredential(kind: CredentialKind): NewCredential {
  const value = `${CREDENTIAL_PREFIXES[kind]}${randomBytes(32).toString('base64url')}`;
  return { value, hash: hashCredential(value), prefix: shownPrefix(kind, value) };
}

/**
 * A deployment's protocol credential (src/service/protocol-credentials.ts): what a caller of the
 * deployment's MCP and A2A endpoints presents when the deployment requires one. Deliberately not in
 * CREDENTIAL_PREFIXES: it opens nothing on the service, and the app edges must pass it on, because the
 * app itself checks it (runtime/langgraph/protocol-auth.mjs asks the service, with its agent credential,
 * whether the value is one of its own deployment's). `slwp_` matches none of the stripped prefixes.
 */
export const PROTOCOL_CREDENTIAL_PREFIX = 'slwp_';

export function newProtocolCredential(): NewCredential {
  const value = `${PROTOCOL_CREDENTIAL_PREFIX}${randomBytes(32).toString('base64url')}`;
  return { value, hash: hashCredential(value), prefix: value.slice(0, PROTOCOL_CREDENTIAL_PREFIX.length + 6) };
}

/** Whether `value` has the prefix of credentials of `kind` (only such a value ever is one). */
export function isCredentialOf(kind: CredentialKind, value: string): boolean {
  return value.startsWith(CREDENTIAL_PREFIXES[kind]);
}
