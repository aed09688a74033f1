-- What a listener agent last said about the revision serving each of its deployments when that
-- revision is not healthy (its heartbeat's `deployments`, docs/listener-protocol.md#heartbeat): a
-- deployment without a row is healthy. The service compares each heartbeat with these rows and writes
-- events only on a change.
create table listener_deployment_conditions (
  deployment_id uuid primary key references deployments (id) on delete cascade,
  workspace_id uuid not null references workspaces (id),
  listener_id uuid not null references listeners (id) on delete cascade,
  revision_id uuid not null,
  condition text not null check (condition in ('update_failed', 'crash_loop')),
  reason text not null,
  message text not null,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now()
);
create index listener_deployment_conditions_listener on listener_deployment_conditions (listener_id);

-- The agent's clock when it observed the conditions of its last heartbeat that carried them: an older
-- heartbeat delivered late (a retry after a timeout, say) is ignored instead of flipping them back.
alter table listeners add column conditions_observed_at timestamptz;
