-- Upload URLs (POST /v2/deployments/{id}/upload-url, docs/langgraph.md): a URL that carries its own
-- token, good for one PUT of one tarball, for a short time. Only the SHA-256 of the token is stored.
-- `id` is also the id of the upload it writes (object_path = uploads/<id>.tar.gz). A token goes with
-- its deployment.
create table upload_tokens (
  id uuid primary key,
  workspace_id uuid not null references workspaces (id),
  deployment_id uuid not null references deployments (id) on delete cascade,
  token_hash bytea not null unique,
  object_path text not null unique,
  expires_at timestamptz not null,
  used_at timestamptz,
  created_at timestamptz not null default now()
);
create index upload_tokens_expiry on upload_tokens (expires_at);
