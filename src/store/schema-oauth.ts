/**
 * The OAuth tables of the database's types (src/store/schema.ts, `Database`): the organization's
 * providers, the tokens workspaces hold from them, the authorizations under way, and the connections of
 * agents to tokens (docs/oauth.md).
 */
import type { Generated } from 'kysely';
import type { CreatedAt, Json, UpdatedAt } from './schema.ts';

export interface OAuthProviderTable {
  id: string;
  organization_id: string;
  provider_id: string;
  name: string;
  client_id: string;
  client_secret_encrypted: string | null;
  auth_url: string;
  token_url: string;
  revocation_url: string | null;
  userinfo_url: string | null;
  issuer: string | null;
  uses_pkce: boolean;
  code_challenge_method: 'S256' | 'plain';
  token_endpoint_auth_method: 'none' | 'client_secret_basic' | 'client_secret_post';
  provider_type: string | null;
  mcp_server_url: string | null;
  scopes: Json<string[]>;
  is_dynamic_client: boolean;
  created_at: CreatedAt;
  updated_at: UpdatedAt;
}

export type OAuthTokenStatus = 'active' | 'refresh_failed';

export interface OAuthTokenTable {
  id: string;
  workspace_id: string;
  provider_id: string;
  access_token_encrypted: string;
  refresh_token_encrypted: string | null;
  token_type: string;
  issuer: string;
  expires_at: Date | null;
  scopes: Json<string[]>;
  status: OAuthTokenStatus;
  status_message: string | null;
  provider_account_label: string | null;
  provider_subject: string | null;
  created_by: string;
  created_at: CreatedAt;
  updated_at: UpdatedAt;
  refreshed_at: Date | null;
  /** Who is calling the provider about this token (refresh, revocation), until claim_expires_at. */
  claim_id: Generated<string | null>;
  claim_expires_at: Generated<Date | null>;
}

export type OAuthAuthorizationStatus = 'pending' | 'exchanging' | 'completed' | 'failed';

export interface OAuthAuthorizationTable {
  id: string;
  workspace_id: string;
  provider_id: string;
  agent_id: string | null;
  state_hash: Buffer;
  code_verifier_encrypted: string | null;
  nonce: string | null;
  redirect_uri: string;
  scopes: Json<string[]>;
  status: OAuthAuthorizationStatus;
  failure_reason: string | null;
  failure_message: string | null;
  oauth_token_id: string | null;
  agent_connection_id: string | null;
  created_by: string;
  expires_at: Date;
  created_at: CreatedAt;
  finished_at: Date | null;
}

export interface AgentConnectionTable {
  id: string;
  workspace_id: string;
  agent_id: string;
  oauth_token_id: string;
  created_by: string;
  created_at: CreatedAt;
}
