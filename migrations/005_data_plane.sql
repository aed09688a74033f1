-- The data plane: work on revisions is claimed with a lease (the revision table is the queue), the
-- local data plane's running apps are owned by a runner with a lease, each deployment gets its own
-- database and agent credential, and build and run output is kept as revision logs.

-- lease_owner: the worker holding the revision's current step; lease_expires_at: when another worker
-- may take it over; attempts: how many times a worker has started work on it (takeovers included).
alter table revisions
  add column lease_owner text,
  add column lease_expires_at timestamptz,
  add column attempts integer not null default 0;
create index revisions_work on revisions (status, created_at)
  where status in ('QUEUED', 'AWAITING_BUILD', 'BUILDING', 'AWAITING_DEPLOY', 'DEPLOYING');

-- The runner that serves a local deployment's active revision, and until when its lease holds.
-- delete_tracing_project: what the user asked for at delete, carried out when teardown ends.
alter table deployments
  add column runner_owner text,
  add column runner_expires_at timestamptz,
  add column delete_tracing_project boolean not null default false;
create index deployments_runner on deployments (runner_expires_at) where listener_id is null and active_revision_id is not null;
create index deployments_awaiting_delete on deployments (updated_at) where status = 'AWAITING_DELETE';

-- What the local data plane made for a deployment: its own database and role (password sealed), and
-- the agent credential it gives the app (plaintext sealed, since the app needs it at every start).
create table deployment_runtimes (
  deployment_id uuid primary key references deployments (id) on delete cascade,
  workspace_id uuid not null references workspaces (id),
  database_name text,
  role_name text,
  database_password_sealed text,
  agent_credential_id uuid,
  agent_credential_sealed text,
  created_at timestamptz not null default now()
);

-- Build output and the app's stdout/stderr, one row per line, oldest first by id.
create table revision_logs (
  id bigserial primary key,
  revision_id uuid not null references revisions (id) on delete cascade,
  type text not null check (type in ('build', 'deploy')),
  stream text not null check (stream in ('stdout', 'stderr', 'system')),
  line text not null,
  logged_at timestamptz not null default now()
);
create index revision_logs_page on revision_logs (revision_id, type, id);

-- Changes that wake the worker and the log streams of every replica, whichever replica made them.
-- Payload: {"kind": "revision"|"deployment", "deployment_id", "revision_id", "status"}.
create function slipway_notify_revision() returns trigger language plpgsql as $$
begin
  if tg_op = 'INSERT' or new.status is distinct from old.status then
    perform pg_notify('slipway_changes', json_build_object('kind', 'revision', 'deployment_id', new.deployment_id, 'revision_id', new.id, 'status', new.status)::text);
  end if;
  return null;
end $$;
create trigger revisions_notify after insert or update of status on revisions
  for each row execute function slipway_notify_revision();

create function slipway_notify_deployment() returns trigger language plpgsql as $$
begin
  if new.status is distinct from old.status or new.active_revision_id is distinct from old.active_revision_id then
    perform pg_notify('slipway_changes', json_build_object('kind', 'deployment', 'deployment_id', new.id, 'revision_id', new.active_revision_id, 'status', new.status)::text);
  end if;
  return null;
end $$;
create trigger deployments_notify after update of status, active_revision_id on deployments
  for each row execute function slipway_notify_deployment();
