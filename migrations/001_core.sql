-- Tenancy: an organization has workspaces; a resource's tenant_id is its workspace id.
create table organizations (
  id uuid primary key,
  name text not null,
  created_at timestamptz not null default now()
);

create table workspaces (
  id uuid primary key,
  organization_id uuid not null references organizations (id),
  name text not null,
  created_at timestamptz not null default now(),
  unique (organization_id, name)
);

-- API keys are stored as SHA-256 of the key (keys are 256-bit random, so a fast hash is enough);
-- a key belongs to a workspace, or (workspace_id null) to the whole organization.
create table api_keys (
  id uuid primary key,
  organization_id uuid not null references organizations (id),
  workspace_id uuid references workspaces (id),
  name text not null,
  role text not null check (role in ('admin', 'member')),
  key_hash bytea not null unique,
  key_prefix text not null,
  created_at timestamptz not null default now(),
  revoked_at timestamptz
);

create table tracing_projects (
  id uuid primary key,
  workspace_id uuid not null references workspaces (id),
  name text not null,
  created_at timestamptz not null default now(),
  unique (workspace_id, name)
);

create table listeners (
  id uuid primary key,
  workspace_id uuid not null references workspaces (id),
  compute_type text not null,
  compute_id text not null,
  compute_config jsonb not null,
  version text,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  unique (workspace_id, compute_id)
);
create index listeners_page on listeners (workspace_id, created_at desc, id desc);

-- Code-host integrations; credentials are encrypted by the service before they get here.
create table codehost_integrations (
  id uuid primary key,
  workspace_id uuid not null references workspaces (id),
  name text not null,
  api_url text not null,
  credentials_encrypted text not null,
  webhook_secret_encrypted text not null,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now()
);
create index codehost_integrations_workspace on codehost_integrations (workspace_id, created_at desc);

-- Tarballs uploaded for internal_source revisions; the file lives under the data directory.
create table source_uploads (
  id uuid primary key,
  workspace_id uuid not null references workspaces (id),
  path text not null unique,
  size_bytes bigint not null,
  sha256 text not null,
  created_at timestamptz not null default now()
);

create table deployments (
  id uuid primary key,
  workspace_id uuid not null references workspaces (id),
  name text not null,
  source text not null,
  source_config jsonb not null,
  deployment_type text not null,
  listener_id uuid references listeners (id),
  -- true when a listener (not the service's own data plane) reconciles the deployment
  remote_reconciled boolean generated always as (listener_id is not null) stored,
  status text not null,
  -- [{name, value}] with each value encrypted
  secrets jsonb not null default '[]',
  secret_references jsonb,
  image_version text,
  tracing_project_id uuid not null references tracing_projects (id),
  latest_revision_id uuid,
  active_revision_id uuid,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  unique (workspace_id, name)
);
create index deployments_page on deployments (workspace_id, created_at desc, id desc);
create index deployments_status_page on deployments (workspace_id, status, created_at desc, id desc);
create index deployments_listener on deployments (listener_id) where listener_id is not null;

create table revisions (
  id uuid primary key,
  deployment_id uuid not null references deployments (id) on delete cascade,
  workspace_id uuid not null references workspaces (id),
  number integer not null,
  status text not null,
  source text not null,
  source_revision_config jsonb not null,
  -- what the revision runs with: resource spec and build commands, and its own copy of the secrets
  snapshot jsonb not null,
  secrets jsonb not null default '[]',
  failure_reason text,
  failure_message text,
  status_changed_at timestamptz not null default now(),
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  unique (deployment_id, number)
);
create index revisions_page on revisions (deployment_id, created_at desc, id desc);
create index revisions_status on revisions (status, status_changed_at);

alter table deployments
  add foreign key (latest_revision_id) references revisions (id) deferrable initially deferred,
  add foreign key (active_revision_id) references revisions (id) deferrable initially deferred;

-- Every state transition (and every other change worth an audit line) is an event.
create table events (
  id bigserial primary key,
  workspace_id uuid not null,
  subject_type text not null,
  subject_id uuid not null,
  deployment_id uuid,
  type text not null,
  from_status text,
  to_status text,
  data jsonb not null default '{}',
  created_at timestamptz not null default now()
);
create index events_subject on events (subject_id, id);
create index events_deployment on events (deployment_id, id) where deployment_id is not null;

-- Tags: keys and their values per workspace; deployments carry values.
create table tag_keys (
  id uuid primary key,
  workspace_id uuid not null references workspaces (id),
  key text not null,
  description text,
  created_at timestamptz not null default now(),
  unique (workspace_id, key)
);

create table tag_values (
  id uuid primary key,
  tag_key_id uuid not null references tag_keys (id) on delete cascade,
  value text not null,
  created_at timestamptz not null default now(),
  unique (tag_key_id, value)
);

create table deployment_tags (
  deployment_id uuid not null references deployments (id) on delete cascade,
  tag_value_id uuid not null references tag_values (id) on delete cascade,
  primary key (deployment_id, tag_value_id)
);
create index deployment_tags_value on deployment_tags (tag_value_id, deployment_id);
