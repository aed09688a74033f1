-- Single sign-on for the dashboard (docs/operations.md, "Single sign-on"): who gets in through the
-- operator's OpenID Connect provider, the sign-ins finished, and the sessions they open.

-- What a person's ID token gives them: a group in the groups claim, or a verified e-mail address in a
-- domain, maps to a role in one workspace (workspace_id null: in every workspace of the organization,
-- as an organization key would). Set by an organization admin; read on every request a session makes,
-- so deleting a mapping takes the access away at once.
create table sso_mappings (
  id uuid primary key,
  organization_id uuid not null references organizations (id),
  kind text not null check (kind in ('group', 'email_domain')),
  -- A group exactly as the provider names it; a domain in lower case, without '@'.
  value text not null,
  workspace_id uuid references workspaces (id),
  role text not null check (role in ('admin', 'member')),
  created_at timestamptz not null default now()
);
create unique index sso_mappings_unique on sso_mappings (organization_id, kind, value, coalesce(workspace_id, '00000000-0000-0000-0000-000000000000'));
create index sso_mappings_page on sso_mappings (organization_id, created_at desc, id desc);

-- A sign-in under way is kept in the browser's state cookie only (its state, PKCE verifier, nonce,
-- return path and expiry sealed with the service's key): starting one stores nothing. A callback that
-- gets through records the SHA-256 of its state here until the sign-in would have expired, so the same
-- callback cannot be played twice.
create table sso_used_states (
  state_hash bytea primary key,
  expires_at timestamptz not null
);
create index sso_used_states_expiry on sso_used_states (expires_at);

-- A signed-in person's session: the cookie holds a random token, the row only its SHA-256. Ended by
-- logout, by an organization admin, or by its lifetime; ended rows are kept until pruned, for the audit.
create table sso_sessions (
  id uuid primary key,
  token_hash bytea not null unique,
  organization_id uuid not null references organizations (id),
  issuer text not null,
  subject text not null,
  email text,
  email_verified boolean not null default false,
  name text,
  groups jsonb not null default '[]',
  created_at timestamptz not null default now(),
  expires_at timestamptz not null,
  ended_at timestamptz
);
create index sso_sessions_page on sso_sessions (organization_id, created_at desc, id desc);
create index sso_sessions_expiry on sso_sessions (expires_at);
