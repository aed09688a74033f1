/**
 * The single sign-on tables of the database's types (src/store/schema.ts, `Database`): mappings of a
 * provider's groups and e-mail domains to roles, used sign-in states, and sessions.
 */
import type { CreatedAt, Json } from './schema.ts';

/** Single sign-on (migrations/016_sso.sql; src/sso/sso-store.ts): the role a mapping gives. */
export type SsoRole = 'admin' | 'member';
export type SsoMappingKind = 'group' | 'email_domain';

/** A provider's group or a verified e-mail domain given a role in a workspace (null: every workspace). */
export interface SsoMappingTable {
  id: string;
  organization_id: string;
  kind: SsoMappingKind;
  /** A group exactly as the provider names it; a domain in lower case, without '@'. */
  value: string;
  workspace_id: string | null;
  role: SsoRole;
  created_at: CreatedAt;
}

/** The state of a sign-in whose callback got through, kept until the sign-in would have expired (no replay). */
export interface SsoUsedStateTable {
  state_hash: Buffer;
  expires_at: Date;
}

/** A signed-in person's session; the cookie holds the token, the row only its SHA-256. */
export interface SsoSessionTable {
  id: string;
  token_hash: Buffer;
  organization_id: string;
  issuer: string;
  subject: string;
  email: string | null;
  email_verified: boolean;
  name: string | null;
  groups: Json<string[]>;
  created_at: CreatedAt;
  expires_at: Date;
  ended_at: Date | null;
}
