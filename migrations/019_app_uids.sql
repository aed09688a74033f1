-- The host uid each deployment's processes and writable data have when the service runs as root
-- (issue 33): one of SLIPWAY_APP_UIDS, given on its first build or start and kept while the deployment
-- exists, so that a restart gives it the same one and no other deployment gets it meanwhile.
create table app_uids (
  deployment_id uuid primary key references deployments (id) on delete cascade,
  uid integer not null unique check (uid >= 65536),
  created_at timestamptz not null default now()
);
