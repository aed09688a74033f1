-- Endpoints of a deployment (docs/app-urls.md, "Endpoints"): named addresses, each pinned to a revision
-- of its deployment, served by the own data plane at `<slug>--<name>.<apps domain>`. The deployment's own
-- stable URL is not a row here: it keeps following the newest good revision.
--
-- revision_id is what the endpoint should serve (written by the API); served_revision_id is what the
-- own data plane serves there now (written by the worker once the switch is done), so a client can tell
-- a move that is done from one under way. Both go with the deployment.
create table deployment_endpoints (
  deployment_id uuid not null references deployments (id) on delete cascade,
  name text not null check (name ~ '^[a-z0-9]([a-z0-9-]*[a-z0-9])?$' and length(name) <= 63 and position('--' in name) = 0),
  revision_id uuid not null references revisions (id),
  served_revision_id uuid references revisions (id) on delete set null,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  primary key (deployment_id, name)
);
create index deployment_endpoints_revision on deployment_endpoints (revision_id);

-- A change of an endpoint wakes the workers of every replica, as a change of the deployment's status
-- does (005), with the same payload.
create function slipway_notify_endpoint_change() returns trigger language plpgsql as $$
declare
  target uuid := coalesce(new.deployment_id, old.deployment_id);
  d record;
begin
  select id, active_revision_id, status into d from deployments where id = target;
  if found then
    perform pg_notify('slipway_changes', json_build_object('kind', 'deployment', 'deployment_id', d.id, 'revision_id', d.active_revision_id, 'status', d.status)::text);
  end if;
  return null;
end $$;
create trigger deployment_endpoints_notify after insert or delete or update of revision_id on deployment_endpoints
  for each row execute function slipway_notify_endpoint_change();
