-- The listener protocol, version 1 (docs/listener-protocol.md): credentials a listener agent presents,
-- what its heartbeats report, and a wake-up for the desired-state long-poll when a listener
-- deployment's own fields (custom_url) change or its row goes.

-- One listener's credentials: 32 random bytes shown once, stored as their SHA-256 (like API keys).
-- They go with their listener.
create table listener_credentials (
  id uuid primary key,
  workspace_id uuid not null references workspaces (id),
  listener_id uuid not null references listeners (id) on delete cascade,
  credential_hash bytea not null unique,
  credential_prefix text not null,
  created_by text not null,
  created_at timestamptz not null default now(),
  last_used_at timestamptz,
  revoked_at timestamptz
);
create index listener_credentials_page on listener_credentials (listener_id, created_at desc, id desc);

-- last_seen_at: the last heartbeat or desired-state request; agent_version, watched_namespaces and
-- agent_message: what the last heartbeat said (null until the first one).
alter table listeners
  add column last_seen_at timestamptz,
  add column agent_version text,
  add column watched_namespaces text[],
  add column agent_message text;

-- The triggers of 005 notify on status and active-revision changes, which is all the worker and the
-- log streams need. A listener's desired state also holds source_config (custom_url) and the set of
-- its deployments, so those changes wake its long-poll too. Same payload as 005's, so every
-- subscriber reads it as a deployment change; only listener deployments send it.
create function slipway_notify_listener_deployment() returns trigger language plpgsql as $$
declare
  d deployments%rowtype;
begin
  if tg_op = 'DELETE' then
    d := old;
  else
    if new.source_config is not distinct from old.source_config then
      return null;
    end if;
    d := new;
  end if;
  perform pg_notify('slipway_changes', json_build_object('kind', 'deployment', 'deployment_id', d.id, 'revision_id', d.active_revision_id, 'status', d.status)::text);
  return null;
end $$;
create trigger deployments_notify_listener_config after update of source_config on deployments
  for each row when (new.listener_id is not null) execute function slipway_notify_listener_deployment();
create trigger deployments_notify_listener_delete after delete on deployments
  for each row when (old.listener_id is not null) execute function slipway_notify_listener_deployment();
