-- A traffic split on an endpoint (docs/app-urls.md, "Traffic split"): beside the revision it is pinned to,
-- an endpoint may send split_weight percent (1-99) of its clients to split_revision_id, each client and
-- each LangGraph thread staying on the revision that first served it. split_rollback holds the automatic
-- rollback's thresholds (null: none). split_served_revision_id is what the own data plane serves as the
-- split's second revision now (written by its worker once the instances are healthy and the route has it).
alter table deployment_endpoints
  add column split_revision_id uuid references revisions (id),
  add column split_weight integer check (split_weight between 1 and 99),
  add column split_rollback jsonb,
  add column split_started_at timestamptz,
  add column split_served_revision_id uuid references revisions (id) on delete set null,
  add constraint deployment_endpoints_split_whole check (
    (split_revision_id is null) = (split_weight is null) and (split_revision_id is null) = (split_started_at is null)
  ),
  add constraint deployment_endpoints_split_other check (split_revision_id is null or split_revision_id <> revision_id);

-- A change of the split wakes the workers as a move does (027).
drop trigger deployment_endpoints_notify on deployment_endpoints;
create trigger deployment_endpoints_notify
  after insert or delete or update of revision_id, split_revision_id, split_weight on deployment_endpoints
  for each row execute function slipway_notify_endpoint_change();
