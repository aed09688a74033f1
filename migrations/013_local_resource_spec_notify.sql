-- A deployment on the service's own data plane runs its current resource_spec in place (the worker
-- starts or stops instances without a revision), so a change of it wakes the workers of every replica
-- at once, like a status change (005). Same payload as 005's deployment changes; a listener's
-- deployments are covered by 008's trigger already.
create function slipway_notify_local_resource_spec() returns trigger language plpgsql as $$
begin
  perform pg_notify('slipway_changes', json_build_object('kind', 'deployment', 'deployment_id', new.id, 'revision_id', new.active_revision_id, 'status', new.status)::text);
  return null;
end $$;
create trigger deployments_notify_local_resource_spec after update of source_config on deployments
  for each row when (new.listener_id is null and new.source_config->'resource_spec' is distinct from old.source_config->'resource_spec')
  execute function slipway_notify_local_resource_spec();
