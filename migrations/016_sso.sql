-- Single sign-on for the dashboard (docs/operations.md, "Single sign-on"): who gets in through the
-- operator's OpenID Connect provider, the sign-ins under way, and the sessions they open.

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

-- A sign-in between the redirect to the provider and its callback. Found by the SHA-256 of its state
-- (the state itself is only in the browser's cookie and the provider's redirect), deleted when the
-- callback claims it, so a callback cannot be replayed. The PKCE verifier is sealed like any secret.
create table sso_sign_ins (
  state_hash bytea primary key,
  code_verifier_sealed text not null,
  nonce text not null,
  return_to text not null,
  created_at timestamptz not null default now(),
  expires_at timestamptz not null
);
create index sso_sign_ins_expiry on sso_sign_ins (expires_at);

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
