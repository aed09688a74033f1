-- Database storage (issue 33): a workspace's quota of it (GiB, over its deployments on the service's own
-- data plane; null: none beyond the operator's maximum per deployment), and what the local data plane
-- last measured of each app database and did about it (src/dataplane/app-database-storage.ts):
-- writable; read_only (over its limit: new transactions read-only by default); cut_off (it went on
-- writing past its limit by the margin: its role may not log in).
alter table workspaces
  add column quota_database_storage_gi double precision check (quota_database_storage_gi >= 0);

alter table deployment_runtimes
  add column database_size_bytes bigint,
  add column database_measured_at timestamptz,
  add column database_storage_state text not null default 'writable'
    check (database_storage_state in ('writable', 'read_only', 'cut_off')),
  -- The size when the state last changed: a read_only database growing by the margin beyond it is cut off.
  add column database_state_size_bytes bigint;
