-- A listener's desired state carries the deployment's current secret_references (as it does its
-- source_config): a patch of them alone makes no revision, and must still wake the listener's
-- long-poll. The trigger of 008 notified only on source_config; this one covers both columns, with
-- the same payload.
create or replace function slipway_notify_listener_deployment() returns trigger language plpgsql as $$
declare
  d deployments%rowtype;
begin
  if tg_op = 'DELETE' then
    d := old;
  else
    if new.source_config is not distinct from old.source_config
      and new.secret_references is not distinct from old.secret_references then
      return null;
    end if;
    d := new;
  end if;
  perform pg_notify('slipway_changes', json_build_object('kind', 'deployment', 'deployment_id', d.id, 'revision_id', d.active_revision_id, 'status', d.status)::text);
  return null;
end $$;
drop trigger deployments_notify_listener_config on deployments;
create trigger deployments_notify_listener_config after update of source_config, secret_references on deployments
  for each row when (new.listener_id is not null) execute function slipway_notify_listener_deployment();
