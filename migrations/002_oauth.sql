-- OAuth providers, the authorization-code flow, the tokens it yields, agent connections to those
-- tokens, and the deployment-scoped credentials running agents use to fetch access tokens.
-- Every secret (client secret, PKCE verifier, access and refresh tokens) is sealed by the service
-- (src/crypto/secret-box.ts) before it gets here; agent credentials are stored as SHA-256 hashes.

-- An identity provider, shared by the workspaces of an organization.
create table oauth_providers (
  id uuid primary key,
  organization_id uuid not null references organizations (id),
  -- the slug users and callback URLs name the provider by: /v2/auth/callback/<provider_id>
  provider_id text not null,
  name text not null,
  client_id text not null,
  client_secret_encrypted text,
  auth_url text not null,
  token_url text not null,
  revocation_url text,
  userinfo_url text,
  issuer text,
  uses_pkce boolean not null default false,
  code_challenge_method text not null default 'S256' check (code_challenge_method in ('S256', 'plain')),
  token_endpoint_auth_method text not null default 'client_secret_post'
    check (token_endpoint_auth_method in ('none', 'client_secret_basic', 'client_secret_post')),
  provider_type text,
  mcp_server_url text,
  -- scopes requested when an authentication names none
  scopes jsonb not null default '[]',
  is_dynamic_client boolean not null default false,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  unique (organization_id, provider_id)
);

-- Tokens a person obtained through the flow; usable by the agents connected to them.
create table oauth_tokens (
  id uuid primary key,
  workspace_id uuid not null references workspaces (id),
  provider_id uuid not null references oauth_providers (id),
  access_token_encrypted text not null,
  refresh_token_encrypted text,
  token_type text not null,
  -- the issuer the token responses were checked against; refreshes are checked against it too
  issuer text not null,
  expires_at timestamptz,
  scopes jsonb not null,
  -- active, or refresh_failed (the provider refused the refresh: a person must authorize again)
  status text not null check (status in ('active', 'refresh_failed')),
  status_message text,
  provider_account_label text,
  provider_subject text,
  -- the API key that ran the flow
  created_by text not null,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  refreshed_at timestamptz
);
create index oauth_tokens_workspace on oauth_tokens (workspace_id, created_at desc, id desc);
create index oauth_tokens_provider on oauth_tokens (provider_id);

-- One authorization in progress, from POST /v2/auth/authenticate to its callback. Single use: the
-- callback moves it out of 'pending' atomically; the verifier is cleared when the flow ends.
create table oauth_authorizations (
  id uuid primary key,
  workspace_id uuid not null references workspaces (id),
  provider_id uuid not null references oauth_providers (id) on delete cascade,
  agent_id text,
  -- SHA-256 of the state sent to the provider; the state itself is never stored
  state_hash bytea not null unique,
  code_verifier_encrypted text,
  nonce text,
  redirect_uri text not null,
  scopes jsonb not null,
  status text not null check (status in ('pending', 'exchanging', 'completed', 'failed')),
  failure_reason text,
  failure_message text,
  oauth_token_id uuid references oauth_tokens (id) on delete set null,
  agent_connection_id uuid,
  created_by text not null,
  expires_at timestamptz not null,
  created_at timestamptz not null default now(),
  finished_at timestamptz
);
create index oauth_authorizations_created on oauth_authorizations (created_at);

-- An agent's use of a token. agent_id is the caller's own name for the agent (free-form).
create table agent_connections (
  id uuid primary key,
  workspace_id uuid not null references workspaces (id),
  agent_id text not null,
  oauth_token_id uuid not null references oauth_tokens (id) on delete cascade,
  created_by text not null,
  created_at timestamptz not null default now(),
  unique (agent_id, oauth_token_id)
);
create index agent_connections_agent on agent_connections (workspace_id, agent_id, created_at desc, id desc);

alter table oauth_authorizations
  add foreign key (agent_connection_id) references agent_connections (id) on delete set null;

-- A credential a deployed agent presents to fetch access tokens of its workspace's connections.
-- It dies with its deployment; agent_ids, when set, narrows it to those agents.
create table agent_credentials (
  id uuid primary key,
  workspace_id uuid not null references workspaces (id),
  deployment_id uuid not null references deployments (id) on delete cascade,
  name text not null,
  agent_ids jsonb,
  credential_hash bytea not null unique,
  credential_prefix text not null,
  created_by text not null,
  created_at timestamptz not null default now(),
  last_used_at timestamptz,
  revoked_at timestamptz
);
create index agent_credentials_deployment on agent_credentials (deployment_id, created_at desc, id desc);
