-- Protocol credentials (docs/langgraph.md, "Who may call MCP and A2A"): what a caller of a deployment's
-- /mcp and /a2a presents when the deployment requires one. Deployment-scoped, stored as their SHA-256,
-- revocable, like agent credentials; unlike those they open nothing on the service itself.
create table protocol_credentials (
  id uuid primary key,
  workspace_id uuid not null references workspaces (id),
  deployment_id uuid not null references deployments (id) on delete cascade,
  name text not null,
  credential_hash bytea not null unique,
  credential_prefix text not null,
  created_by text not null,
  created_at timestamptz not null default now(),
  last_used_at timestamptz,
  revoked_at timestamptz
);
create index protocol_credentials_deployment on protocol_credentials (deployment_id, created_at desc, id desc);
